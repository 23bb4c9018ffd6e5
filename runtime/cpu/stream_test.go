package cpu_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestStreamRunsInOrder(t *testing.T) {
	s := newStream(t, dev0)
	var got []int  // touched only by the stream's goroutine until Synchronize
	const n = 3000 // more than the queue holds: enqueuing blocks and resumes
	for i := range n {
		if err := cpu.Enqueue(s, func() { got = append(got, i) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("ran %d items, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("item %d ran as number %d", v, i)
		}
	}
}

// A full queue blocks the host call that enqueues until the stream makes
// room, like a GPU's launch queue.
func TestFullQueueBlocksEnqueue(t *testing.T) {
	const depth = 4
	impl := cpu.New(cpu.WithQueueDepth(depth), cpu.WithDevices(1))
	s, err := runtime.NewStreamWith(impl, dev0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	// The blocking item may or may not still be queued; fill to be sure
	// that depth items wait behind it.
	for range depth {
		if err := cpu.Enqueue(s, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	enqueued := make(chan error)
	go func() { enqueued <- cpu.Enqueue(s, func() {}) }()
	select {
	case err := <-enqueued:
		t.Fatalf("enqueue on a full stream returned (%v) before the stream made room", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	if err := <-enqueued; err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDestroyDrainsThenRefuses(t *testing.T) {
	impl := registered(t)
	s, err := runtime.NewStream(dev0)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handle()
	gate := make(chan struct{})
	var ran atomic.Int32
	if err := cpu.Enqueue(s, func() { <-gate; ran.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := cpu.Enqueue(s, func() { ran.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); err != nil { // returns at once; the work still runs
		t.Fatal(err)
	}
	close(gate)
	if err := impl.DeviceSynchronize(0); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("%d of 2 items ran after Destroy", n)
	}
	ev := newEvent(t, dev0, runtime.EventDefault)
	buf := malloc(t, dev0, 16)
	cases := []struct {
		name string
		call func() error
	}{
		{"runtime Synchronize", func() error { return s.Synchronize(context.Background()) }},
		{"runtime Destroy", s.Destroy},
		{"Enqueue", func() error { return cpu.Enqueue(s, func() {}) }},
		{"EnqueueHandle", func() error { return cpu.EnqueueHandle(h, func() {}) }},
		{"StreamDestroy", func() error { return impl.StreamDestroy(h) }},
		{"StreamSynchronize", func() error { return impl.StreamSynchronize(h) }},
		{"StreamQuery", func() error { return impl.StreamQuery(h) }},
		{"StreamWaitEvent", func() error { return impl.StreamWaitEvent(h, ev.Handle()) }},
		{"EventRecord", func() error { return impl.EventRecord(ev.Handle(), h) }},
		{"Memset", func() error { return impl.Memset(buf, 0, h) }},
		{"MallocAsync", func() error { _, err := impl.MallocAsync(8, h); return err }},
		{"Scale", func() error { return impl.Scale(h, 2, buf, 4) }},
		{"Gemm", func() error {
			return impl.Gemm(h, runtime.GemmArgs{M: 1, N: 1, K: 1, A: buf, B: buf, C: buf, LDA: 1, LDB: 1, LDC: 1, Type: runtime.Float32})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), runtime.StatusInvalidArgument) })
	}
	// The failed record left the event as it was: never recorded, so complete.
	wantStatus(t, ev.Query(), runtime.StatusSuccess)
}

func TestStreamHandleErrors(t *testing.T) {
	impl := registered(t)
	other := cpu.New(cpu.WithDevices(2))
	foreign, err := other.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.StreamDestroy(foreign)
	var nilStream *runtime.Stream
	cases := []struct {
		name string
		call func() error
	}{
		{"create bad device", func() error { _, err := impl.StreamCreate(64, 0); return err }},
		{"create negative device", func() error { _, err := impl.StreamCreate(-1, 0); return err }},
		{"create bad priority", func() error { _, err := impl.StreamCreate(0, 1); return err }},
		{"synchronize wrong type", func() error { return impl.StreamSynchronize("s") }},
		{"query nil", func() error { return impl.StreamQuery(nil) }},
		{"destroy another instance's stream", func() error { return impl.StreamDestroy(foreign) }},
		{"enqueue on nil stream", func() error { return cpu.Enqueue(nilStream, func() {}) }},
		{"enqueue on non-cpu handle", func() error { return cpu.EnqueueHandle(struct{}{}, func() {}) }},
		{"enqueue nil func", func() error { return cpu.EnqueueHandle(foreign, nil) }},
		{"priority range bad device", func() error { _, _, err := impl.StreamPriorityRange(99); return err }},
		{"device synchronize bad device", func() error { return impl.DeviceSynchronize(64) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), runtime.StatusInvalidArgument) })
	}
	// Enqueue accepts a stream of any cpu instance.
	if err := cpu.EnqueueHandle(foreign, func() {}); err != nil {
		t.Fatal(err)
	}
}

func TestPriorityStreams(t *testing.T) {
	impl := registered(t)
	least, greatest, err := impl.StreamPriorityRange(0)
	if err != nil {
		t.Fatal(err)
	}
	if least != 0 || greatest != -1 {
		t.Fatalf("priority range (%d, %d), want (0, -1)", least, greatest)
	}
	for _, p := range []int{least, greatest} {
		s, err := runtime.NewStream(dev0, runtime.WithPriority(p))
		if err != nil {
			t.Fatalf("priority %d: %v", p, err)
		}
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = runtime.NewStream(dev0, runtime.WithPriority(-2))
	wantStatus(t, err, runtime.StatusInvalidArgument)
}

func TestDevices(t *testing.T) {
	impl := cpu.New(cpu.WithDevices(4))
	if n, err := impl.DeviceCount(); err != nil || n != 4 {
		t.Fatalf("DeviceCount = %d, %v; want 4", n, err)
	}
	if n, _ := cpu.New().DeviceCount(); n != 64 {
		t.Fatalf("default DeviceCount = %d, want 64", n)
	}
	if n, _ := cpu.New(cpu.WithDevices(0)).DeviceCount(); n != 64 {
		t.Fatalf("WithDevices(0) DeviceCount = %d, want the default 64", n)
	}
	if impl.Type() != runtime.CPU || impl.Init() != nil {
		t.Fatal("Type/Init")
	}
	for _, tc := range []struct {
		index int
		want  runtime.Status
	}{{3, runtime.StatusSuccess}, {0, runtime.StatusSuccess}, {4, runtime.StatusInvalidArgument}, {-1, runtime.StatusInvalidArgument}} {
		wantStatus(t, impl.SetDevice(tc.index), tc.want)
	}
	if d, _ := impl.GetDevice(); d != 0 {
		t.Fatalf("GetDevice = %d after failed SetDevice calls, want 0", d)
	}
	// Through the runtime: an index past the count is refused.
	_, err := runtime.NewStreamWith(impl, runtime.Device{Type: runtime.CPU, Index: 4})
	wantStatus(t, err, runtime.StatusInvalidArgument)
	_, err = runtime.Malloc(runtime.Device{Type: runtime.CPU, Index: 64}, 8)
	wantStatus(t, err, runtime.StatusInvalidArgument)
}

func TestGuardSetsCurrentDevice(t *testing.T) {
	impl := registered(t)
	before, _ := impl.GetDevice()
	g, err := runtime.NewGuard(runtime.Device{Type: runtime.CPU, Index: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := impl.GetDevice(); d != 5 {
		t.Fatalf("current device %d inside the guard, want 5", d)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if d, _ := impl.GetDevice(); d != before {
		t.Fatalf("current device %d after the guard, want %d", d, before)
	}
}

// Many ranks record, wait and synchronise at once, each on its own device
// and streams, with cross-stream waits: a race-detector workout.
func TestConcurrentRanks(t *testing.T) {
	impl := cpu.New(cpu.WithDevices(8))
	var wg sync.WaitGroup
	for rank := range 8 {
		wg.Go(func() {
			dev := runtime.Device{Type: runtime.CPU, Index: rank}
			compute, err := runtime.NewStreamWith(impl, dev)
			if err != nil {
				t.Error(err)
				return
			}
			defer compute.Destroy()
			comm, err := runtime.NewStreamWith(impl, dev)
			if err != nil {
				t.Error(err)
				return
			}
			defer comm.Destroy()
			start, _ := runtime.NewEventWith(impl, dev, runtime.EventDefault)
			end, _ := runtime.NewEventWith(impl, dev, runtime.EventDefault)
			var sum, reached atomic.Int64
			for step := range 200 {
				_ = start.Record(compute)
				_ = cpu.Enqueue(compute, func() { sum.Add(int64(step)); reached.Store(int64(step)) })
				_ = end.Record(compute)
				_ = comm.WaitEvent(end)
				_ = cpu.Enqueue(comm, func() {
					if r := reached.Load(); r < int64(step) {
						t.Errorf("comm stream at step %d ran while compute had reached step %d", step, r)
					}
				})
				if step%50 == 0 {
					if _, err := runtime.Elapsed(start, end); err != nil && runtime.StatusOf(err) != runtime.StatusNotReady {
						t.Error(err)
					}
				}
			}
			if err := impl.DeviceSynchronize(rank); err != nil {
				t.Error(err)
			}
			if got := sum.Load(); got != 199*200/2 {
				t.Errorf("rank %d: sum %d", rank, got)
			}
			if _, err := runtime.Elapsed(start, end); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// Destroying a stream while other goroutines enqueue on it, some blocked on
// its full queue, makes their calls fail cleanly: no panic, no hang.
func TestDestroyWhileEnqueuing(t *testing.T) {
	impl := cpu.New(cpu.WithDevices(1), cpu.WithQueueDepth(2))
	s, err := runtime.NewStreamWith(impl, dev0)
	if err != nil {
		t.Fatal(err)
	}
	release := block(t, s)
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 8 {
		wg.Go(func() {
			for range 50 {
				err := cpu.EnqueueHandle(s.Handle(), func() {})
				if err == nil {
					ok.Add(1)
					continue
				}
				if runtime.StatusOf(err) != runtime.StatusInvalidArgument {
					t.Errorf("enqueue on a destroyed stream: %v", err)
				}
				refused.Add(1)
				return
			}
		})
	}
	time.Sleep(5 * time.Millisecond) // let producers fill the queue and block
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	release()
	wg.Wait()
	if err := impl.DeviceSynchronize(0); err != nil {
		t.Fatal(err)
	}
	if refused.Load() == 0 {
		t.Fatalf("no enqueue was refused (%d accepted)", ok.Load())
	}
}

// Stream.Ops counts every operation enqueued on the stream through the
// runtime package, and nothing done without the stream; Stream.WorkOps the
// same less the event records and the waits for another stream's known
// point, which Stream.Waits counts.
func TestStreamOpsCountsEnqueues(t *testing.T) {
	s := newStream(t, dev0)
	other := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	never := newEvent(t, dev0, runtime.EventDefault)
	a := malloc(t, dev0, 64)
	b := malloc(t, dev0, 64)
	host := make([]byte, 64)
	steps := []struct {
		name  string
		do    func() error
		adds  uint64
		work  uint64 // WorkOps: event records take none of the stream's time
		waits uint64
		recs  uint64 // Records: events recorded on s
	}{
		{"Memset on s", func() error { return runtime.Memset(a, 1, s) }, 1, 1, 0, 0},
		{"Memset without a stream", func() error { return runtime.Memset(a, 1, nil) }, 0, 0, 0, 0},
		{"Copy", func() error { return runtime.Copy(b, a, s) }, 1, 1, 0, 0},
		{"CopyToDevice", func() error { return runtime.CopyToDevice(a, host, s) }, 1, 1, 0, 0},
		{"CopyToHost", func() error { return runtime.CopyToHost(host, a, s) }, 1, 1, 0, 0},
		{"Gemm", func() error {
			return runtime.Gemm(s, runtime.GemmArgs{Type: runtime.Float32, M: 2, N: 2, K: 2, Alpha: 1, A: a, LDA: 2, B: b, LDB: 2, C: a, LDC: 2})
		}, 1, 1, 0, 0},
		{"Tanh", func() error { return runtime.Tanh(s, a, b, 4) }, 1, 1, 0, 0},
		{"EventRecord", func() error { return ev.Record(s) }, 1, 0, 0, 1},
		{"WaitEvent for s's own point", func() error { return s.WaitEvent(ev) }, 1, 0, 0, 0},
		{"EventRecord on another stream", func() error { return ev.Record(other) }, 0, 0, 0, 0},
		{"WaitEvent for another stream's point", func() error { return s.WaitEvent(ev) }, 1, 0, 1, 0},
		{"WaitEvent for an event never recorded", func() error { return s.WaitEvent(never) }, 1, 1, 0, 0},
		{"Enqueue", func() error { return cpu.Enqueue(s, func() {}) }, 1, 1, 0, 0},
		{"MarkEnqueued", func() error { s.MarkEnqueued(); return nil }, 1, 1, 0, 0},
		{"a refused Tanh", func() error {
			if runtime.Tanh(s, a, b, 1<<20) == nil {
				t.Error("Tanh beyond the buffers succeeded")
			}
			return nil
		}, 0, 0, 0, 0},
	}
	for _, st := range steps {
		before, beforeWork, beforeWaits, beforeRecs := s.Ops(), s.WorkOps(), s.Waits(), s.Records()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := s.Ops() - before; got != st.adds {
			t.Errorf("%s: Ops grew by %d, want %d", st.name, got, st.adds)
		}
		if got := s.WorkOps() - beforeWork; got != st.work {
			t.Errorf("%s: WorkOps grew by %d, want %d", st.name, got, st.work)
		}
		if got := s.Waits() - beforeWaits; got != st.waits {
			t.Errorf("%s: Waits grew by %d, want %d", st.name, got, st.waits)
		}
		if got := s.Records() - beforeRecs; got != st.recs {
			t.Errorf("%s: Records grew by %d, want %d", st.name, got, st.recs)
		}
		// The steps share buffers, and some run on the calling goroutine:
		// each waits for the one before, or they would race on a.
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Stream.WaitsAfter reports the points of other streams a stream was told
// to wait for after a given operation, while nothing but events and waits
// followed them, and says when it cannot tell.
func TestWaitsAfter(t *testing.T) {
	s := newStream(t, dev0)
	o := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDisableTiming)
	a := malloc(t, dev0, 64)
	drain := func(st *runtime.Stream) {
		if err := st.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(runtime.Memset(a, 1, o))
	must(ev.Record(o))
	at := runtime.StreamPoint{Stream: o.ID(), WorkOps: o.WorkOps(), Waits: o.Waits()}
	base := s.Ops()
	must(s.WaitEvent(ev))
	if got, ok := s.WaitsAfter(base, nil); !ok || len(got) != 1 || got[0] != at {
		t.Errorf("after one wait: %v %v, want [%v] true", got, ok, at)
	}
	if got, ok := s.WaitsAfter(s.Ops(), nil); !ok || len(got) != 0 {
		t.Errorf("after nothing: %v %v, want [] true", got, ok)
	}
	must(runtime.Memset(a, 2, s))
	if got, ok := s.WaitsAfter(base, nil); ok {
		t.Errorf("with work after the wait: %v %v, want false", got, ok)
	}
	drain(o)
	drain(s)
	// More waits than the stream remembers.
	base = s.Ops()
	var points []runtime.StreamPoint
	for i := range 5 {
		must(runtime.Memset(a, byte(i), o))
		must(ev.Record(o))
		points = append(points, runtime.StreamPoint{Stream: o.ID(), WorkOps: o.WorkOps(), Waits: o.Waits()})
		must(s.WaitEvent(ev))
		if i == 0 {
			if got, ok := s.WaitsAfter(s.Ops(), nil); !ok || len(got) != 0 {
				t.Errorf("after the first of five: %v %v, want [] true", got, ok)
			}
		}
	}
	if got, ok := s.WaitsAfter(base, nil); ok {
		t.Errorf("five waits: %v %v, want false (four are remembered)", got, ok)
	}
	got, ok := s.WaitsAfter(base+1, nil)
	slices.Reverse(got)
	if !ok || !slices.Equal(got, points[1:]) {
		t.Errorf("the last four waits: %v %v, want %v true (newest first, reversed)", got, ok, points[1:])
	}
	drain(o)
	drain(s)
}

// failingRecord is the CPU backend with event records that can be made to
// fail.
type failingRecord struct {
	runtime.Impl
	fail atomic.Bool
}

func (f *failingRecord) EventRecord(e, s any) error {
	if f.fail.Load() {
		return runtime.Errorf("EventRecord", runtime.StatusError, "refused for the test")
	}
	return f.Impl.EventRecord(e, s)
}

// An event whose last record failed stands nowhere known: a wait for it is
// counted as work of the waiting stream, not as a wait for a known point.
func TestWaitAfterAFailedRecord(t *testing.T) {
	impl := &failingRecord{Impl: cpu.New(cpu.WithDevices(1))}
	s, err := runtime.NewStreamWith(impl, dev0)
	if err != nil {
		t.Fatal(err)
	}
	o, err := runtime.NewStreamWith(impl, dev0)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := runtime.NewEventWith(impl, dev0, runtime.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ev.Destroy(); _ = s.Destroy(); _ = o.Destroy() })
	if err := ev.Record(o); err != nil {
		t.Fatal(err)
	}
	work, waits := s.WorkOps(), s.Waits()
	if err := s.WaitEvent(ev); err != nil {
		t.Fatal(err)
	}
	if s.WorkOps() != work || s.Waits() != waits+1 {
		t.Errorf("a wait for a recorded event: WorkOps +%d, Waits +%d; want +0, +1", s.WorkOps()-work, s.Waits()-waits)
	}
	impl.fail.Store(true)
	if err := ev.Record(o); err == nil {
		t.Fatal("the record did not fail")
	}
	impl.fail.Store(false)
	work, waits = s.WorkOps(), s.Waits()
	if err := s.WaitEvent(ev); err != nil {
		t.Fatal(err)
	}
	if s.WorkOps() != work+1 || s.Waits() != waits {
		t.Errorf("a wait for an event whose record failed: WorkOps +%d, Waits +%d; want +1, +0", s.WorkOps()-work, s.Waits()-waits)
	}
	for _, st := range []*runtime.Stream{s, o} {
		if err := st.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
