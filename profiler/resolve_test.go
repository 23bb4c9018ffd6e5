package profiler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// elapsedCounter is a backend that counts the elapsed-time queries made
// of it: the collector's completion checks.
type elapsedCounter struct {
	runtime.Impl
	calls atomic.Int64
}

func (c *elapsedCounter) EventElapsed(start, end any) (time.Duration, error) {
	c.calls.Add(1)
	return c.Impl.EventElapsed(start, end)
}

// A host far ahead of its device leaves many ranges waiting on each
// stream. A collector pass asks about the first of each recorder's
// streams and no more, however many wait behind it; once the device has
// run the work, every range still gets its device times, in order.
func TestResolveAsksOncePerWaitingStream(t *testing.T) {
	// The registered backend wrapped: the recorders' events come from it.
	base, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	impl := &elapsedCounter{Impl: base}
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithAdjacentRanges(false))
	const ranks, streams, perStream = 2, 2, 50
	gate := make(chan struct{})
	opened := false
	open := func() {
		if !opened {
			close(gate)
			opened = true
		}
	}
	defer open()
	for rank := range ranks {
		dev := runtime.Device{Type: runtime.CPU, Index: rank}
		r, err := p.NewRecorder(rank, dev)
		if err != nil {
			t.Fatal(err)
		}
		for range streams {
			s, err := runtime.NewStreamWith(impl, dev)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Destroy() })
			// Held until the gate opens: every range below waits.
			if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
				t.Fatal(err)
			}
			for range perStream {
				r.StartDevice("op", s)
				if err := cpu.Enqueue(s, func() {}); err != nil {
					t.Fatal(err)
				}
				r.End()
			}
		}
	}
	waiting := ranks * streams
	for pass := range 3 {
		before := impl.calls.Load()
		if n := len(p.Snapshot()); n != 0 {
			t.Fatalf("pass %d: %d records before the device ran anything", pass, n)
		}
		if asked := impl.calls.Load() - before; asked != int64(waiting) {
			t.Fatalf("pass %d: %d elapsed-time queries for %d waiting streams of %d ranges each; want one per stream", pass, asked, waiting, perStream)
		}
	}
	if st := p.Stats(); st.Pending != ranks*streams*perStream {
		t.Fatalf("pending %d, want %d", st.Pending, ranks*streams*perStream)
	}
	open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != ranks*streams*perStream {
		t.Fatalf("%d records, want %d", len(recs), ranks*streams*perStream)
	}
	last := map[[2]uint64]time.Duration{}
	for _, rec := range recs {
		if !rec.HasDevice {
			t.Fatalf("record without device times: %+v; stats %+v", rec, p.Stats())
		}
		k := [2]uint64{uint64(rec.Rank), rec.Stream}
		if rec.DeviceStart < last[k] {
			t.Fatalf("rank %d stream %d: a range starts on the device at %v, before the previous one's end %v", rec.Rank, rec.Stream, rec.DeviceStart, last[k])
		}
		last[k] = rec.DeviceEnd
	}
}

// Adjacent ranges of a stream share their boundary events, and a resolve
// pass places a shared start where the range before it placed its end:
// a chain of ranges resolved in one pass costs one elapsed-time query a
// range and one for the chain's first start, not two a range. The ranges
// keep their order and durations.
func TestResolveAsksOnceForASharedStart(t *testing.T) {
	base, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	impl := &elapsedCounter{Impl: base}
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU}
	// The device's clock calibrated through the counting backend, before
	// the recorder would calibrate it through the registered one: placing
	// an event on the host clock is a query too.
	if err := p.Calibrate(t.Context(), impl, dev); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewStreamWith(impl, dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	const ranges = 40
	const work = 200 * time.Microsecond
	for range ranges {
		r.StartDevice("op", s)
		if err := cpu.Enqueue(s, func() { time.Sleep(work) }); err != nil {
			t.Fatal(err)
		}
		r.End()
	}
	close(gate)
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := impl.calls.Load()
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if asked := impl.calls.Load() - before; asked != ranges+1 {
		t.Errorf("%d elapsed-time queries to resolve a chain of %d adjacent ranges; want %d, one a range and one for the first start", asked, ranges, ranges+1)
	}
	if st := p.Stats(); st.Adjacent != ranges-1 {
		t.Fatalf("%d boundary events shared by %d ranges: want %d, the ranges adjacent (stats %+v)", st.Adjacent, ranges, ranges-1, st)
	}
	recs := p.Snapshot()
	if len(recs) != ranges {
		t.Fatalf("%d records, want %d", len(recs), ranges)
	}
	var prevEnd time.Duration
	for i, rec := range recs {
		if !rec.HasDevice {
			t.Fatalf("range %d has no device times", i)
		}
		if d := rec.DeviceDuration(); d < work {
			t.Errorf("range %d: device duration %v, shorter than its work (%v)", i, d, work)
		}
		if i > 0 && rec.DeviceStart < prevEnd {
			t.Errorf("range %d starts on the device at %v, before range %d ends (%v)", i, rec.DeviceStart, i-1, prevEnd)
		}
		prevEnd = rec.DeviceEnd
	}
}
