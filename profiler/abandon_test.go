package profiler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// hungRange is a device range recorded on a stream that never reaches it,
// with its host times bracketed on the profiler's clock.
type hungRange struct {
	name                   string
	before, between, after time.Duration // before Start, between Start and End, after End
}

// recordHung records a device range named name on s, which is held still.
func recordHung(p *profiler.Profiler, r *profiler.Recorder, s *runtime.Stream, name string) hungRange {
	h := hungRange{name: name, before: profiler.Now(p)}
	r.StartDevice(name, s)
	h.between = profiler.Now(p)
	r.End()
	h.after = profiler.Now(p)
	return h
}

// checkUnfinished checks that rec is h delivered without device times,
// marked unfinished, with the host times h bracketed.
func checkUnfinished(t *testing.T, rec profiler.Record, h hungRange, dev runtime.Device) {
	t.Helper()
	if rec.Name != h.name || rec.Kind != profiler.KindDevice || rec.Device != dev {
		t.Errorf("record %q kind %v on %v, want %q, a device range on %v", rec.Name, rec.Kind, rec.Device, h.name, dev)
	}
	if rec.HasDevice || !rec.DeviceUnfinished || rec.DeviceStart != 0 || rec.DeviceEnd != 0 {
		t.Errorf("%s: HasDevice %v, DeviceUnfinished %v, device %v–%v; want host times only, marked unfinished",
			rec.Name, rec.HasDevice, rec.DeviceUnfinished, rec.DeviceStart, rec.DeviceEnd)
	}
	if rec.HostStart < h.before || rec.HostStart > h.between || rec.HostEnd < h.between || rec.HostEnd > h.after {
		t.Errorf("%s: host %v–%v, want a start in [%v, %v] and an end in [%v, %v] (read around Start and End)",
			rec.Name, rec.HostStart, rec.HostEnd, h.before, h.between, h.between, h.after)
	}
}

// A device range whose device work never finishes (a kernel that hangs)
// stays pending, out of every sink, until AbandonPending hands it on with
// its host times only, marked unfinished and counted; a later Flush or
// Close does not hand it on again. Its events stay out of the pool.
func TestAbandonPendingDeliversHungRanges(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithMaxRecords(0),
		profiler.WithEventPool(4), profiler.WithAdjacentRanges(false))
	sink := &keepSink{} // read between calls: nothing collects in the background
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	dev := runtime.Device{Type: runtime.CPU, Index: 7}
	r, err := p.NewRecorder(7, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 7)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) }) // before the stream's Destroy (cleanups run last first)

	// A range the device finishes: resolved, with device times.
	r.StartDevice("warm-up", s)
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if recs := slices.Clone(sink.recs); len(recs) != 1 || !recs[0].HasDevice || recs[0].DeviceUnfinished {
		t.Fatalf("after the first Flush the sink has %+v, want the warm-up range with device times", recs)
	}

	// The stream hangs: nothing after this reaches the device.
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	hung := []hungRange{recordHung(p, r, s, "forward"), recordHung(p, r, s, "backward")}

	ended, end := context.WithCancel(context.Background())
	end()
	if err := p.Flush(ended); err == nil {
		t.Error("Flush with an ended context and two ranges the device never reaches: no error")
	}
	if st := p.Stats(); st.Pending != 2 || st.Abandoned != 0 || st.Collected != 1 {
		t.Errorf("before AbandonPending: %d pending, %d abandoned, %d collected; want 2, 0, 1", st.Pending, st.Abandoned, st.Collected)
	}
	if n := len(slices.Clone(sink.recs)); n != 1 {
		t.Errorf("before AbandonPending the sink has %d records, want the warm-up range only", n)
	}

	n, err := p.AbandonPending(ended)
	if err != nil || n != 2 {
		t.Fatalf("AbandonPending = %d, %v; want 2, nil", n, err)
	}
	recs := slices.Clone(sink.recs)
	if len(recs) != 3 {
		t.Fatalf("after AbandonPending the sink has %d records, want 3", len(recs))
	}
	got := recs[1:]
	slices.SortFunc(got, func(a, b profiler.Record) int { return int(a.ID - b.ID) })
	for i, h := range hung {
		checkUnfinished(t, got[i], h, dev)
	}
	st := p.Stats()
	if st.Pending != 0 || st.Abandoned != 2 || st.Collected != 3 || st.Errors != 0 || st.Discarded != 0 {
		t.Errorf("after AbandonPending: %d pending, %d abandoned, %d collected, %d errors, %d discarded; want 0, 2, 3, 0, 0",
			st.Pending, st.Abandoned, st.Collected, st.Errors, st.Discarded)
	}

	// The hung ranges' four events stay out of the pool of four: the
	// next device range finds none and is timed on the host only.
	r.StartDevice("after", s)
	r.End()
	if st := p.Stats(); st.EventDrops != 1 {
		t.Errorf("event drops %d after AbandonPending with the pool's 4 events held by the hung ranges, want 1", st.EventDrops)
	}

	if err := p.Flush(ended); err != nil {
		t.Errorf("Flush after AbandonPending: %v", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs = slices.Clone(sink.recs)
	if len(recs) != 4 || recs[3].Name != "after" || recs[3].DeviceUnfinished {
		t.Errorf("after Flush and Close the sink has %d records (last %q), want 4, the last the host-timed range", len(recs), recs[len(recs)-1].Name)
	}
	if st := p.Stats(); st.Abandoned != 2 || st.Pending != 0 {
		t.Errorf("after Close: %d abandoned, %d pending; want 2, 0", st.Abandoned, st.Pending)
	}
	if _, err := p.AbandonPending(ended); err == nil {
		t.Error("AbandonPending after Close: no error")
	}
}

// Close without Flush hands a range the device never reached to the
// sinks, before shutting them down, as AbandonPending would.
func TestCloseDeliversHungRanges(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	sink := &keepSink{} // read between calls: nothing collects in the background
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	dev := runtime.Device{Type: runtime.CPU, Index: 8}
	r, err := p.NewRecorder(8, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 8)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	h := recordHung(p, r, s, "forward")
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := slices.Clone(sink.recs)
	if len(recs) != 1 {
		t.Fatalf("after Close the sink has %d records, want 1", len(recs))
	}
	checkUnfinished(t, recs[0], h, dev)
	if st := p.Stats(); st.Abandoned != 1 || st.Pending != 0 || st.Collected != 1 {
		t.Errorf("after Close: %d abandoned, %d pending, %d collected; want 1, 0, 1", st.Abandoned, st.Pending, st.Collected)
	}
	if snap := p.Snapshot(); len(snap) != 1 || !snap[0].DeviceUnfinished {
		t.Errorf("Snapshot after Close holds %d records, want the abandoned one", len(snap))
	}
}
