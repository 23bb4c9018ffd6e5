package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// call runs f and turns a panic into a test error, so that one misuse
// that crashes does not hide the others.
func call(t *testing.T, name string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// wantInvalid checks that f returns an error wrapping InvalidArgument.
func wantInvalid(t *testing.T, name string, f func() error) {
	t.Helper()
	if err := call(t, name, f); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("%s: %v, want an error wrapping InvalidArgument", name, err)
	}
}

// A nil backend given to the registry-bypassing constructors is an
// error, as it is for Register.
func TestConstructorsRefuseNilBackend(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	var typedNil *cpu.Impl
	for name, impl := range map[string]runtime.Impl{"nil": nil, "typed nil": typedNil} {
		wantInvalid(t, "NewStreamWith "+name, func() error {
			_, err := runtime.NewStreamWith(impl, dev)
			return err
		})
		wantInvalid(t, "NewEventWith "+name, func() error {
			_, err := runtime.NewEventWith(impl, dev, runtime.EventDefault)
			return err
		})
	}
}

// Streams and events not made by NewStream and NewEvent (the zero value)
// are refused by every operation, not dereferenced.
func TestZeroStreamAndEventRefused(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ev, err := runtime.NewEvent(dev, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	b, err := runtime.Malloc(dev, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	streamOps := map[string]func(zs *runtime.Stream) error{
		"Query":              func(zs *runtime.Stream) error { return zs.Query() },
		"Synchronize":        func(zs *runtime.Stream) error { return zs.Synchronize(context.Background()) },
		"Synchronize ctx":    func(zs *runtime.Stream) error { return zs.Synchronize(ctx) },
		"Destroy":            func(zs *runtime.Stream) error { return zs.Destroy() },
		"WaitEvent":          func(zs *runtime.Stream) error { return zs.WaitEvent(ev) },
		"Event.Record":       func(zs *runtime.Stream) error { return ev.Record(zs) },
		"Memset":             func(zs *runtime.Stream) error { return runtime.Memset(b, 0, zs) },
		"MallocAsync":        func(zs *runtime.Stream) error { _, err := runtime.MallocAsync(8, zs); return err },
		"FreeAsync":          func(zs *runtime.Stream) error { return runtime.FreeAsync(b, zs) },
		"Sleep":              func(zs *runtime.Stream) error { return runtime.Sleep(zs, time.Millisecond) },
		"Scale":              func(zs *runtime.Stream) error { return runtime.Scale(zs, 2, b, 4) },
		"Destroy then Query": func(zs *runtime.Stream) error { zs.Destroy(); return zs.Query() },
	}
	for name, op := range streamOps {
		wantInvalid(t, "zero Stream "+name, func() error { return op(new(runtime.Stream)) })
	}

	eventOps := map[string]func(ze *runtime.Event) error{
		"Query":              func(ze *runtime.Event) error { return ze.Query() },
		"Synchronize":        func(ze *runtime.Event) error { return ze.Synchronize(context.Background()) },
		"Synchronize ctx":    func(ze *runtime.Event) error { return ze.Synchronize(ctx) },
		"Record":             func(ze *runtime.Event) error { return ze.Record(s) },
		"Destroy":            func(ze *runtime.Event) error { return ze.Destroy() },
		"Stream.WaitEvent":   func(ze *runtime.Event) error { return s.WaitEvent(ze) },
		"Elapsed start":      func(ze *runtime.Event) error { _, err := runtime.Elapsed(ze, ev); return err },
		"Elapsed end":        func(ze *runtime.Event) error { _, err := runtime.Elapsed(ev, ze); return err },
		"Destroy then Query": func(ze *runtime.Event) error { ze.Destroy(); return ze.Query() },
	}
	for name, op := range eventOps {
		wantInvalid(t, "zero Event "+name, func() error { return op(new(runtime.Event)) })
	}

	// The real stream and event are untouched by the refused calls.
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := ev.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Registry not made by NewRegistry (the zero value, or nil) answers
// with errors, like an empty one, instead of crashing.
func TestZeroRegistry(t *testing.T) {
	for name, r := range map[string]*runtime.Registry{"zero": new(runtime.Registry), "nil": nil} {
		wantInvalid(t, name+" Register", func() error { return r.Register(runtime.CPU, cpu.New()) })
		err := call(t, name+" Lookup", func() error { _, err := r.Lookup(runtime.CPU); return err })
		if !errors.Is(err, runtime.StatusUnavailable) {
			t.Errorf("%s Lookup: %v, want an error wrapping Unavailable", name, err)
		}
		call(t, name+" Types", func() error {
			if got := r.Types(); len(got) != 0 {
				t.Errorf("%s Types = %v, want none", name, got)
			}
			return nil
		})
	}
}

// The hint about a forgotten import names a backend package only for a
// device type that has one.
func TestLookupUnlistedDeviceType(t *testing.T) {
	_, err := runtime.NewRegistry().Lookup(runtime.DeviceType(9))
	if !errors.Is(err, runtime.StatusUnavailable) || !strings.Contains(err.Error(), "device type 9") {
		t.Fatalf("Lookup(9): %v, want Unavailable naming device type 9", err)
	}
	if strings.Contains(err.Error(), "runtime/unsupported") || strings.Contains(err.Error(), "forgotten import") {
		t.Errorf("Lookup(9): %q suggests importing a backend package that cannot exist", err)
	}
	_, err = runtime.NewRegistry().Lookup(runtime.CUDA)
	if !strings.Contains(err.Error(), "forgotten import of github.com/trainscope/trainscope/runtime/cuda?") {
		t.Errorf("Lookup(cuda): %q lacks the import hint", err)
	}
}

// A zero Guard is refused; Release may be called from several
// goroutines, and only the first restores the device.
func TestGuardReleaseMisuse(t *testing.T) {
	var zero runtime.Guard
	wantInvalid(t, "zero Guard Release", zero.Release)

	impl, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if err := impl.SetDevice(3); err != nil {
		t.Fatal(err)
	}
	g, err := runtime.NewGuard(runtime.Device{Type: runtime.CPU, Index: 4})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := g.Release(); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if d, _ := impl.GetDevice(); d != 3 {
		t.Errorf("after Release: device %d, want 3", d)
	}
	// A later SetDevice is not undone by a second Release.
	if err := impl.SetDevice(5); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if d, _ := impl.GetDevice(); d != 5 {
		t.Errorf("after a second Release: device %d, want 5", d)
	}
	impl.SetDevice(0)
}

// Kernels refuse buffers of another device than their stream's, as copies
// and memsets do (and as a GPU backend must), instead of running.
func TestKernelsRefuseBuffersOfAnotherDevice(t *testing.T) {
	d1, d2 := runtime.Device{Type: runtime.CPU, Index: 1}, runtime.Device{Type: runtime.CPU, Index: 2}
	s, err := runtime.NewStream(d2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, err := runtime.Malloc(d1, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(x)
	want := []float32{1, 2, 3, 4}
	xs, err := cpu.Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	copy(xs, want)
	local, err := runtime.Malloc(d2, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(local)
	gemm := runtime.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1, A: local, B: local, C: local, LDA: 2, LDB: 2, LDC: 2, Type: runtime.Float32}
	ops := map[string]func() error{
		"Gemm A":       func() error { g := gemm; g.A = x; return runtime.Gemm(s, g) },
		"Gemm B":       func() error { g := gemm; g.B = x; return runtime.Gemm(s, g) },
		"Gemm C":       func() error { g := gemm; g.C = x; return runtime.Gemm(s, g) },
		"Scale":        func() error { return runtime.Scale(s, 2, x, 4) },
		"Axpy":         func() error { return runtime.Axpy(s, 1, x, local, 4) },
		"Tanh":         func() error { return runtime.Tanh(s, local, x, 4) },
		"TanhBackward": func() error { return runtime.TanhBackward(s, local, local, x, 4) },
		"Dot x":        func() error { return runtime.Dot(s, x, local, local, 4) },
		"Dot result":   func() error { return runtime.Dot(s, local, local, x, 4) },
	}
	for name, op := range ops {
		err := call(t, name, op)
		if !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "cpu:1") || !strings.Contains(err.Error(), "cpu:2") {
			t.Errorf("%s with a cpu:1 buffer on a cpu:2 stream: %v, want InvalidArgument naming both devices", name, err)
		}
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if xs[i] != want[i] {
			t.Fatalf("the cpu:1 buffer was written by refused kernels: %v, want %v", xs, want)
		}
	}
	// Buffers of the stream's device still run.
	if err := runtime.Gemm(s, gemm); err != nil {
		t.Errorf("Gemm on the stream's device: %v", err)
	}
	if err := runtime.Scale(s, 2, local, 4); err != nil {
		t.Errorf("Scale on the stream's device: %v", err)
	}
}

// Err says whether a stream can take work, without a backend call.
func TestStreamErr(t *testing.T) {
	s, err := runtime.NewStream(runtime.Device{Type: runtime.CPU})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("a new stream: %v", err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	var none *runtime.Stream
	for _, tc := range []struct {
		name string
		s    *runtime.Stream
		want string
	}{
		{"destroyed", s, "used after Destroy"},
		{"zero", &runtime.Stream{}, "zero Stream"},
		{"nil", none, "nil stream"},
	} {
		err := tc.s.Err()
		if runtime.StatusOf(err) != runtime.StatusInvalidArgument || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
}

// A work trace of a backend that has none, or of no backend, is refused
// with a status, not a panic.
func TestWorkTraceRefused(t *testing.T) {
	if _, err := runtime.StartWorkTrace(nil); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Fatalf("nil backend: %v", err)
	}
	if _, err := runtime.StartWorkTrace(plainBackend{cpu.New()}); !errors.Is(err, runtime.StatusNotSupported) {
		t.Fatalf("backend without a trace: %v", err)
	}
}

// foreignTrace is a backend trace that saw work on streams not its
// backend's: a real one (CUPTI's) sees it only on a GPU.
type foreignTrace struct{ foreign, dropped uint64 }

func (foreignTrace) Collect(bool, func(runtime.Work)) (time.Time, error) { return time.Time{}, nil }
func (t foreignTrace) Dropped() uint64                                   { return t.dropped }
func (t foreignTrace) Foreign() uint64                                   { return t.foreign }
func (foreignTrace) Stop() error                                         { return nil }

type foreignTracer struct {
	runtime.Impl
	tr foreignTrace
}

func (b foreignTracer) StartWorkTrace() (runtime.BackendWorkTrace, error) { return b.tr, nil }

// A trace's work outside its backend's streams is counted apart from
// the work it lost, where the backend counts it; 0 where it does not.
func TestWorkTraceForeign(t *testing.T) {
	tr, err := runtime.StartWorkTrace(foreignTracer{cpu.New(), foreignTrace{foreign: 7, dropped: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if f, d := tr.Foreign(), tr.Dropped(); f != 7 || d != 2 {
		t.Errorf("Foreign, Dropped = %d, %d; want the backend's 7, 2", f, d)
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	if f := tr.Foreign(); f != 7 {
		t.Errorf("after Stop, Foreign = %d, want 7 still", f)
	}
	tr, err = runtime.StartWorkTrace(cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop() }()
	if f := tr.Foreign(); f != 0 {
		t.Errorf("the cpu backend's trace: Foreign = %d, want 0 (every stream is its own)", f)
	}
}
