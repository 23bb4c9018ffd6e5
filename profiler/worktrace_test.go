package profiler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// tracedBackend is a CPU backend of the test's own, a stream on it and a
// work trace of it, stopped at cleanup.
func tracedBackend(t *testing.T) (*runtime.WorkTrace, *runtime.Stream) {
	t.Helper()
	impl := cpu.New()
	s, err := runtime.NewStreamWith(impl, runtime.Device{Type: runtime.CPU})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := runtime.StartWorkTrace(impl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.Stop()
		_ = s.Destroy()
	})
	return tr, s
}

func byName(recs []profiler.Record) map[string]profiler.Record {
	m := map[string]profiler.Record{}
	for _, r := range recs {
		m[r.Name] = r
	}
	return m
}

// Ranges timed from the work trace: each gets the span of the work
// issued while it was open, when the stream ran it (here after the host
// ranges ended: the stream was held), an enclosing range the span of all
// its work, and a range whose stream ran nothing no device times; no
// event goes in the stream.
func TestWorkTraceTimesRanges(t *testing.T) {
	tr, s := tracedBackend(t)
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	const a, b = 20 * time.Millisecond, 10 * time.Millisecond
	r.StartDevice("step", s)
	r.StartDevice("a", s)
	sleepOn(t, s, a)
	r.End()
	r.StartDevice("idle", s)
	r.End()
	r.StartDevice("b", s)
	sleepOn(t, s, b)
	r.End()
	r.End()
	if n := len(p.Snapshot()); n != 0 {
		t.Fatalf("%d records before the stream ran their work", n)
	}
	if st := p.Stats(); st.Pending != 4 {
		t.Fatalf("pending %d, want the 4 ranges", st.Pending)
	}
	time.Sleep(5 * time.Millisecond)
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := byName(p.Snapshot())
	if len(recs) != 4 {
		t.Fatalf("records %v", recs)
	}
	for name, want := range map[string]time.Duration{"a": a, "b": b} {
		rec := recs[name]
		if !rec.HasDevice {
			t.Fatalf("%s: no device times", name)
		}
		// A sleep takes at least its time; how much more depends on
		// the machine's load, so only the order bounds it above.
		if d := rec.DeviceDuration(); d < want {
			t.Errorf("%s: device duration %v, want at least %v", name, d, want)
		}
	}
	if recs["a"].DeviceEnd > recs["b"].DeviceStart {
		t.Errorf("a's device span ends at %v, after b's starts (%v)", recs["a"].DeviceEnd, recs["b"].DeviceStart)
	}
	step := recs["step"]
	if !step.HasDevice || step.DeviceStart != recs["a"].DeviceStart || step.DeviceEnd != recs["b"].DeviceEnd {
		t.Errorf("step's device span %v–%v, want a's start %v to b's end %v", step.DeviceStart, step.DeviceEnd, recs["a"].DeviceStart, recs["b"].DeviceEnd)
	}
	if step.DeviceStart < step.HostEnd+4*time.Millisecond {
		t.Errorf("device start %v not after the host range's end %v and the gate", step.DeviceStart, step.HostEnd)
	}
	if recs["idle"].HasDevice {
		t.Errorf("a range whose stream ran nothing has device times %v–%v", recs["idle"].DeviceStart, recs["idle"].DeviceEnd)
	}
	if st := p.Stats(); st.Events != 0 || st.Pending != 0 || st.TraceLost != 0 {
		t.Errorf("stats %+v: want no events, nothing pending or lost", st)
	}
}

// A range is resolved without Flush once the trace reported work issued
// on its stream after it ended; the last range waits for Flush.
func TestWorkTraceResolvesOnLaterWork(t *testing.T) {
	tr, s := tracedBackend(t)
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		r.StartDevice(name, s)
		sleepOn(t, s, 2*time.Millisecond)
		r.End()
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 1 || recs[0].Name != "first" || !recs[0].HasDevice {
		t.Fatalf("after the stream ran both, records %+v: want first, with device times", recs)
	}
	if st := p.Stats(); st.Pending != 1 {
		t.Fatalf("pending %d, want the second range", st.Pending)
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs = p.Snapshot()
	if len(recs) != 2 || !recs[1].HasDevice || recs[1].DeviceStart < recs[0].DeviceEnd {
		t.Fatalf("after Flush %+v", recs)
	}
}

// Ranges waiting for work past the profiler's bound are delivered
// without device times and counted; nothing else is lost.
func TestWorkTraceBound(t *testing.T) {
	tr, s := tracedBackend(t)
	const n = 1<<16 + 100
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr), profiler.WithBufferSize(1<<17))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		r.StartDevice("empty", s) // no work: nothing later on the stream resolves them
		r.End()
	}
	recs := p.Snapshot()
	st := p.Stats()
	if len(recs) != 100 || st.TraceLost != 100 || st.Pending != n-100 {
		t.Fatalf("%d records, stats %+v: want 100 delivered and lost, %d pending", len(recs), st, n-100)
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Collected != n || st.Pending != 0 || st.Dropped != 0 {
		t.Fatalf("after Flush %+v: want all %d collected", st, n)
	}
}

// Close delivers the ranges of streams that ran all their work, timed,
// and abandons the others; a work trace and syncing each range do not go
// together.
func TestWorkTraceCloseAndMisuse(t *testing.T) {
	tr, s := tracedBackend(t)
	if _, err := profiler.New(profiler.WithWorkTrace(tr), profiler.WithSyncEachRange()); err == nil {
		t.Fatal("a work trace with sync-each-range accepted")
	}
	p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := runtime.NewStreamWith(tr.Impl(), s.Device())
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	defer func() {
		close(gate)
		_ = stuck.Destroy()
	}()
	r.StartDevice("done", s)
	sleepOn(t, s, time.Millisecond)
	r.End()
	r.StartDevice("stuck", stuck)
	if err := cpu.Enqueue(stuck, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	r.End()
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil && !errors.Is(err, profiler.ErrClosed) {
		t.Fatal(err)
	}
	recs := byName(p.Snapshot())
	if !recs["done"].HasDevice || recs["stuck"].HasDevice || !recs["stuck"].DeviceUnfinished {
		t.Fatalf("records %+v", recs)
	}
	if st := p.Stats(); st.Abandoned != 1 {
		t.Fatalf("abandoned %d, want 1", st.Abandoned)
	}
}
