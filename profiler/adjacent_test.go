package profiler_test

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// sleepOn enqueues d of work on s.
func sleepOn(t *testing.T, s *runtime.Stream, d time.Duration) {
	t.Helper()
	if err := cpu.Enqueue(s, func() { time.Sleep(d) }); err != nil {
		t.Fatal(err)
	}
}

// deviceRanges flushes p and returns its records by name; each must have
// device times.
func deviceRanges(t *testing.T, p *profiler.Profiler) map[string]profiler.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	out := map[string]profiler.Record{}
	for _, rec := range p.Snapshot() {
		if !rec.HasDevice {
			t.Fatalf("%s has no device time", rec.Name)
		}
		out[rec.Name] = rec
	}
	return out
}

// Ranges queued back to back on a busy stream: each starts where the
// previous ended (one shared event), and each device time is its own work's.
// Work enqueued between two ranges outside any range is not given to the
// next one, nor is time the stream spent idle: a range on an idle stream
// shares the previous range's end, and counts from its own host start.
func TestAdjacentRanges(t *testing.T) {
	const a, b, between, c, idle = 20 * time.Millisecond, 30 * time.Millisecond, 25 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: 11}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 11)
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	r.StartDevice("a", s)
	sleepOn(t, s, a)
	r.End()
	r.StartDevice("b", s) // adjacent to a
	sleepOn(t, s, b)
	r.End()
	sleepOn(t, s, between) // unprofiled work between b and c
	r.StartDevice("c", s)
	sleepOn(t, s, c)
	r.End()
	close(gate)
	// Once the stream is idle, d starts fresh.
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle)
	r.StartDevice("d", s)
	sleepOn(t, s, c)
	r.End()

	recs := deviceRanges(t, p)
	// Device times hold their work, and more when the stream's goroutine
	// is kept waiting (a loaded machine): only lower bounds are sure. What
	// sharing decides — which events are one — is checked exactly below.
	within := func(name string, want time.Duration) {
		rec := recs[name]
		if got := rec.DeviceDuration(); got < want {
			t.Errorf("%s: device time %v, want at least %v", name, got, want)
		}
	}
	within("a", a)
	within("b", b)
	within("c", c)
	within("d", c)
	if recs["b"].DeviceStart != recs["a"].DeviceEnd {
		t.Errorf("b starts at %v, a ends at %v: adjacent ranges should share the event", recs["b"].DeviceStart, recs["a"].DeviceEnd)
	}
	if gap := recs["c"].DeviceStart - recs["b"].DeviceEnd; gap < between {
		t.Errorf("c starts %v after b ends, want at least the %v of work between them", gap, between)
	}
	if gap := recs["d"].DeviceStart - recs["c"].DeviceEnd; gap < idle {
		t.Errorf("d starts %v after c ends, want at least the %v the stream was idle", gap, idle)
	}
	// d takes c's end as its start, which the device passed while the
	// stream stood idle: d counts from its host start instead.
	if recs["d"].DeviceStart != recs["d"].HostStart {
		t.Errorf("d's device time starts at %v, its host time at %v: a start the device passed before the range began should count from the range's host start", recs["d"].DeviceStart, recs["d"].HostStart)
	}
	if st := p.Stats(); st.Adjacent != 2 {
		t.Errorf("Stats().Adjacent = %d, want 2 (b, and d's start)", st.Adjacent)
	}
}

// Events that another caller records on the stream between two ranges
// (a communication backend ordering its streams against the caller's)
// take none of the stream's time: the second range still starts at the
// first one's end. A wait enqueued between them may take time, and the
// second range then starts at an event of its own, after the wait.
func TestAdjacentAcrossOtherEvents(t *testing.T) {
	const a, b, held = 20 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: 16}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s, other := cpuStream(t, 16), cpuStream(t, 16)
	untimed := func() *runtime.Event {
		ev, err := runtime.NewEvent(dev, runtime.EventDisableTiming)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ev.Destroy() })
		return ev
	}
	timed := func(name string, d time.Duration) {
		r.StartDevice(name, s)
		sleepOn(t, s, d)
		r.End()
	}
	marker, otherDone := untimed(), untimed()
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	timed("a", a)
	for range 2 { // any number of events
		if err := marker.Record(s); err != nil {
			t.Fatal(err)
		}
	}
	timed("b", b)
	// The other stream's work starts when the gate opens and outlasts
	// everything s has queued before the wait.
	otherGate := make(chan struct{})
	if err := cpu.Enqueue(other, func() { <-otherGate; time.Sleep(held) }); err != nil {
		t.Fatal(err)
	}
	if err := otherDone.Record(other); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitEvent(otherDone); err != nil {
		t.Fatal(err)
	}
	timed("c", b)
	close(gate)
	close(otherGate)

	recs := deviceRanges(t, p)
	if recs["b"].DeviceStart != recs["a"].DeviceEnd {
		t.Errorf("b starts at %v, a ends at %v: the events recorded between them should leave the boundary shared", recs["b"].DeviceStart, recs["a"].DeviceEnd)
	}
	if recs["c"].DeviceStart == recs["b"].DeviceEnd {
		t.Errorf("c starts at b's end (%v) exactly: a range after a wait must start at an event of its own", recs["b"].DeviceEnd)
	}
	// Lower bounds only (see TestAdjacentRanges).
	c := recs["c"]
	if got := c.DeviceDuration(); got < b {
		t.Errorf("c: device time %v, want at least %v", got, b)
	}
	if got := recs["c"].DeviceStart - recs["a"].DeviceStart; got < held {
		t.Errorf("c starts %v after a, want at least the %v the other stream held it", got, held)
	}
	// Recorded: a's start and end, b's end, c's start and end; shared:
	// b's start.
	if st := p.Stats(); st.Events != 5 || st.Adjacent != 1 {
		t.Errorf("Stats: %d events recorded, %d starts and ends shared; want 5 and 1", st.Events, st.Adjacent)
	}
}

// Without adjacency every range has a start event of its own.
func TestAdjacentRangesOff(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithAdjacentRanges(false))
	r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 12})
	s := cpuStream(t, 12)
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		r.StartDevice(name, s)
		sleepOn(t, s, 5*time.Millisecond)
		r.End()
	}
	close(gate)
	recs := deviceRanges(t, p)
	if recs["b"].DeviceStart == recs["a"].DeviceEnd {
		t.Errorf("b starts at a's end (%v) exactly: an event was shared although adjacency is off", recs["a"].DeviceEnd)
	}
}

// A range and the ranges nested in it share the events where nothing is
// enqueued between them: the outer range's start is its first inner
// range's, its end its last inner range's. A range with nothing enqueued
// in it takes the stream's latest event at both ends and lasts nothing.
// Stats count the events recorded and those shared.
func TestNestedRangesShareEvents(t *testing.T) {
	const a, between, c = 20 * time.Millisecond, 15 * time.Millisecond, 10 * time.Millisecond
	run := func(t *testing.T, adjacent bool) (map[string]profiler.Record, profiler.Stats) {
		p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithAdjacentRanges(adjacent))
		r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 15})
		s := cpuStream(t, 15)
		gate := make(chan struct{})
		if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
			t.Fatal(err)
		}
		r.StartDevice("outer", s)
		r.StartDevice("inner1", s)
		sleepOn(t, s, a)
		r.End()
		sleepOn(t, s, between) // the outer range's own work
		r.StartDevice("inner2", s)
		sleepOn(t, s, c)
		r.End()
		r.End()
		r.StartDevice("empty", s)
		r.End()
		close(gate)
		return deviceRanges(t, p), p.Stats()
	}

	recs, st := run(t, true)
	// Lower bounds only (see TestAdjacentRanges); the sharing is checked
	// exactly.
	for name, want := range map[string]time.Duration{"inner1": a, "inner2": c, "outer": a + between + c} {
		rec := recs[name]
		if got := rec.DeviceDuration(); got < want {
			t.Errorf("%s: device time %v, want at least %v", name, got, want)
		}
	}
	if recs["outer"].DeviceStart != recs["inner1"].DeviceStart || recs["outer"].DeviceEnd != recs["inner2"].DeviceEnd {
		t.Errorf("outer %v–%v, inner1 from %v, inner2 to %v: want the outer range's ends shared with its first and last inner ranges",
			recs["outer"].DeviceStart, recs["outer"].DeviceEnd, recs["inner1"].DeviceStart, recs["inner2"].DeviceEnd)
	}
	if e := recs["empty"]; e.DeviceDuration() != 0 || e.DeviceStart != recs["outer"].DeviceEnd {
		t.Errorf("empty range %v–%v, want no time at the outer range's end %v", e.DeviceStart, e.DeviceEnd, recs["outer"].DeviceEnd)
	}
	// Recorded: the start of outer and inner1, the end of inner1, the
	// start of inner2, the end of inner2 and outer (and empty's both).
	if st.Events != 4 || st.Adjacent != 4 {
		t.Errorf("Stats: %d events recorded, %d starts and ends shared; want 4 and 4", st.Events, st.Adjacent)
	}

	recs, st = run(t, false)
	if st.Events != 8 || st.Adjacent != 0 {
		t.Errorf("without sharing: %d events recorded, %d shared; want 8 and 0", st.Events, st.Adjacent)
	}
	if outer := recs["outer"]; outer.DeviceDuration() < a+between+c {
		t.Errorf("without sharing: outer's device time %v, want at least %v", outer.DeviceDuration(), a+between+c)
	}
}

// Many adjacent ranges while the collector resolves and recycles events
// concurrently: every range keeps its own device interval, in stream
// order, with no event handed out twice (which would show as overlapping
// or negative intervals).
func TestAdjacentRangesRecycle(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(time.Millisecond), profiler.WithEventPool(16))
	r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 13})
	s := cpuStream(t, 13)
	const n = 2000
	for i := range n {
		r.StartDevice("w", s)
		if i%7 == 0 {
			sleepOn(t, s, 50*time.Microsecond)
		}
		r.End()
		if i%97 == 0 {
			sleepOn(t, s, 20*time.Microsecond) // unprofiled work now and then
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	st := p.Stats()
	var prev profiler.Record
	timed := 0
	for i, rec := range recs {
		if !rec.HasDevice {
			continue
		}
		timed++
		if rec.DeviceEnd < rec.DeviceStart {
			t.Fatalf("record %d: device end %v before start %v", i, rec.DeviceEnd, rec.DeviceStart)
		}
		if prev.HasDevice && rec.DeviceStart < prev.DeviceEnd {
			t.Fatalf("record %d starts at %v, before the previous one ended (%v)", i, rec.DeviceStart, prev.DeviceEnd)
		}
		prev = rec
	}
	if len(recs) != n || uint64(n-timed) != st.EventDrops {
		t.Fatalf("%d records, %d device-timed, %d event drops; want %d records, the untimed all counted", len(recs), timed, st.EventDrops, n)
	}
	// Every event came back: fifteen adjacent ranges on a held stream
	// need all sixteen of the pool.
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	for range 15 {
		r.StartDevice("z", s)
		if err := cpu.Enqueue(s, func() {}); err != nil {
			t.Fatal(err)
		}
		r.End()
	}
	close(gate)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if d := p.Stats().EventDrops - st.EventDrops; d != 0 {
		t.Errorf("%d of 15 ranges found no event in a pool of 16 that should all be back", d)
	}
}

// WithDeviceDepth(1): inside a device-timed range, device ranges are host
// ranges, collectives are still device-timed, and once the outer range
// ends the next one is device-timed again.
func TestDeviceDepth(t *testing.T) {
	if _, err := profiler.New(profiler.WithDeviceDepth(-1)); err == nil {
		t.Error("New accepted a negative device depth")
	}
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithDeviceDepth(1))
	r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 14})
	s := cpuStream(t, 14)
	r.StartDevice("action", s)
	r.StartDevice("kernel", s)
	sleepOn(t, s, time.Millisecond)
	r.End()
	r.StartCollective("allreduce", s, profiler.Collective{Op: "AllReduce", Bytes: 4, Peer: -1, Root: -1})
	r.End()
	r.End()
	r.StartDevice("next", s)
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		kind      profiler.Kind
		hasDevice bool
	}{
		"action":    {profiler.KindDevice, true},
		"kernel":    {profiler.KindHost, false},
		"allreduce": {profiler.KindCollective, true},
		"next":      {profiler.KindDevice, true},
	}
	recs := p.Snapshot()
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for _, rec := range recs {
		w := want[rec.Name]
		if rec.Kind != w.kind || rec.HasDevice != w.hasDevice {
			t.Errorf("%s: kind %v, device time %v; want %v, %v", rec.Name, rec.Kind, rec.HasDevice, w.kind, w.hasDevice)
		}
	}
	if st := p.Stats(); st.EventDrops != 0 || st.Dropped != 0 {
		t.Errorf("host-timed by depth counted as lost: %+v", st)
	}
}

// A host range dropped for a full buffer, in a stack slot a device range
// used before, returned that range's events to the pool although its
// record still needed them: the next range recorded one of them again,
// and the first range's device time came out wrong (negative).
func TestDroppedHostRangeKeepsOthersEvents(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithBufferSize(1))
	r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 21})
	s := cpuStream(t, 21)
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	const first, second = 20 * time.Millisecond, 50 * time.Millisecond
	r.StartDevice("first", s)
	sleepOn(t, s, first)
	r.End() // the buffer of one range is full now
	r.Start("host")
	r.End()      // dropped
	p.Snapshot() // takes "first", which waits for its events
	r.StartDevice("second", s)
	sleepOn(t, s, second)
	r.End()
	close(gate)
	recs := deviceRanges(t, p)
	a, b := recs["first"], recs["second"]
	if got := a.DeviceDuration(); got < first || a.DeviceEnd > b.DeviceStart {
		t.Errorf("first: device time %v (%v–%v), want at least %v, ending before second starts (%v)", got, a.DeviceStart, a.DeviceEnd, first, b.DeviceStart)
	}
	if got := b.DeviceDuration(); got < second {
		t.Errorf("second: device time %v, want at least %v", got, second)
	}
	if st := p.Stats(); st.Dropped != 1 {
		t.Errorf("Stats.Dropped = %d, want 1 (host)", st.Dropped)
	}
}

// waitScene is two streams of one device and one recorder, both held
// until open is called, as a pipeline rank's compute and communication
// streams are while the host runs ahead of the device.
type waitScene struct {
	t      *testing.T
	p      *profiler.Profiler
	r      *profiler.Recorder
	dev    runtime.Device
	s, o   *runtime.Stream
	gates  []chan struct{}
	opened bool
}

func newWaitScene(t *testing.T, index int) *waitScene {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: index}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	w := &waitScene{t: t, p: p, r: r, dev: dev, s: cpuStream(t, index), o: cpuStream(t, index)}
	for _, s := range []*runtime.Stream{w.s, w.o} {
		g := make(chan struct{})
		w.gates = append(w.gates, g)
		if err := cpu.Enqueue(s, func() { <-g }); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(w.open)
	return w
}

func (w *waitScene) open() {
	if !w.opened {
		w.opened = true
		for _, g := range w.gates {
			close(g)
		}
	}
}

// timed is a device range of d on s.
func (w *waitScene) timed(name string, s *runtime.Stream, d time.Duration) {
	w.r.StartDevice(name, s)
	sleepOn(w.t, s, d)
	w.r.End()
}

// follow makes s wait for what is enqueued on from, through an untimed
// event, as a process group's communication stream follows its caller's.
func (w *waitScene) follow(s, from *runtime.Stream) {
	ev, err := runtime.NewEvent(w.dev, runtime.EventDisableTiming)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = ev.Destroy() })
	if err := ev.Record(from); err != nil {
		w.t.Fatal(err)
	}
	if err := s.WaitEvent(ev); err != nil {
		w.t.Fatal(err)
	}
}

// A range that starts after its stream was told to wait for another
// stream's latest event starts at the later of that event and its own
// stream's latest, recording no event: a Send on the communication stream
// after the compute that produced its data. Its end, after a wait for the
// other stream with nothing of its own since its start, is the later of
// the two too: a receive's range on the compute stream ends where the
// transfer it waits for does.
func TestAdjacentAcrossWaits(t *testing.T) {
	const short, long, xfer = 5 * time.Millisecond, 30 * time.Millisecond, 10 * time.Millisecond
	for _, c := range []struct {
		name      string
		prev, fwd time.Duration // the communication stream's last range, the compute stream's
	}{{"the other stream later", short, long}, {"its own stream later", long, short}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWaitScene(t, 17)
			w.timed("prev", w.s, c.prev)
			w.timed("fwd", w.o, c.fwd)
			w.follow(w.s, w.o)
			w.timed("send", w.s, xfer)
			w.r.StartDevice("recv", w.o)
			w.follow(w.o, w.s) // the compute stream waits for the transfer, no work of its own
			w.r.End()
			w.timed("next", w.o, short)
			w.open()

			recs := deviceRanges(t, w.p)
			later := max(recs["prev"].DeviceEnd, recs["fwd"].DeviceEnd)
			if recs["prev"].DeviceEnd == recs["fwd"].DeviceEnd {
				t.Fatalf("prev and fwd end at the same instant %v: the case tells nothing", later)
			}
			want := recs["fwd"].DeviceEnd
			if c.prev > c.fwd {
				want = recs["prev"].DeviceEnd
			}
			if later != want {
				t.Fatalf("the %v range ends first on the device: the streams did not run as queued", max(c.prev, c.fwd))
			}
			if got := recs["send"].DeviceStart; got != later {
				t.Errorf("send starts at %v; prev ends at %v, fwd at %v: want the later", got, recs["prev"].DeviceEnd, recs["fwd"].DeviceEnd)
			}
			if send := recs["send"]; send.DeviceDuration() < xfer {
				got := send.DeviceDuration()
				t.Errorf("send: device time %v, want at least %v", got, xfer)
			}
			if got := recs["recv"].DeviceStart; got != recs["fwd"].DeviceEnd {
				t.Errorf("recv starts at %v, fwd ends at %v: want the same", got, recs["fwd"].DeviceEnd)
			}
			if got := recs["recv"].DeviceEnd; got != recs["send"].DeviceEnd {
				t.Errorf("recv ends at %v, send at %v: want the same", got, recs["send"].DeviceEnd)
			}
			if got := recs["next"].DeviceStart; got != recs["send"].DeviceEnd {
				t.Errorf("next starts at %v, send ends at %v: want the same", got, recs["send"].DeviceEnd)
			}
			// Recorded: prev's and fwd's starts and ends, send's end and
			// next's end. Shared: send's start, recv's start and end,
			// next's start.
			if st := w.p.Stats(); st.Events != 6 || st.Adjacent != 4 {
				t.Errorf("Stats: %d events recorded, %d starts and ends shared; want 6 and 4", st.Events, st.Adjacent)
			}
		})
	}
}

// A wait for a point that is not the other stream's latest event (work was
// enqueued there after it), or for two different points, leaves the range
// to record its own start.
func TestWaitsThatCannotShare(t *testing.T) {
	t.Run("work after the other stream's latest event", func(t *testing.T) {
		w := newWaitScene(t, 18)
		w.timed("prev", w.s, time.Millisecond)
		w.timed("fwd", w.o, time.Millisecond)
		sleepOn(t, w.o, 20*time.Millisecond) // unprofiled work after fwd
		w.follow(w.s, w.o)
		w.timed("send", w.s, time.Millisecond)
		w.open()
		recs := deviceRanges(t, w.p)
		if got := recs["send"].DeviceStart - recs["fwd"].DeviceEnd; got < 20*time.Millisecond {
			t.Errorf("send starts %v after fwd ends, want at least the 20ms of work after fwd it waited for", got)
		}
		if st := w.p.Stats(); st.Events != 6 || st.Adjacent != 0 {
			t.Errorf("Stats: %d events recorded, %d shared; want 6 and 0", st.Events, st.Adjacent)
		}
	})
	t.Run("a wait on the other stream after its latest event", func(t *testing.T) {
		// fwd's end and the event s waits for are recorded with no work
		// between them, but o waits for a third stream in between: the
		// event waited for completes after that stream's work, not at
		// fwd's end.
		const held = 20 * time.Millisecond
		w := newWaitScene(t, 20)
		third := cpuStream(t, 20)
		w.timed("prev", w.s, time.Millisecond)
		w.timed("fwd", w.o, time.Millisecond)
		w.r.StartDevice("third", third)
		sleepOn(t, third, held)
		w.r.End()
		w.follow(w.o, third)
		w.follow(w.s, w.o)
		w.timed("send", w.s, time.Millisecond)
		w.open()
		recs := deviceRanges(t, w.p)
		if got, after := recs["send"].DeviceStart, recs["third"].DeviceEnd; got < after {
			t.Errorf("send starts at %v, before the end of third's work (%v) that it waited for through o", got, after)
		}
		if st := w.p.Stats(); st.Events != 8 || st.Adjacent != 0 {
			t.Errorf("Stats: %d events recorded, %d shared; want 8 and 0", st.Events, st.Adjacent)
		}
	})
	t.Run("two points", func(t *testing.T) {
		w := newWaitScene(t, 19)
		third := cpuStream(t, 19)
		w.timed("prev", w.s, time.Millisecond)
		w.timed("fwd", w.o, time.Millisecond)
		w.timed("other", third, time.Millisecond)
		w.follow(w.s, w.o)
		w.follow(w.s, third)
		w.timed("send", w.s, time.Millisecond)
		w.open()
		recs := deviceRanges(t, w.p)
		if recs["send"].DeviceStart < max(recs["fwd"].DeviceEnd, recs["other"].DeviceEnd) {
			t.Errorf("send starts at %v, before fwd's end %v or other's %v", recs["send"].DeviceStart, recs["fwd"].DeviceEnd, recs["other"].DeviceEnd)
		}
		if st := w.p.Stats(); st.Events != 8 || st.Adjacent != 0 {
			t.Errorf("Stats: %d events recorded, %d shared; want 8 and 0", st.Events, st.Adjacent)
		}
	})
}

// A stream may wait for a point the other stream has since moved past (a
// compute stream waiting for a receive issued a round earlier, with sends
// after it): the boundary shares the event the recorder recorded there,
// one of the few it keeps per stream.
func TestAdjacentAcrossWaitForEarlierPoint(t *testing.T) {
	const recv1, send2, fwd = 15 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond
	w := newWaitScene(t, 21)
	w.timed("recv1", w.s, recv1)
	done, err := runtime.NewEvent(w.dev, runtime.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = done.Destroy() })
	if err := done.Record(w.s); err != nil {
		t.Fatal(err)
	}
	w.timed("send2", w.s, send2) // the communication stream moves on
	w.timed("fwd", w.o, fwd)
	w.r.StartDevice("recv", w.o)
	if err := w.o.WaitEvent(done); err != nil {
		t.Fatal(err)
	}
	w.r.End()
	w.open()

	recs := deviceRanges(t, w.p)
	if got := recs["recv"].DeviceEnd; got != recs["recv1"].DeviceEnd {
		t.Errorf("recv ends at %v, recv1 at %v, send2 at %v: want recv1's end", got, recs["recv1"].DeviceEnd, recs["send2"].DeviceEnd)
	}
	if got := recs["recv"].DeviceStart; got != recs["fwd"].DeviceEnd {
		t.Errorf("recv starts at %v, fwd ends at %v: want the same", got, recs["fwd"].DeviceEnd)
	}
	// Recorded: recv1's start and end, send2's end, fwd's start and end.
	// Shared: send2's start, recv's start and end.
	if st := w.p.Stats(); st.Events != 5 || st.Adjacent != 3 {
		t.Errorf("Stats: %d events recorded, %d shared; want 5 and 3", st.Events, st.Adjacent)
	}
}
