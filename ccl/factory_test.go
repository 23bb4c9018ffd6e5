package ccl_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// cudaImpl stands in for a CUDA backend; only Type is called.
type cudaImpl struct{ ccl.Impl }

func (cudaImpl) Type() runtime.DeviceType { return runtime.CUDA }

func TestInstance(t *testing.T) {
	ccl.ResetFactories()
	t.Cleanup(ccl.ResetFactories)

	if _, err := ccl.ExistingFactory(); !errors.Is(err, ccl.StatusUnavailable) || !strings.Contains(err.Error(), "Instance(backend)") {
		t.Fatalf("ExistingFactory before Instance: %v", err)
	}
	f, err := ccl.Instance(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if f.Backend() != runtime.CPU {
		t.Errorf("Backend = %v", f.Backend())
	}
	if again, err := ccl.Instance(runtime.CPU); err != nil || again != f {
		t.Errorf("second Instance: %p, %v; want %p", again, err, f)
	}
	if got, err := ccl.ExistingFactory(); err != nil || got != f {
		t.Errorf("ExistingFactory: %p, %v; want %p", got, err, f)
	}
	// No CUDA backend is linked into this test.
	if _, err := ccl.Instance(runtime.CUDA); err == nil || !strings.Contains(err.Error(), "forgotten import") {
		t.Errorf("Instance(cuda): %v", err)
	}
	if got, err := ccl.ExistingFactory(); err != nil || got != f {
		t.Errorf("a failed Instance changed ExistingFactory: %p, %v", got, err)
	}
	ccl.AddFactory(runtime.CUDA, ccl.NewProcessGroupFactory(cudaImpl{}, nil))
	if _, err := ccl.ExistingFactory(); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "several backends (cpu, cuda)") {
		t.Errorf("ExistingFactory with two backends: %v", err)
	}
}

func TestGetOrCreateOnce(t *testing.T) {
	noLeaks(t)
	f, impl := newFactory(t, 5*time.Second)
	devs := cpuDevs(0, 4)
	const callers = 32
	got := make([]*ccl.ProcessGroup, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			got[i], errs[i] = f.GetOrCreate("dp", devs)
		})
	}
	close(start)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || got[i] != got[0] || got[i] == nil {
			t.Fatalf("caller %d: %p, %v; caller 0 got %p", i, got[i], errs[i], got[0])
		}
	}
	if n := impl.initAll.Load(); n != 1 {
		t.Errorf("CommInitAll called %d times, want 1", n)
	}
	if pg, err := f.Get("dp"); err != nil || pg != got[0] {
		t.Errorf("Get: %p, %v", pg, err)
	}
	if _, err := f.GetOrCreate("dp", cpuDevs(0, 3)); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "exists with devices [cpu:0 cpu:1 cpu:2 cpu:3]") {
		t.Errorf("same name, other devices: %v", err)
	}
	if _, err := f.GetOrCreate("tp", cpuDevs(4, 2)); err != nil {
		t.Fatal(err)
	}
	if names := f.Names(); !slices.Equal(names, []string{"dp", "tp"}) {
		t.Errorf("Names = %v", names)
	}
	if _, err := f.Get("pp"); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), `"pp"`) || !strings.Contains(err.Error(), "known: dp, tp") {
		t.Errorf("Get(unknown): %v", err)
	}
	if err := f.Destroy(); err != nil {
		t.Fatal(err)
	}
	if names := f.Names(); len(names) != 0 {
		t.Errorf("after Destroy: %v", names)
	}
	if _, err := f.Get("dp"); err == nil || !strings.Contains(err.Error(), "known: none") {
		t.Errorf("Get after Destroy: %v", err)
	}
}

func TestGetOrCreateErrors(t *testing.T) {
	noLeaks(t)
	f, impl := newFactory(t, time.Second)
	bad := []runtime.Device{{Type: runtime.CPU, Index: 1000}}
	for range 2 { // a failed creation is not remembered
		if _, err := f.GetOrCreate("bad", bad); err == nil || !strings.Contains(err.Error(), "cpu:1000") {
			t.Errorf("bad device: %v", err)
		}
	}
	if n := impl.initAll.Load(); n != 2 {
		t.Errorf("CommInitAll called %d times for two failed creations", n)
	}
	if names := f.Names(); len(names) != 0 {
		t.Errorf("Names after failures = %v", names)
	}
	for _, tc := range []struct {
		devs []runtime.Device
		msg  string
	}{
		{nil, "no devices"},
		{[]runtime.Device{{Type: runtime.CUDA}}, "cuda:0 given to a factory for cpu"},
		{[]runtime.Device{{Type: runtime.CPU}, {Type: runtime.CPU}}, "cpu:0 listed twice"},
	} {
		if _, err := f.GetOrCreate("x", tc.devs); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("GetOrCreate(%v): %v, want %q", tc.devs, err, tc.msg)
		}
	}
	mismatched := ccl.NewProcessGroupFactory(cudaImpl{}, cpuRuntime(t))
	if _, err := mismatched.GetOrCreate("x", []runtime.Device{{Type: runtime.CUDA}}); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "paired with the cpu runtime") {
		t.Errorf("mismatched backends: %v", err)
	}
}

// TestGetOrCreateRank forms a group of three "processes", each with its
// own factory, through a unique-id file.
func TestGetOrCreateRank(t *testing.T) {
	noLeaks(t)
	const n = 3
	dir := t.TempDir()
	factories := make([]*ccl.ProcessGroupFactory, n)
	impls := make([]*countingImpl, n)
	for r := range n {
		factories[r], impls[r] = newFactory(t, 5*time.Second)
	}
	devs := cpuDevs(20, n)
	pgs := make([]*ccl.ProcessGroup, n)
	ranks(t, n, func(r int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r == 0 {
			time.Sleep(20 * time.Millisecond) // the readers start first
		}
		var err error
		pgs[r], err = factories[r].GetOrCreateRank(ctx, "tp/0", n, r, devs[r], dir)
		return err
	})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("unique-id files left behind: %v", entries)
	}
	for r := range n {
		if pgs[r].Size() != n || !slices.Equal(pgs[r].Devices(), devs[r:r+1]) {
			t.Errorf("rank %d: Size %d Devices %v", r, pgs[r].Size(), pgs[r].Devices())
		}
		if got, err := pgs[r].RankOf(devs[r]); err != nil || got != r {
			t.Errorf("RankOf = %d, %v; want %d", got, err, r)
		}
		if impls[r].initRank.Load() != 1 {
			t.Errorf("rank %d: CommInitRank called %d times", r, impls[r].initRank.Load())
		}
	}
	bufs := make([]runtime.Buffer, n)
	ranks(t, n, func(r int) error {
		bufs[r] = floats(t, devs[r], values(r, 4))
		w, err := pgs[r].AllReduce(context.Background(), pgs[r].Stream(devs[r]), bufs[r], runtime.Float32, ccl.Sum)
		if err != nil {
			return err
		}
		return w.Wait(5 * time.Second)
	})
	want := make([]float32, 4)
	for i := range want {
		for r := range n {
			want[i] += value(r, i)
		}
	}
	for r := range n {
		if got := read(t, bufs[r]); !equal(got, want) {
			t.Errorf("rank %d: %v, want %v", r, got, want)
		}
	}
	// Asking again for the name returns the group; other arguments are refused.
	if pg, err := factories[1].GetOrCreateRank(context.Background(), "tp/0", n, 1, devs[1], dir); err != nil || pg != pgs[1] {
		t.Errorf("second GetOrCreateRank: %v", err)
	}
	if _, err := factories[1].GetOrCreateRank(context.Background(), "tp/0", n, 2, devs[1], dir); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "exists with rank 1 of 3") {
		t.Errorf("other rank: %v", err)
	}
}

func TestGetOrCreateRankNoRankZero(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, 5*time.Second)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := f.GetOrCreateRank(ctx, "solo", 2, 1, runtime.Device{Type: runtime.CPU, Index: 1}, dir)
	if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), "ccl-solo.id") {
		t.Errorf("no rank 0: %v", err)
	}
	if _, err := f.GetOrCreateRank(ctx, "x", 2, 2, runtime.Device{Type: runtime.CPU}, dir); !errors.Is(err, ccl.StatusInvalidArgument) {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

// A peer that never arrives: rank 0's creation returns when its context
// ends, well before the backend's own timeout (a minute here), with an
// error naming the rank missing.
func TestGetOrCreateRankHonoursContext(t *testing.T) {
	noLeaks(t)
	f := ccl.NewProcessGroupFactory(local.New(local.WithTimeout(time.Minute)), cpuRuntime(t))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	pg, err := f.GetOrCreateRank(ctx, "lonely", 2, 0, runtime.Device{Type: runtime.CPU, Index: 30}, t.TempDir())
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("GetOrCreateRank returned after %v, not when its context ended", d)
	}
	if pg != nil || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ccl.StatusTimeout) {
		t.Fatalf("GetOrCreateRank = %v, %v; want a timeout wrapping the context's deadline", pg, err)
	}
	if !strings.Contains(err.Error(), "ranks [1] had not joined") {
		t.Errorf("error %q does not name the missing rank", err)
	}
	// The failed creation is forgotten: a later call may try again.
	if names := f.Names(); len(names) != 0 {
		t.Errorf("groups after a failed creation: %v", names)
	}
}

// A nil factory, a factory without backends and a nil Work answer with
// errors instead of panicking.
func TestNilFactoryAndWork(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	for name, f := range map[string]*ccl.ProcessGroupFactory{
		"nil factory":  nil,
		"nil backends": ccl.NewProcessGroupFactory(nil, nil),
		"nil runtime":  ccl.NewProcessGroupFactory(local.New(), nil),
	} {
		if _, err := f.GetOrCreate("g", []runtime.Device{dev}); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "nil") {
			t.Errorf("%s: GetOrCreate: %v, want InvalidArgument naming what is nil", name, err)
		}
		if _, err := f.GetOrCreateRank(context.Background(), "g", 2, 0, dev, t.TempDir()); !errors.Is(err, ccl.StatusInvalidArgument) {
			t.Errorf("%s: GetOrCreateRank: %v, want InvalidArgument", name, err)
		}
		if _, err := f.Get("g"); !errors.Is(err, ccl.StatusInvalidArgument) {
			t.Errorf("%s: Get: %v, want InvalidArgument", name, err)
		}
		_ = f.Backend()
		_ = f.Names()
		if err := f.Destroy(); err != nil {
			t.Errorf("%s: Destroy: %v", name, err)
		}
	}
	var w *ccl.Work
	for name, err := range map[string]error{"Wait": w.Wait(time.Second), "Err": w.Err(), "StreamWait": w.StreamWait(nil)} {
		if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "nil *Work") {
			t.Errorf("nil Work: %s: %v, want InvalidArgument naming the nil Work", name, err)
		}
	}
	if w.Done() || w.Event() != nil {
		t.Error("nil Work: Done or Event reports something")
	}
}

// A nil process group (what a failed GetOrCreate returns) answers with
// errors instead of panicking.
func TestNilProcessGroup(t *testing.T) {
	var pg *ccl.ProcessGroup
	ctx := context.Background()
	rt := cpuRuntime(t)
	dev := runtime.Device{Type: runtime.CPU}
	buf, err := runtime.Malloc(dev, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(buf)
	s, err := runtime.NewStreamWith(rt, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ops := map[string]func() error{
		"AllReduce": func() error { _, err := pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Sum); return err },
		"Broadcast": func() error { _, err := pg.Broadcast(ctx, s, buf, runtime.Float32, 0); return err },
		"Reduce":    func() error { _, err := pg.Reduce(ctx, s, buf, runtime.Float32, ccl.Sum, 0); return err },
		"AllGather": func() error { _, err := pg.AllGather(ctx, s, buf, buf, runtime.Float32); return err },
		"ReduceScatter": func() error {
			_, err := pg.ReduceScatter(ctx, s, buf, buf, runtime.Float32, ccl.Sum)
			return err
		},
		"Send":       func() error { _, err := pg.Send(ctx, s, buf, runtime.Float32, 1); return err },
		"Recv":       func() error { _, err := pg.Recv(ctx, s, buf, runtime.Float32, 1); return err },
		"RankOf":     func() error { _, err := pg.RankOf(dev); return err },
		"Comm":       func() error { _, err := pg.Comm(dev); return err },
		"GroupStart": pg.GroupStart,
		"GroupEnd":   pg.GroupEnd,
		"Group":      func() error { return pg.Group(func() error { return nil }) },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "nil *ProcessGroup") {
			t.Errorf("nil group: %s: %v, want InvalidArgument naming the nil group", name, err)
		}
	}
	if pg.Name() != "" || pg.Size() != 0 || pg.Devices() != nil || pg.Stream(dev) != nil || pg.Backend() == runtime.CPU || pg.Backend() == runtime.CUDA {
		t.Error("nil group: Name, Size, Devices, Stream or Backend reports something")
	}
	if err := pg.Destroy(); err != nil {
		t.Errorf("nil group: Destroy: %v", err)
	}
}
