package ccl_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// TestProfiledRanges: with a Recorder in the context, every operation is
// one collective range describing it.
func TestProfiledRanges(t *testing.T) {
	noLeaks(t)
	const n, count = 2, 6
	x := newProfiled(t, "prof", n)
	p, pg, devs, recs, streams := x.p, x.pg, x.devs, x.recs, x.streams
	ranks(t, n, func(r int) error {
		ctx := profiler.NewContext(context.Background(), recs[r])
		dev, s := devs[r], streams[r]
		buf := floats(t, dev, values(r, count))
		recv := floats(t, dev, make([]float32, n*count))
		small := floats(t, dev, make([]float32, count/n))
		calls := []func() (*ccl.Work, error){
			func() (*ccl.Work, error) { return pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Sum) },
			func() (*ccl.Work, error) { return pg.Broadcast(ctx, s, buf, runtime.Float32, 1) },
			func() (*ccl.Work, error) { return pg.Reduce(ctx, s, buf, runtime.Float32, ccl.Sum, 0) },
			func() (*ccl.Work, error) { return pg.AllGather(ctx, s, buf, recv, runtime.Float32) },
			func() (*ccl.Work, error) { return pg.ReduceScatter(ctx, s, buf, small, runtime.Float32, ccl.Sum) },
			func() (*ccl.Work, error) {
				if r == 0 {
					return pg.Send(ctx, s, buf, runtime.Float32, 1)
				}
				return pg.Recv(ctx, s, buf, runtime.Float32, 0)
			},
		}
		for _, call := range calls {
			w, err := call()
			if err != nil {
				return err
			}
			if err := w.Wait(5 * time.Second); err != nil {
				return err
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	bytes := int64(4 * count)
	type want struct {
		op        string
		kind      profiler.Kind
		bytes     int64
		count     int64
		root      int32
		peer      [n]int32
		busFactor float64
	}
	wants := []want{
		{"AllReduce", profiler.KindCollective, bytes, count, -1, [n]int32{-1, -1}, 1}, // 2(n−1)/n with n = 2
		{"Broadcast", profiler.KindCollective, bytes, count, 1, [n]int32{-1, -1}, 1},
		{"Reduce", profiler.KindCollective, bytes, count, 0, [n]int32{-1, -1}, 1},
		{"AllGather", profiler.KindCollective, n * bytes, count, -1, [n]int32{-1, -1}, 0.5}, // S = gathered size, (n−1)/n
		{"ReduceScatter", profiler.KindCollective, bytes, count / n, -1, [n]int32{-1, -1}, 0.5},
		{"", profiler.KindP2P, bytes, count, -1, [n]int32{1, 0}, 1},
	}
	got := map[int][]profiler.Record{}
	for _, rec := range p.Snapshot() {
		got[rec.Rank] = append(got[rec.Rank], rec)
	}
	for r := range n {
		if len(got[r]) != len(wants) {
			t.Fatalf("rank %d: %d records, want %d: %+v", r, len(got[r]), len(wants), got[r])
		}
		for i, w := range wants {
			rec := got[r][i]
			c := rec.Collective
			op := w.op
			if op == "" {
				op = map[int]string{0: "Send", 1: "Recv"}[r]
			}
			if rec.Name != op || c.Op != op || rec.Kind != w.kind {
				t.Errorf("rank %d record %d: name %q op %q kind %v, want %s %v", r, i, rec.Name, c.Op, rec.Kind, op, w.kind)
			}
			if c.Bytes != w.bytes || c.Count != w.count || c.DType != "float32" || c.Root != w.root || c.Peer != w.peer[r] {
				t.Errorf("rank %d %s: bytes %d count %d dtype %q root %d peer %d; want %d %d float32 %d %d", r, op, c.Bytes, c.Count, c.DType, c.Root, c.Peer, w.bytes, w.count, w.root, w.peer[r])
			}
			// Collectives are numbered in the group, a Send or Recv by the
			// pair: the one message from 0 to 1 is number 0.
			seq := uint64(i)
			if w.kind == profiler.KindP2P {
				seq = 0
			}
			if c.Group != "prof" || c.GroupSize != n || c.GroupRank != int32(r) || c.Seq != seq || c.BusFactor != w.busFactor {
				t.Errorf("rank %d %s: group %q size %d rank %d seq %d busFactor %v; want prof %d %d %d %v", r, op, c.Group, c.GroupSize, c.GroupRank, c.Seq, c.BusFactor, n, r, seq, w.busFactor)
			}
			if !rec.HasDevice || rec.Device != devs[r] {
				t.Errorf("rank %d %s: HasDevice %v on %v", r, op, rec.HasDevice, rec.Device)
			}
		}
	}
}

// TestGroupedCallsAreTimedAtLaunch: calls issued inside a group are
// launched by GroupEnd, so that is when their ranges are timed. Rank 0's
// send is held back 30ms on its caller's stream; rank 1's grouped receive
// must show that wait in its device time, with the labels it was issued
// under.
func TestGroupedCallsAreTimedAtLaunch(t *testing.T) {
	noLeaks(t)
	const n, count, delay = 2, 4, 30 * time.Millisecond
	x := newProfiled(t, "grouped", n)
	p, pg, devs, recs, streams := x.p, x.pg, x.devs, x.recs, x.streams
	ranks(t, n, func(r int) error {
		ctx := profiler.NewContext(context.Background(), recs[r])
		recs[r].SetMicrobatch(7)
		s := streams[r]
		buf := floats(t, devs[r], values(r, count))
		if r == 0 {
			if err := cpu.Enqueue(s, func() { time.Sleep(delay) }); err != nil {
				return err
			}
		}
		var w *ccl.Work
		err := pg.Group(func() error {
			var err error
			if r == 0 {
				w, err = pg.Send(ctx, s, buf, runtime.Float32, 1)
			} else {
				w, err = pg.Recv(ctx, s, buf, runtime.Float32, 0)
			}
			recs[r].SetMicrobatch(8) // the range keeps the labels of its issue
			return err
		})
		if err != nil {
			return err
		}
		return w.Wait(5 * time.Second)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := p.Snapshot()
	if len(got) != n {
		t.Fatalf("%d records, want one per rank: %+v", len(got), got)
	}
	for _, rec := range got {
		if !rec.HasDevice || rec.Microbatch != 7 {
			t.Errorf("rank %d %s: device time %v, microbatch %d; want a device time and microbatch 7", rec.Rank, rec.Name, rec.HasDevice, rec.Microbatch)
		}
		if rec.Rank == 1 && rec.DeviceDuration() < delay*2/3 {
			t.Errorf("grouped Recv device time %v: the wait for the delayed Send (%v) is missing", rec.DeviceDuration(), delay)
		}
	}
}

// launchingImpl launches a group's kernels as NCCL does: at GroupEnd,
// straight onto the stream's handle, which the runtime does not see
// (Stream.Ops does not move). Here the kernel is a sleep of kernel; the
// operations themselves run when issued (the local backend, ungrouped).
type launchingImpl struct {
	ccl.Impl
	mu     sync.Mutex
	stream any // the handle GroupEnd launches on
	kernel time.Duration
}

func (l *launchingImpl) GroupStart() error { return nil }

func (l *launchingImpl) GroupEnd() error {
	l.mu.Lock()
	h := l.stream
	l.mu.Unlock()
	if h == nil {
		return nil
	}
	return cpu.EnqueueHandle(h, func() { time.Sleep(l.kernel) })
}

// A group's operations are timed around its launch: a backend that puts
// their kernels on the stream's handle at GroupEnd (NCCL) gives them
// their device time, not the zero of a range whose end took its start
// event for want of anything enqueued.
func TestGroupedRangesTimeTheLaunch(t *testing.T) {
	noLeaks(t)
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const kernel = 30 * time.Millisecond
	impl := &launchingImpl{Impl: local.New(local.WithTimeout(5 * time.Second)), kernel: kernel}
	f := factoryOn(t, impl)
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("grouped", devs)
	if err != nil {
		t.Fatal(err)
	}
	impl.mu.Lock()
	impl.stream = pg.Stream(devs[0]).Handle()
	impl.mu.Unlock()
	rec, err := p.NewRecorder(0, devs[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx := profiler.NewContext(context.Background(), rec)
	buf := floats(t, devs[0], values(0, 4))
	var w *ccl.Work
	if err := pg.Group(func() error {
		var err error
		w, err = pg.AllReduce(ctx, pg.Stream(devs[0]), buf, runtime.Float32, ccl.Sum)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range p.Snapshot() {
		if r.Name != "AllReduce" {
			continue
		}
		found = true
		if !r.HasDevice || r.DeviceDuration() < kernel {
			t.Errorf("grouped AllReduce: device time %v (timed %v), want at least the %v its launch put on the stream", r.DeviceDuration(), r.HasDevice, kernel)
		}
	}
	if !found {
		t.Fatal("no AllReduce record")
	}
}

// failingLaunchImpl's GroupEnd fails without launching anything; the
// operations themselves run when issued (the local backend, ungrouped).
type failingLaunchImpl struct{ ccl.Impl }

var errLaunch = errors.New("injected launch failure")

func (failingLaunchImpl) GroupStart() error { return nil }
func (failingLaunchImpl) GroupEnd() error   { return errLaunch }

// The Works of a group whose launch failed fail too: Wait and StreamWait
// return the launch's error rather than success.
func TestGroupLaunchFailureFailsItsWorks(t *testing.T) {
	noLeaks(t)
	f := ccl.NewProcessGroupFactory(failingLaunchImpl{local.New(local.WithTimeout(5 * time.Second))}, cpuRuntime(t))
	t.Cleanup(func() { _ = f.Destroy() })
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("failing", devs)
	if err != nil {
		t.Fatal(err)
	}
	s := pg.Stream(devs[0])
	buf := floats(t, devs[0], values(0, 4))
	var w *ccl.Work
	err = pg.Group(func() error {
		var err error
		w, err = pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
		return err
	})
	if !errors.Is(err, errLaunch) {
		t.Fatalf("Group = %v, want the launch failure", err)
	}
	if err := w.Wait(time.Second); !errors.Is(err, errLaunch) {
		t.Errorf("Wait = %v, want the launch failure", err)
	}
	if !w.Done() {
		t.Error("Done = false for a Work whose launch failed")
	}
	if err := w.StreamWait(s); !errors.Is(err, errLaunch) {
		t.Errorf("StreamWait = %v, want the launch failure", err)
	}
}

// While Destroy waits for a rank's pending work (a peer that never
// arrives, up to the backend's timeout), that work's Wait keeps its own
// deadline and Done answers at once: they used to wait on the lock
// Destroy held for its whole wait.
func TestWaitDuringDestroy(t *testing.T) {
	noLeaks(t)
	const backendTimeout = 4 * time.Second
	f, _ := newFactory(t, backendTimeout)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("abandoned", devs)
	if err != nil {
		t.Fatal(err)
	}
	buf := floats(t, devs[0], values(0, 4))
	w, err := pg.AllReduce(context.Background(), pg.Stream(devs[0]), buf, runtime.Float32, ccl.Sum) // rank 1 never comes
	if err != nil {
		t.Fatal(err)
	}
	destroyed := make(chan struct{})
	go func() {
		_ = pg.Destroy() // waits for rank 0's stream until the backend gives up
		close(destroyed)
	}()
	time.Sleep(200 * time.Millisecond) // Destroy is in its wait now
	_ = w.Wait(100 * time.Millisecond)
	_ = w.Done()
	select {
	case <-destroyed:
		t.Errorf("Wait(100ms) and Done returned only after Destroy's wait of up to %v ended", backendTimeout)
	default:
	}
	<-destroyed
}

// A group opened on one process group, or on the factory, holds back the
// operations of another process group of the same factory: the backend's
// group is one. Their Works are not done before the group's GroupEnd
// launched them, and are once it has.
func TestGroupAcrossProcessGroups(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, 1)
	a, err := f.GetOrCreate("a", devs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.GetOrCreate("b", devs)
	if err != nil {
		t.Fatal(err)
	}
	buf := floats(t, devs[0], values(0, 4))
	for name, group := range map[string]func(func() error) error{"another process group": a.Group, "the factory": f.Group} {
		var w *ccl.Work
		err := group(func() error {
			var err error
			if w, err = b.AllReduce(context.Background(), b.Stream(devs[0]), buf, runtime.Float32, ccl.Sum); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
			if w.Done() {
				t.Errorf("inside a group of %s: the Work is done before the group's GroupEnd launched it", name)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("group of %s: %v", name, err)
		}
		if err := w.Wait(5 * time.Second); err != nil {
			t.Errorf("group of %s: Wait after GroupEnd: %v", name, err)
		}
	}
}
