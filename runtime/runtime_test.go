package runtime_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestStatusValuesAndNames(t *testing.T) {
	want := map[runtime.Status]struct {
		v    int
		name string
	}{
		runtime.StatusSuccess: {0, "Success"}, runtime.StatusNotReady: {1, "NotReady"}, runtime.StatusTimeout: {2, "Timeout"},
		runtime.StatusError: {-1, "Error"}, runtime.StatusInvalidArgument: {-2, "InvalidArgument"},
		runtime.StatusOutOfMemory: {-3, "OutOfMemory"}, runtime.StatusUnavailable: {-4, "Unavailable"},
		runtime.StatusNotSupported: {-5, "NotSupported"}, runtime.StatusAlreadyExists: {-6, "AlreadyExists"},
		runtime.StatusPermissionDenied: {-7, "PermissionDenied"}, runtime.StatusInternal: {-8, "Internal"},
		runtime.StatusUnknown: {-127, "Unknown"},
	}
	for st, w := range want {
		if int(st) != w.v || st.String() != w.name {
			t.Errorf("status %d %q, want %d %q", int(st), st.String(), w.v, w.name)
		}
		if st.OK() != (w.v >= 0) {
			t.Errorf("%s.OK() = %v", st, st.OK())
		}
	}
	for _, v := range []int{3, -9, -126, 127} {
		s := runtime.Status(v).String()
		if !strings.Contains(s, "unsupported") || strings.Contains(s, "Unknown") {
			t.Errorf("Status(%d).String() = %q: should say unsupported, not Unknown", v, s)
		}
	}
}

func TestErrorsWrapStatus(t *testing.T) {
	cause := errors.New("driver said no")
	err := error(&runtime.Error{Op: "Malloc", Status: runtime.StatusOutOfMemory, Detail: "12 GiB", Err: cause})
	if !errors.Is(err, runtime.StatusOutOfMemory) || !errors.Is(err, cause) || errors.Is(err, runtime.StatusTimeout) {
		t.Fatalf("errors.Is does not see the status and cause of %v", err)
	}
	if got := runtime.StatusOf(err); got != runtime.StatusOutOfMemory {
		t.Errorf("StatusOf = %v", got)
	}
	if runtime.StatusOf(nil) != runtime.StatusSuccess || runtime.StatusOf(errors.New("x")) != runtime.StatusUnknown {
		t.Error("StatusOf of nil / foreign error")
	}
	for _, part := range []string{"Malloc", "OutOfMemory", "12 GiB", "driver said no"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q lacks %q", err.Error(), part)
		}
	}
}

type fakeImpl struct {
	runtime.Impl // only Type is called by the registry
	t            runtime.DeviceType
}

func (f fakeImpl) Type() runtime.DeviceType { return f.t }

func TestRegistryMisuse(t *testing.T) {
	r := runtime.NewRegistry()
	if err := r.Register(runtime.CUDA, nil); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("nil impl: %v", err)
	}
	if err := r.Register(runtime.CUDA, fakeImpl{t: runtime.CPU}); !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "reports type cpu") {
		t.Errorf("type mismatch: %v", err)
	}
	if err := r.Register(runtime.CPU, fakeImpl{t: runtime.CPU}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(runtime.CPU, fakeImpl{t: runtime.CPU}); !errors.Is(err, runtime.StatusAlreadyExists) {
		t.Errorf("duplicate: %v", err)
	}
	_, err := r.Lookup(runtime.CUDA)
	if !errors.Is(err, runtime.StatusUnavailable) {
		t.Fatalf("unknown type: %v", err)
	}
	for _, part := range []string{"cuda", "registered: cpu", "forgotten import", "runtime/cuda"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("lookup error %q lacks %q", err, part)
		}
	}
	if got := r.Types(); len(got) != 1 || got[0] != runtime.CPU {
		t.Errorf("Types = %v", got)
	}
}

func TestDeviceTypeParsing(t *testing.T) {
	for _, s := range []string{"cpu", "CUDA"} {
		if _, err := runtime.ParseDeviceType(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := runtime.ParseDeviceType("tpu"); err == nil || !strings.Contains(err.Error(), "tpu") {
		t.Errorf("tpu: %v", err)
	}
	if s := runtime.DeviceType(9).String(); !strings.Contains(s, "unsupported") {
		t.Errorf("DeviceType(9) = %q", s)
	}
	if got := (runtime.Device{Type: runtime.CUDA, Index: 1}).String(); got != "cuda:1" {
		t.Errorf("Device string %q", got)
	}
}

func TestBufferViewsRejectOverflow(t *testing.T) {
	b, err := runtime.Malloc(runtime.Device{Type: runtime.CPU}, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(b)
	bad := [][2]int64{{8, math.MaxInt64}, {-1, 4}, {4, -1}, {17, 0}, {8, 9}, {math.MaxInt64, 1}}
	for _, c := range bad {
		if v, err := b.Slice(c[0], c[1]); err == nil {
			t.Errorf("Slice(%d, %d) accepted: size %d", c[0], c[1], v.Size())
		}
	}
	if _, err := b.Elems(runtime.Float32, 1, math.MaxInt/2); err == nil {
		t.Error("Elems overflow accepted")
	}
	v, err := b.Elems(runtime.Float32, 1, 2)
	if err != nil || v.Offset() != 4 || v.Size() != 8 {
		t.Fatalf("Elems(1,2) = off %d size %d, %v", v.Offset(), v.Size(), err)
	}
	if err := runtime.Free(v); err == nil {
		t.Error("Free of a view accepted")
	}
}

func TestGemmShapeChecks(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, _ := runtime.Malloc(dev, 4*6)
	defer runtime.Free(a)
	ok := runtime.GemmArgs{M: 2, N: 3, K: 1, Alpha: 1, A: a, B: a, C: a, LDA: 2, LDB: 1, LDC: 2, Type: runtime.Float32}
	if err := runtime.Gemm(s, ok); err != nil {
		t.Fatalf("valid gemm: %v", err)
	}
	bad := []func(g *runtime.GemmArgs){
		func(g *runtime.GemmArgs) { g.M = -1 },
		func(g *runtime.GemmArgs) { g.LDA = 1 },         // ld smaller than rows
		func(g *runtime.GemmArgs) { g.N, g.LDC = 4, 2 }, // C needs 8 floats, buffer has 6
		func(g *runtime.GemmArgs) { g.C = runtime.Buffer{} },
		func(g *runtime.GemmArgs) { g.Type = runtime.DataType(42) },
	}
	for i, mut := range bad {
		g := ok
		mut(&g)
		if err := runtime.Gemm(s, g); !errors.Is(err, runtime.StatusInvalidArgument) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	// Shapes whose sizes overflow int64 are refused here, not passed on
	// (the cpu kernel panicked on its stream's goroutine).
	for _, tc := range []struct {
		name string
		mut  func(g *runtime.GemmArgs)
		msg  string
	}{
		{"all 2^40", func(g *runtime.GemmArgs) {
			g.M, g.N, g.K, g.LDA, g.LDB, g.LDC = 1<<40, 1<<40, 1<<40, 1<<40, 1<<40, 1<<40
		}, "matrix A (1099511627776×1099511627776, ldA=1099511627776) needs more than 2^63 bytes, buffer has 24"},
		// 2^61 elements fit in int64, their 2^63 bytes do not.
		{"bytes overflow", func(g *runtime.GemmArgs) { g.M, g.N, g.K, g.LDC = 1<<30, 1<<31, 0, 1<<30 }, "matrix C (1073741824×2147483648, ldC=1073741824) needs more than 2^63 bytes"},
		{"large but countable", func(g *runtime.GemmArgs) { g.M, g.LDA, g.LDC = 1<<20, 1<<20, 1<<20 }, "matrix A needs 4194304 bytes, buffer has 24"},
	} {
		g := ok
		tc.mut(&g)
		if err := runtime.Gemm(s, g); !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.name, err, tc.msg)
		}
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatalf("the stream after the refused calls: %v", err)
	}
}

// Element counts whose byte size overflows are refused, not wrapped
// round to a small size.
func TestElementwiseCountOverflow(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, _ := runtime.Malloc(dev, 16)
	defer runtime.Free(x)
	const n = 1<<62 + 1 // n·4 overflows to 4
	for name, err := range map[string]error{
		"Axpy":         runtime.Axpy(s, 1, x, x, n),
		"Scale":        runtime.Scale(s, 2, x, n),
		"Tanh":         runtime.Tanh(s, x, x, n),
		"TanhBackward": runtime.TanhBackward(s, x, x, x, n),
		"Dot":          runtime.Dot(s, x, x, x, 1<<30+1), // 2^30+1 float32s: 4 bytes past 4 GiB
	} {
		if name == "Dot" {
			if !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "1073741825 float32 elements in a 16-byte buffer") {
				t.Errorf("%s: %v, want InvalidArgument naming the count and the buffer", name, err)
			}
			continue
		}
		if !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "4611686018427387905 float32 elements in a 16-byte buffer") {
			t.Errorf("%s: %v, want InvalidArgument naming the count and the buffer", name, err)
		}
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatalf("the stream after the refused calls: %v", err)
	}
}

func TestGuardRestoresDevice(t *testing.T) {
	impl, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if err := impl.SetDevice(2); err != nil {
		t.Fatal(err)
	}
	g, err := runtime.NewGuard(runtime.Device{Type: runtime.CPU, Index: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := impl.GetDevice(); d != 5 {
		t.Fatalf("inside guard: device %d", d)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if d, _ := impl.GetDevice(); d != 2 || g.Previous() != 2 {
		t.Fatalf("after release: device %d (previous %d)", d, g.Previous())
	}
	if _, err := runtime.NewGuard(runtime.Device{Type: runtime.CPU, Index: 1000}); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("guard on a missing device: %v", err)
	}
	_ = cpu.New // the host backend is registered by importing it
}

func TestStreamAndEventMisuse(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU, Index: 1}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("double destroy: %v", err)
	}
	ev, _ := runtime.NewEvent(dev, runtime.EventDefault)
	defer ev.Destroy()
	if err := ev.Record(s); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("record on destroyed stream: %v", err)
	}
	if _, err := runtime.NewEvent(dev, runtime.EventFlag(64)); err == nil {
		t.Error("unknown flag accepted")
	}
	if _, err := runtime.NewEvent(dev, runtime.EventInterprocess); err == nil {
		t.Error("interprocess without disable-timing accepted")
	}
	if _, err := runtime.NewStream(dev, runtime.WithPriority(-7)); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("priority out of range: %v", err)
	}
	other, _ := runtime.NewStream(runtime.Device{Type: runtime.CPU, Index: 2})
	defer other.Destroy()
	if err := ev.Record(other); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("event of cpu:1 recorded on cpu:2: %v", err)
	}
	b, _ := runtime.Malloc(dev, 8)
	defer runtime.Free(b)
	if err := runtime.Memset(b, 0, other); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("memset of a cpu:1 buffer on a cpu:2 stream: %v", err)
	}
}

// A backend without pinned memory gets Go memory from HostAlloc; bad sizes
// are refused.
func TestHostAllocFallsBackToGoMemory(t *testing.T) {
	b, free, err := runtime.HostAlloc(runtime.CPU, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1000 {
		t.Fatalf("%d bytes, want 1000", len(b))
	}
	b[999] = 1
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runtime.HostAlloc(runtime.CPU, -1); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Fatalf("size -1: %v", err)
	}
	// An absurd size is an error, not a panic in make.
	if _, _, err := runtime.HostAlloc(runtime.CPU, 1<<62); !errors.Is(err, runtime.StatusOutOfMemory) || !strings.Contains(err.Error(), "4611686018427387904 bytes is more than one host allocation may hold (70368744177664)") {
		t.Errorf("size 2^62: %v, want StatusOutOfMemory naming the size and the bound", err)
	}
	// More than the host has available, where the backend can tell.
	mem, err := cpu.New().DeviceMemory(0)
	if err != nil || mem.Available == 0 {
		t.Skipf("the host's available memory is unknown here (%+v, %v)", mem, err)
	}
	size := 4 * mem.Available
	if _, _, err := runtime.HostAlloc(runtime.CPU, size); !errors.Is(err, runtime.StatusOutOfMemory) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes requested, but the host has", size)) {
		t.Errorf("size %d: %v, want StatusOutOfMemory naming the size and what is available", size, err)
	}
}

// Dot writes Σ x[i]·y[i] into its result on the device, in stream order:
// after a Scale of x enqueued before it, and before a copy back enqueued
// after it. A result buffer too small for a float32, n beyond a BLAS
// call's C int, and a zero result buffer are refused before anything is
// enqueued.
func TestDot(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, _ := runtime.Malloc(dev, 4*4)
	y, _ := runtime.Malloc(dev, 4*4)
	out, _ := runtime.Malloc(dev, 2*4)
	defer func() { runtime.Free(x); runtime.Free(y); runtime.Free(out) }()
	f32 := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, f := range v {
			binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		return b
	}
	if err := runtime.CopyToDevice(x, f32(1, 2, 3, 4), s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.CopyToDevice(y, f32(5, 6, 7, 8), s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.CopyToDevice(out, f32(-1, -1), s); err != nil {
		t.Fatal(err)
	}
	second, err := out.Elems(runtime.Float32, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	// x·2 = (2, 4, 6, 8); its dot with y is 10 + 24 + 42 + 64 = 140, and
	// over the first three elements 76.
	if err := runtime.Scale(s, 2, x, 4); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Dot(s, x, y, out, 4); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Dot(s, x, y, second, 3); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := runtime.CopyToHost(got, out, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a, b := math.Float32frombits(binary.NativeEndian.Uint32(got)), math.Float32frombits(binary.NativeEndian.Uint32(got[4:])); a != 140 || b != 76 {
		t.Errorf("dot products %v and %v, want 140 and 76", a, b)
	}

	tiny, err := out.Slice(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"result of 3 bytes": {runtime.Dot(s, x, y, tiny, 4), "a 3-byte result buffer holds no float32"},
		"n beyond a C int":  {runtime.Dot(s, x, y, out, math.MaxInt32+1), "n=2147483648: more than 2147483647 elements in one sum"},
		"zero result":       {runtime.Dot(s, x, y, runtime.Buffer{}, 4), "zero Buffer"},
	} {
		if !errors.Is(c.err, runtime.StatusInvalidArgument) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", name, c.err, c.want)
		}
	}
}
