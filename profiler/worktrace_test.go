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
	if st := p.Stats(); st.Events != 0 || st.Pending != 0 || st.TraceLost != 0 || st.TraceEmpty != 1 {
		t.Errorf("stats %+v: want no events, nothing pending or lost, one range whose stream ran nothing", st)
	}
}

// A range whose work ran, and was reported by the trace, before the range
// ended on the host (its thread slow, or descheduled) still gets it, and
// so does the range around it; nothing is held once no range is open.
func TestWorkTraceHoldsWorkForOpenRanges(t *testing.T) {
	tr, s := tracedBackend(t)
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	const slow = 5 * time.Millisecond
	r.StartDevice("outer", s)
	r.StartDevice("slow", s)
	sleepOn(t, s, slow)
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A collection while both ranges are open takes the work's record.
	if n := len(p.Snapshot()); n != 0 {
		t.Fatalf("%d records while the ranges are open", n)
	}
	r.End()
	r.StartDevice("next", s)
	sleepOn(t, s, time.Millisecond)
	r.End()
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := byName(p.Snapshot())
	sl, next, outer := recs["slow"], recs["next"], recs["outer"]
	if !sl.HasDevice || sl.DeviceDuration() < slow {
		t.Fatalf("slow: device times %v (%v–%v); want its work's %v or more", sl.HasDevice, sl.DeviceStart, sl.DeviceEnd, slow)
	}
	if sl.DeviceEnd > sl.HostEnd {
		t.Errorf("slow's work ended at %v, after the range ended at %v: the test did not run it first", sl.DeviceEnd, sl.HostEnd)
	}
	if !next.HasDevice || !outer.HasDevice || outer.DeviceStart != sl.DeviceStart || outer.DeviceEnd != next.DeviceEnd {
		t.Errorf("outer %v–%v, want slow's start %v to next's end %v", outer.DeviceStart, outer.DeviceEnd, sl.DeviceStart, next.DeviceEnd)
	}
	if st := p.Stats(); st.TraceEmpty != 0 || st.TraceUnheld != 0 || st.TraceLost != 0 {
		t.Errorf("stats %+v: want no range without work, nothing let go or lost", st)
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

// Work held for a range still open is bounded too: past 65,536 pieces the
// oldest are let go and counted; the range is timed from the rest.
func TestWorkTraceHeldBound(t *testing.T) {
	tr, s := tracedBackend(t)
	const n = 1<<16 + 100
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	r.StartDevice("long", s)
	for range n {
		if err := cpu.Enqueue(s, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Snapshot() // a collection while the range is open
	if st := p.Stats(); st.TraceUnheld != 100 {
		t.Fatalf("stats %+v: want the oldest 100 pieces let go", st)
	}
	r.End()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 1 || !recs[0].HasDevice || recs[0].DeviceStart < recs[0].HostStart {
		t.Fatalf("records %+v: want the long range, timed from the work held", recs)
	}
	if st := p.Stats(); st.TraceUnheld != 100 || st.TraceLost != 0 || st.TraceDropped != 0 {
		t.Errorf("stats %+v: want 100 let go, none lost or dropped", st)
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

// scriptedImpl is a CPU backend whose work trace hands over what a test
// scripts: work out of issue order, with the time before which all has
// been reported. A real trace that reorders (CUPTI's, at its buffers'
// whim) cannot be made to on demand.
type scriptedImpl struct {
	runtime.Impl
	tr *scriptedTrace
}

func (s *scriptedImpl) StartWorkTrace() (runtime.BackendWorkTrace, error) { return s.tr, nil }

type scriptedTrace struct {
	next     []runtime.Work
	complete time.Time
}

func (t *scriptedTrace) Collect(_ bool, fn func(runtime.Work)) (time.Time, error) {
	for _, w := range t.next {
		fn(w)
	}
	t.next = nil
	return t.complete, nil
}
func (t *scriptedTrace) Dropped() uint64 { return 0 }
func (t *scriptedTrace) Stop() error     { return nil }

// A trace that says before when all work has been reported is taken at
// its word, not at each stream's order: a range whose stream reported
// later work first waits until the trace says its time is complete, and
// then has all its work.
func TestWorkTraceCompleteTime(t *testing.T) {
	impl := &scriptedImpl{Impl: cpu.New(), tr: &scriptedTrace{}}
	s, err := runtime.NewStreamWith(impl, runtime.Device{Type: runtime.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Destroy() }()
	tr, err := runtime.StartWorkTrace(impl)
	if err != nil {
		t.Fatal(err)
	}
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithWorkTrace(tr))
	r, err := p.NewRecorder(0, s.Device())
	if err != nil {
		t.Fatal(err)
	}
	work := func(issued time.Time, d time.Duration) runtime.Work {
		return runtime.Work{Stream: s.Handle(), Issued: issued, Start: issued.Add(time.Millisecond), End: issued.Add(time.Millisecond + d)}
	}
	r.StartDevice("a", s)
	wa := work(time.Now(), 3*time.Millisecond)
	time.Sleep(time.Millisecond)
	r.End()
	afterA := time.Now()
	r.StartDevice("b", s)
	wb := work(time.Now(), 2*time.Millisecond)
	r.End()
	// b's work first, and the trace says only what came before a ended
	// is complete: a waits although later work on its stream came.
	impl.tr.next, impl.tr.complete = []runtime.Work{wb}, wa.Issued
	if recs := p.Snapshot(); len(recs) != 0 {
		t.Fatalf("resolved before the trace had all their work: %+v", recs)
	}
	impl.tr.next, impl.tr.complete = []runtime.Work{wa}, afterA
	recs := byName(p.Snapshot())
	if a := recs["a"]; len(recs) != 1 || !a.HasDevice || a.DeviceDuration() != 3*time.Millisecond {
		t.Fatalf("once complete past a's end: %+v, want a with its 3ms of work", recs)
	}
	impl.tr.complete = time.Now()
	recs = byName(p.Snapshot())
	if b := recs["b"]; len(recs) != 2 || b.DeviceDuration() != 2*time.Millisecond {
		t.Fatalf("records %+v, want b with its 2ms", recs)
	}
	if st := p.Stats(); st.TraceLate != 1 {
		t.Errorf("late %d, want a's work counted as reported after b's", st.TraceLate)
	}
}
