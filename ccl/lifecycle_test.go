package ccl_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// TestCollectiveSeqAcrossRanks: a collective carries the same Seq on every
// rank even when only some ranks exchanged messages before it; a Send and
// the Recv it matches (the k-th from a to b, the k-th at b from a) carry
// the same Seq too.
func TestCollectiveSeqAcrossRanks(t *testing.T) {
	noLeaks(t)
	const n = 3
	x := newProfiled(t, "seq", n)
	p, pg, devs, recs := x.p, x.pg, x.devs, x.recs
	ranks(t, n, func(r int) error {
		ctx := profiler.NewContext(context.Background(), recs[r])
		s := pg.Stream(devs[r])
		buf := floats(t, devs[r], []float32{1, 2})
		do := func(w *ccl.Work, err error) error {
			if err != nil {
				return err
			}
			return w.Wait(5 * time.Second)
		}
		// Rank 0 sends twice to rank 1; rank 2 takes no part.
		for range 2 {
			switch r {
			case 0:
				if err := do(pg.Send(ctx, s, buf, runtime.Float32, 1)); err != nil {
					return err
				}
			case 1:
				if err := do(pg.Recv(ctx, s, buf, runtime.Float32, 0)); err != nil {
					return err
				}
			}
		}
		if err := do(pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Max)); err != nil {
			return err
		}
		// Rank 2 sends once to rank 0.
		switch r {
		case 2:
			if err := do(pg.Send(ctx, s, buf, runtime.Float32, 0)); err != nil {
				return err
			}
		case 0:
			if err := do(pg.Recv(ctx, s, buf, runtime.Float32, 2)); err != nil {
				return err
			}
		}
		return do(pg.Broadcast(ctx, s, buf, runtime.Float32, 0))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type key struct {
		rank int
		op   string
	}
	got := map[key][]uint64{}
	for _, rec := range p.Snapshot() {
		k := key{rec.Rank, rec.Collective.Op}
		got[k] = append(got[k], rec.Collective.Seq)
	}
	want := map[key][]uint64{
		{0, "Send"}: {0, 1}, {1, "Recv"}: {0, 1}, // rank 0 → 1
		{2, "Send"}: {0}, {0, "Recv"}: {0}, // rank 2 → 0
		{0, "AllReduce"}: {0}, {1, "AllReduce"}: {0}, {2, "AllReduce"}: {0},
		{0, "Broadcast"}: {1}, {1, "Broadcast"}: {1}, {2, "Broadcast"}: {1},
	}
	if len(got) != len(want) {
		t.Errorf("records %v, want %v", got, want)
	}
	for k, w := range want {
		if g := got[k]; !slices.Equal(g, w) {
			t.Errorf("rank %d %s: Seq %v, want %v", k.rank, k.op, g, w)
		}
	}
}

// TestDestroyAbortFailsPendingWork: when Destroy gives up waiting for a
// rank's work and aborts its communicator, the Work of the abandoned
// operation reports a failure, not success.
func TestDestroyAbortFailsPendingWork(t *testing.T) {
	noLeaks(t)
	defer ccl.SetDestroyTimeout(50 * time.Millisecond)()
	f, _ := newFactory(t, time.Minute) // the backend itself would wait far longer
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("aborted", devs)
	if err != nil {
		t.Fatal(err)
	}
	buf := floats(t, devs[0], values(0, 2))
	w, err := pg.AllReduce(context.Background(), pg.Stream(devs[0]), buf, runtime.Float32, ccl.Sum) // rank 1 never comes
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Destroy(); err == nil || !strings.Contains(err.Error(), "aborting") {
		t.Fatalf("Destroy = %v, want the abort reported", err)
	}
	err = w.Wait(10 * time.Second)
	if err == nil || errors.Is(err, ccl.StatusTimeout) {
		t.Fatalf("Wait on the aborted AllReduce = %v, want its failure", err)
	}
	if !w.Done() || w.Err() == nil {
		t.Errorf("after the abort: Done %v Err %v, want done with an error", w.Done(), w.Err())
	}
}

// TestDestroyFailsWorkOfAbandonedGroup: a goroutine that opened a group,
// issued an operation and exited leaves a Work nothing can launch. Destroy
// fails it; before, it stayed pending for ever.
func TestDestroyFailsWorkOfAbandonedGroup(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, 2)
	pg, err := f.GetOrCreate("abandoned-group", devs)
	if err != nil {
		t.Fatal(err)
	}
	buf := floats(t, devs[0], values(0, 2))
	type result struct {
		w   *ccl.Work
		err error
	}
	done := make(chan result)
	go func() {
		if err := pg.GroupStart(); err != nil {
			done <- result{nil, err}
			return
		}
		w, err := pg.AllReduce(context.Background(), pg.Stream(devs[0]), buf, runtime.Float32, ccl.Sum)
		done <- result{w, err} // and exit with the group open
	}()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := pg.Destroy(); err != nil {
		t.Fatal(err)
	}
	err = res.w.Wait(5 * time.Second)
	if err == nil || errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), "Destroy") {
		t.Fatalf("Wait = %v, want a failure naming Destroy", err)
	}
	if !res.w.Done() {
		t.Error("Done = false after Destroy failed the Work")
	}
	if err := res.w.StreamWait(pg.Stream(devs[1])); err == nil || !strings.Contains(err.Error(), "Destroy") {
		t.Errorf("StreamWait = %v, want the failure", err)
	}
}

// slowDestroyImpl's first CommDestroy says it has begun and waits to be
// let go.
type slowDestroyImpl struct {
	ccl.Impl
	once    sync.Once
	entered chan struct{}
	proceed chan struct{}
}

func (s *slowDestroyImpl) CommDestroy(c ccl.Comm) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.proceed
	})
	return s.Impl.CommDestroy(c)
}

// TestGetOrCreateDuringDestroy: while Destroy tears a group down, the
// factory no longer hands it out: asking for its name creates a new group.
func TestGetOrCreateDuringDestroy(t *testing.T) {
	noLeaks(t)
	impl := &slowDestroyImpl{Impl: local.New(local.WithTimeout(5 * time.Second)), entered: make(chan struct{}), proceed: make(chan struct{})}
	f := factoryOn(t, impl)
	devs := cpuDevs(0, 2)
	old, err := f.GetOrCreate("reborn", devs)
	if err != nil {
		t.Fatal(err)
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- old.Destroy() }()
	<-impl.entered
	pg, err := f.GetOrCreate("reborn", devs)
	close(impl.proceed)
	if err := <-destroyed; err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if pg == old {
		t.Fatal("GetOrCreate returned the group being destroyed")
	}
	// The new group works.
	ranks(t, 2, func(r int) error {
		b := floats(t, devs[r], []float32{float32(r + 1)})
		w, err := pg.AllReduce(context.Background(), pg.Stream(devs[r]), b, runtime.Float32, ccl.Sum)
		if err != nil {
			return err
		}
		if err := w.Wait(5 * time.Second); err != nil {
			return err
		}
		if got := read(t, b); !equal(got, []float32{3}) {
			t.Errorf("rank %d: %v, want [3]", r, got)
		}
		return nil
	})
}

// panickingImpl's AllReduce panics, as a backend's bug would.
type panickingImpl struct{ ccl.Impl }

func (panickingImpl) AllReduce(runtime.Buffer, runtime.Buffer, int, runtime.DataType, ccl.ReduceOp, ccl.Comm, *runtime.Stream) error {
	panic("backend bug")
}

// TestBackendPanicEndsRange: a backend that panics while enqueueing does
// not leave the operation's range open, which would nest every later
// range of the recorder under it; the range is ended, cut short.
func TestBackendPanicEndsRange(t *testing.T) {
	noLeaks(t)
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	f := ccl.NewProcessGroupFactory(panickingImpl{local.New(local.WithTimeout(5 * time.Second))}, cpuRuntime(t))
	t.Cleanup(func() { _ = f.Destroy() })
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("panicking", devs)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := p.NewRecorder(0, devs[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx := profiler.NewContext(context.Background(), rec)
	s := pg.Stream(devs[0])
	buf := floats(t, devs[0], values(0, 2))
	func() {
		defer func() {
			if v := recover(); v != "backend bug" {
				t.Errorf("recovered %v, want the backend's panic", v)
			}
		}()
		_, _ = pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Sum)
	}()
	w, err := pg.Broadcast(ctx, s, buf, runtime.Float32, 0)
	if err != nil {
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
	got := map[string]profiler.Record{}
	for _, r := range p.Snapshot() {
		got[r.Name] = r
	}
	if len(got) != 2 {
		t.Fatalf("records %v, want an AllReduce and a Broadcast", got)
	}
	if r := got["AllReduce"]; !r.CutShort || r.Depth != 0 {
		t.Errorf("AllReduce: cut short %v, depth %d; want cut short at depth 0", r.CutShort, r.Depth)
	}
	if r := got["Broadcast"]; r.CutShort || r.Depth != 0 || r.Parent != 0 {
		t.Errorf("Broadcast: cut short %v, depth %d, parent %d; want a top-level range", r.CutShort, r.Depth, r.Parent)
	}
}

// TestGetOrCreateRankExistingWithEndedContext: asking for a group that
// exists already needs no wait, so an ended context does not refuse it.
func TestGetOrCreateRankExistingWithEndedContext(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	dir := t.TempDir()
	dev := runtime.Device{Type: runtime.CPU, Index: 3}
	pg, err := f.GetOrCreateRank(context.Background(), "one", 1, 0, dev, dir)
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 64 {
		got, err := f.GetOrCreateRank(ended, "one", 1, 0, dev, dir)
		if err != nil || got != pg {
			t.Fatalf("call %d with an ended context: %v, %v; want the existing group", i, got, err)
		}
	}
}
