package ccl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// value is rank r's element i.
func value(r, i int) float32 { return float32(r*10 + i + 1) }

func values(r, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = value(r, i)
	}
	return out
}

// produce fills buf with vals from a slow function on s, so that an
// operation not ordered after s's work would see zeros.
func produce(s *runtime.Stream, buf runtime.Buffer, vals []float32) error {
	return cpu.Enqueue(s, func() {
		time.Sleep(20 * time.Millisecond)
		f, err := cpu.Float32s(buf)
		if err == nil {
			copy(f, vals)
		}
	})
}

func TestProcessGroupOps(t *testing.T) {
	noLeaks(t)
	const n, count = 4, 3
	f, _ := newFactory(t, 10*time.Second)
	devs := cpuDevs(0, n)
	pg, err := f.GetOrCreate("ops", devs)
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]*runtime.Stream, n)
	for r := range n {
		streams[r] = stream(t, devs[r])
	}
	got := map[string][][]float32{}
	for _, k := range []string{"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "Ring", "StreamWait"} {
		got[k] = make([][]float32, n)
	}
	ctx := context.Background()
	wait := func(w *ccl.Work, err error) error {
		if err != nil {
			return err
		}
		if err := w.Wait(5 * time.Second); err != nil {
			return err
		}
		if !w.Done() || w.Err() != nil {
			return fmt.Errorf("after Wait: Done %v Err %v", w.Done(), w.Err())
		}
		return nil
	}
	ranks(t, n, func(r int) error {
		dev, s := devs[r], streams[r]

		buf := floats(t, dev, make([]float32, count))
		if err := produce(s, buf, values(r, count)); err != nil {
			return err
		}
		if err := wait(pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Sum)); err != nil {
			return err
		}
		got["AllReduce"][r] = read(t, buf)

		bc := floats(t, dev, values(r, count))
		if err := wait(pg.Broadcast(ctx, s, bc, runtime.Float32, 2)); err != nil {
			return err
		}
		got["Broadcast"][r] = read(t, bc)

		red := floats(t, dev, values(r, count))
		if err := wait(pg.Reduce(ctx, s, red, runtime.Float32, ccl.Max, 1)); err != nil {
			return err
		}
		got["Reduce"][r] = read(t, red)

		send, recv := floats(t, dev, values(r, count)), floats(t, dev, make([]float32, n*count))
		if err := wait(pg.AllGather(ctx, s, send, recv, runtime.Float32)); err != nil {
			return err
		}
		got["AllGather"][r] = read(t, recv)

		rsSend, rsRecv := floats(t, dev, values(r, n*count)), floats(t, dev, make([]float32, count))
		if err := wait(pg.ReduceScatter(ctx, s, rsSend, rsRecv, runtime.Float32, ccl.Sum)); err != nil {
			return err
		}
		got["ReduceScatter"][r] = read(t, rsRecv)

		// A ring, Recv issued before Send, inside a group.
		out, in := floats(t, dev, values(r, count)), floats(t, dev, make([]float32, count))
		var rw, sw *ccl.Work
		err := pg.Group(func() error {
			var err error
			if rw, err = pg.Recv(ctx, s, in, runtime.Float32, (r+n-1)%n); err != nil {
				return err
			}
			sw, err = pg.Send(ctx, s, out, runtime.Float32, (r+1)%n)
			return err
		})
		if err := errors.Join(err, wait(rw, nil), wait(sw, nil)); err != nil {
			return err
		}
		got["Ring"][r] = read(t, in)

		// StreamWait orders a consumer stream after the operation; the
		// host does not wait.
		sw2 := floats(t, dev, values(r, count))
		w, err := pg.AllReduce(ctx, s, sw2, runtime.Float32, ccl.Min)
		if err != nil {
			return err
		}
		consumer, err := runtime.NewStream(dev)
		if err != nil {
			return err
		}
		defer consumer.Destroy()
		if err := w.StreamWait(consumer); err != nil {
			return err
		}
		seen := make([]float32, count)
		if err := cpu.Enqueue(consumer, func() {
			f, _ := cpu.Float32s(sw2)
			copy(seen, f)
		}); err != nil {
			return err
		}
		if err := consumer.Synchronize(context.Background()); err != nil {
			return err
		}
		got["StreamWait"][r] = seen
		return nil
	})

	for r := range n {
		sum, mx, mn, bc, gathered, rs, ring := make([]float32, count), make([]float32, count), make([]float32, count), values(2, count), []float32(nil), make([]float32, count), values((r+n-1)%n, count)
		for i := range count {
			mx[i], mn[i] = value(0, i), value(0, i)
			for q := range n {
				sum[i] += value(q, i)
				mx[i] = max(mx[i], value(q, i))
				mn[i] = min(mn[i], value(q, i))
				rs[i] += value(q, r*count+i)
			}
		}
		for q := range n {
			gathered = append(gathered, values(q, count)...)
		}
		red := values(r, count) // untouched off the root
		if r == 1 {
			red = mx
		}
		for k, want := range map[string][]float32{"AllReduce": sum, "Broadcast": bc, "Reduce": red, "AllGather": gathered, "ReduceScatter": rs, "Ring": ring, "StreamWait": mn} {
			if !equal(got[k][r], want) {
				t.Errorf("%s rank %d: got %v, want %v", k, r, got[k][r], want)
			}
		}
	}
}

func TestProcessGroupAccessors(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, time.Second)
	devs := []runtime.Device{{Type: runtime.CPU, Index: 5}, {Type: runtime.CPU, Index: 3}}
	pg, err := f.GetOrCreate("acc", devs)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Name() != "acc" || pg.Backend() != runtime.CPU || pg.Size() != 2 || !slices.Equal(pg.Devices(), devs) {
		t.Errorf("Name %q Backend %v Size %d Devices %v", pg.Name(), pg.Backend(), pg.Size(), pg.Devices())
	}
	for want, dev := range devs {
		if r, err := pg.RankOf(dev); err != nil || r != want {
			t.Errorf("RankOf(%v) = %d, %v", dev, r, err)
		}
		c, err := pg.Comm(dev)
		if err != nil || c.Rank() != want || c.Size() != 2 || c.Device() != dev {
			t.Errorf("Comm(%v) = %v, %v", dev, c, err)
		}
		if s := pg.Stream(dev); s == nil || s.Device() != dev {
			t.Errorf("Stream(%v) = %v", dev, s)
		}
	}
	other := runtime.Device{Type: runtime.CPU, Index: 0}
	if _, err := pg.RankOf(other); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "cpu:0 is not a local device") {
		t.Errorf("RankOf(cpu:0): %v", err)
	}
	if _, err := pg.Comm(other); err == nil {
		t.Error("Comm(cpu:0) succeeded")
	}
	if pg.Stream(other) != nil {
		t.Error("Stream(cpu:0) is not nil")
	}
	if err := pg.GroupEnd(); !errors.Is(err, ccl.StatusInvalidArgument) {
		t.Errorf("GroupEnd without GroupStart: %v", err)
	}
}

func TestProcessGroupValidation(t *testing.T) {
	noLeaks(t)
	const n = 4
	f, _ := newFactory(t, time.Second)
	devs := cpuDevs(0, n)
	pg, err := f.GetOrCreate("val", devs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := stream(t, devs[0])
	buf := floats(t, devs[0], make([]float32, 3))
	outside := floats(t, runtime.Device{Type: runtime.CPU, Index: 9}, make([]float32, 3))
	odd, err := buf.Slice(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	otherDev := floats(t, devs[1], make([]float32, 12))
	for _, tc := range []struct {
		name string
		call func() (*ccl.Work, error)
		msg  string
	}{
		{"outside device", func() (*ccl.Work, error) { return pg.AllReduce(ctx, s, outside, runtime.Float32, ccl.Sum) }, "cpu:9 is not a local device"},
		{"ragged size", func() (*ccl.Work, error) { return pg.AllReduce(ctx, s, odd, runtime.Float32, ccl.Sum) }, "10 bytes is not a whole number of float32"},
		{"zero buffer", func() (*ccl.Work, error) { return pg.Broadcast(ctx, s, runtime.Buffer{}, runtime.Float32, 0) }, "zero buffer"},
		{"root", func() (*ccl.Work, error) { return pg.Broadcast(ctx, s, buf, runtime.Float32, n) }, "root 4 outside [0, 4)"},
		{"reduce root", func() (*ccl.Work, error) { return pg.Reduce(ctx, s, buf, runtime.Float32, ccl.Sum, -1) }, "root -1"},
		{"gather size", func() (*ccl.Work, error) { return pg.AllGather(ctx, s, buf, buf, runtime.Float32) }, "recv buffer holds 3 float32 elements, expected 12"},
		{"gather device", func() (*ccl.Work, error) { return pg.AllGather(ctx, s, buf, otherDev, runtime.Float32) }, "recv buffer on cpu:1"},
		{"scatter size", func() (*ccl.Work, error) { return pg.ReduceScatter(ctx, s, buf, buf, runtime.Float32, ccl.Sum) }, "send buffer holds 3 float32 elements, expected 12"},
		{"self send", func() (*ccl.Work, error) { return pg.Send(ctx, s, buf, runtime.Float32, 0) }, "cannot send to itself"},
		{"self recv", func() (*ccl.Work, error) { return pg.Recv(ctx, s, buf, runtime.Float32, 0) }, "cannot receive from itself"},
		{"peer range", func() (*ccl.Work, error) { return pg.Send(ctx, s, buf, runtime.Float32, 7) }, "peer 7 outside"},
		{"nil stream", func() (*ccl.Work, error) { return pg.AllReduce(ctx, nil, buf, runtime.Float32, ccl.Sum) }, "nil stream"},
		{"bad dtype", func() (*ccl.Work, error) { return pg.AllReduce(ctx, s, buf, runtime.DataType(99), ccl.Sum) }, "unsupported data type 99"},
	} {
		w, err := tc.call()
		if w != nil || !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, %v; want InvalidArgument saying %q", tc.name, w, err, tc.msg)
		}
	}
	// Refused calls issued nothing: the group still works.
	ranks(t, n, func(r int) error {
		b := floats(t, devs[r], []float32{1})
		w, err := pg.AllReduce(ctx, pg.Stream(devs[r]), b, runtime.Float32, ccl.Sum)
		if err != nil {
			return err
		}
		return w.Wait(5 * time.Second)
	})
}

// TestWorkWaitTimeout: Wait gives up with a timeout naming the operation,
// group and rank while a peer is late, and succeeds once it arrives.
func TestWorkWaitTimeout(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 10*time.Second)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("late", devs)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := stream(t, devs[0]), stream(t, devs[1])
	b0, b1 := floats(t, devs[0], []float32{1, 2}), floats(t, devs[1], []float32{10, 20})
	w0, err := pg.AllReduce(context.Background(), s0, b0, runtime.Float32, ccl.Sum)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = w0.Wait(50 * time.Millisecond)
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Errorf("Wait(50ms) returned after %v", d)
	}
	if !errors.Is(err, ccl.StatusTimeout) {
		t.Fatalf("Wait: %v, want a timeout", err)
	}
	for _, s := range []string{"AllReduce", `group "late"`, "rank 0", "50ms"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	// Wait(0) only asks: its error says the operation is not complete,
	// not that it was waited for.
	if err := w0.Wait(0); !errors.Is(err, ccl.StatusTimeout) || !strings.HasSuffix(err.Error(), "operation #0 not complete") {
		t.Errorf("Wait(0): %v, want a timeout ending %q", err, "operation #0 not complete")
	}
	if w0.Done() || w0.Err() != nil {
		t.Errorf("pending Work: Done %v Err %v", w0.Done(), w0.Err())
	}
	w1, err := pg.AllReduce(context.Background(), s1, b1, runtime.Float32, ccl.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w0.Wait(5*time.Second), w1.Wait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, b0); !equal(got, []float32{11, 22}) {
		t.Errorf("result %v", got)
	}
}

// TestWorkPeerFailure: a rank that never arrives surfaces through Wait as
// the backend's error, well before Wait's own timeout.
func TestWorkPeerFailure(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 100*time.Millisecond)
	devs := cpuDevs(0, 3)
	pg, err := f.GetOrCreate("broken", devs)
	if err != nil {
		t.Fatal(err)
	}
	works := make([]*ccl.Work, 2)
	for r := range 2 {
		s := stream(t, devs[r])
		if works[r], err = pg.AllReduce(context.Background(), s, floats(t, devs[r], []float32{1}), runtime.Float32, ccl.Sum); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for r, w := range works {
		err := w.Wait(10 * time.Second)
		if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), "ranks [2] did not arrive") || !strings.Contains(err.Error(), `group "broken"`) {
			t.Errorf("rank %d: %v", r, err)
		}
		if !w.Done() || !errors.Is(w.Err(), ccl.StatusTimeout) {
			t.Errorf("rank %d after failure: Done %v Err %v", r, w.Done(), w.Err())
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the failure took %v to surface", d)
	}
	// Later calls fail at once with the stored error.
	s2 := stream(t, devs[2])
	if _, err := pg.AllReduce(context.Background(), s2, floats(t, devs[2], []float32{1}), runtime.Float32, ccl.Sum); !errors.Is(err, ccl.StatusTimeout) {
		t.Errorf("call on the failed group: %v", err)
	}
}

// TestGroupHoldsWork: a Work issued inside a group completes only after
// GroupEnd; before, Wait says so and StreamWait refuses.
func TestGroupHoldsWork(t *testing.T) {
	noLeaks(t)
	const n = 3
	f, _ := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, n)
	pg, err := f.GetOrCreate("held", devs)
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.GroupStart(); err != nil {
		t.Fatal(err)
	}
	// One goroutine drives every rank, Recv before Send.
	ins, works := ringShift(t, pg, devs)
	err = works[0].Wait(10 * time.Millisecond)
	if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), "GroupEnd") {
		t.Errorf("Wait inside the group: %v", err)
	}
	if err := works[0].StreamWait(pg.Stream(devs[0])); !errors.Is(err, ccl.StatusInvalidArgument) {
		t.Errorf("StreamWait inside the group: %v", err)
	}
	if works[0].Done() {
		t.Error("Done inside the group")
	}
	if err := pg.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	checkRingShift(t, ins, works)
}

func TestProcessGroupDestroy(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, time.Second)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("gone", devs)
	if err != nil {
		t.Fatal(err)
	}
	s := stream(t, devs[0])
	if err := pg.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pg.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := pg.AllReduce(context.Background(), s, floats(t, devs[0], []float32{1}), runtime.Float32, ccl.Sum); err == nil || !strings.Contains(err.Error(), "after Destroy") {
		t.Errorf("call after Destroy: %v", err)
	}
	if _, err := f.Get("gone"); err == nil {
		t.Error("the factory still has the destroyed group")
	}
	// The name can be used again.
	pg2, err := f.GetOrCreate("gone", devs)
	if err != nil || pg2 == pg {
		t.Fatalf("recreate: %v, same group %v", err, pg2 == pg)
	}
}

// TestGroupIsPerGoroutine: a group open on one goroutine does not hold
// back the Works another goroutine issues.
func TestGroupIsPerGoroutine(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("scoped", devs)
	if err != nil {
		t.Fatal(err)
	}
	bufs := []runtime.Buffer{floats(t, devs[0], []float32{1}), floats(t, devs[1], []float32{2})}
	if err := pg.GroupStart(); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		var errs []error
		works := make([]*ccl.Work, 2)
		for r := range 2 {
			var err error
			works[r], err = pg.AllReduce(context.Background(), pg.Stream(devs[r]), bufs[r], runtime.Float32, ccl.Sum)
			errs = append(errs, err)
		}
		for r, w := range works {
			if w != nil {
				errs = append(errs, w.Wait(5*time.Second), w.StreamWait(pg.Stream(devs[r])))
			}
		}
		errc <- errors.Join(errs...)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := pg.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, bufs[1]); !equal(got, []float32{3}) {
		t.Errorf("result %v", got)
	}
}

// waitCounting is the CPU runtime, counting stream waits.
type waitCounting struct {
	runtime.Impl
	waits atomic.Int32
}

func (w *waitCounting) StreamWaitEvent(stream, event any) error {
	w.waits.Add(1)
	return w.Impl.StreamWaitEvent(stream, event)
}

// TestOwnStreamNeedsNoWait: an operation issued from the caller's stream
// makes the group's stream wait for it; one issued from the group's own
// stream (ProcessGroup.Stream) is ordered by the stream itself and costs
// no wait. Both see what was produced before them.
func TestOwnStreamNeedsNoWait(t *testing.T) {
	noLeaks(t)
	const n = 2
	rt := &waitCounting{Impl: cpuRuntime(t)}
	f := ccl.NewProcessGroupFactory(local.New(local.WithTimeout(10*time.Second)), rt)
	defer f.Destroy()
	devs := cpuDevs(0, n)
	pg, err := f.GetOrCreate("own-stream", devs)
	if err != nil {
		t.Fatal(err)
	}
	for _, own := range []bool{false, true} {
		before := rt.waits.Load()
		ranks(t, n, func(r int) error {
			s := pg.Stream(devs[r])
			if !own {
				var err error
				if s, err = runtime.NewStreamWith(rt, devs[r]); err != nil {
					return err
				}
				defer s.Destroy()
			}
			buf, err := runtime.Malloc(devs[r], 4*3)
			if err != nil {
				return err
			}
			defer runtime.Free(buf)
			if err := produce(s, buf, values(r, 3)); err != nil {
				return err
			}
			w, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
			if err != nil {
				return err
			}
			if err := w.Wait(5 * time.Second); err != nil {
				return err
			}
			got, err := cpu.Float32s(buf)
			if err != nil {
				return err
			}
			for i, v := range got {
				if want := value(0, i) + value(1, i); v != want {
					return fmt.Errorf("own stream %v: element %d = %v, want %v", own, i, v, want)
				}
			}
			return nil
		})
		waits := rt.waits.Load() - before
		if want := map[bool]int32{false: n, true: 0}[own]; waits != want {
			t.Errorf("own stream %v: %d stream waits, want %d", own, waits, want)
		}
	}
}

// TestGroupLeftOpenByExitedGoroutine: a goroutine that exits with a group
// open takes the group with it; later goroutines, which the runtime may
// give the exited one's descriptor, start with no group.
func TestGroupLeftOpenByExitedGoroutine(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("abandoned", devs)
	if err != nil {
		t.Fatal(err)
	}
	bufs := []runtime.Buffer{floats(t, devs[0], []float32{1}), floats(t, devs[1], []float32{2})}
	opened := make(chan error)
	go func() { opened <- pg.GroupStart() }()
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		errc := make(chan error, 1)
		go func() {
			var errs []error
			var works []*ccl.Work
			for r := range 2 {
				w, err := pg.AllReduce(context.Background(), pg.Stream(devs[r]), bufs[r], runtime.Float32, ccl.Sum)
				errs = append(errs, err)
				if w != nil {
					works = append(works, w)
				}
			}
			for _, w := range works {
				errs = append(errs, w.Wait(5*time.Second))
			}
			errc <- errors.Join(errs...)
		}()
		if err := <-errc; err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
}

// TestGroupSpansFactoriesOfOneBackend: the backend groups a goroutine's
// operations whichever factory opened the group, so an operation of one
// factory's process group issued inside another factory's GroupStart
// region on the same backend is held back until that region's GroupEnd,
// not reported complete before the backend has launched it.
func TestGroupSpansFactoriesOfOneBackend(t *testing.T) {
	noLeaks(t)
	const n = 2
	impl := local.New(local.WithTimeout(5 * time.Second))
	fa, fb := factoryOn(t, impl), factoryOn(t, impl)
	devs := cpuDevs(0, n)
	pg, err := fb.GetOrCreate("other-factory", devs)
	if err != nil {
		t.Fatal(err)
	}
	if err := fa.GroupStart(); err != nil {
		t.Fatal(err)
	}
	ins, works := ringShift(t, pg, devs)
	if works[0].Done() {
		t.Error("a Recv issued inside the other factory's group is done before its GroupEnd")
	}
	if err := works[0].Wait(10 * time.Millisecond); !errors.Is(err, ccl.StatusTimeout) {
		t.Errorf("Wait inside the group: %v", err)
	}
	if err := fa.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	checkRingShift(t, ins, works)
}

// ringShift issues, from the calling goroutine, a Recv from the next rank
// and a Send to the previous one on every rank of pg (devs): rank r sends
// values(r, 2). It returns each rank's receive buffer and the Works.
func ringShift(t *testing.T, pg *ccl.ProcessGroup, devs []runtime.Device) (ins []runtime.Buffer, works []*ccl.Work) {
	t.Helper()
	n := len(devs)
	ctx := context.Background()
	ins = make([]runtime.Buffer, n)
	for r := range n {
		s := stream(t, devs[r])
		ins[r] = floats(t, devs[r], make([]float32, 2))
		rw, err := pg.Recv(ctx, s, ins[r], runtime.Float32, (r+1)%n)
		if err != nil {
			t.Fatal(err)
		}
		sw, err := pg.Send(ctx, s, floats(t, devs[r], values(r, 2)), runtime.Float32, (r+n-1)%n)
		if err != nil {
			t.Fatal(err)
		}
		works = append(works, rw, sw)
	}
	return ins, works
}

// checkRingShift waits for ringShift's Works and checks that each rank
// received the next one's values.
func checkRingShift(t *testing.T, ins []runtime.Buffer, works []*ccl.Work) {
	t.Helper()
	for i, w := range works {
		if err := w.Wait(5 * time.Second); err != nil {
			t.Fatalf("work %d: %v", i, err)
		}
	}
	n := len(ins)
	for r := range n {
		if got, want := read(t, ins[r]), values((r+1)%n, 2); !equal(got, want) {
			t.Errorf("rank %d received %v, want %v", r, got, want)
		}
	}
}
