package cuda

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// unloaded returns a backend whose libraries are all absent, a stream
// handle of it and a maker of buffers of it on cuda:0. The handles reach
// no library: they serve the checks the backend makes before it calls
// into CUDA, and a call that passes them fails on the absent cuBLAS or
// driver with StatusUnavailable.
func unloaded(t *testing.T) (*Impl, *stream, func(size int64) runtime.Buffer) {
	t.Helper()
	dir := t.TempDir()
	m := New(WithLibrary(filepath.Join(dir, "libcudart.so")),
		WithCUBLASLibrary(filepath.Join(dir, "libcublas.so")),
		WithDriverLibrary(filepath.Join(dir, "libcuda.so")))
	s := &stream{owner: m, h: 0x5000, dev: 0}
	buf := func(size int64) runtime.Buffer {
		a := &allocation{owner: m, ptr: 1 << 32, dev: 0, size: size}
		return runtime.NewBufferView(m, runtime.Device{Type: runtime.CUDA, Index: 0}, a, 0, size)
	}
	return m, s, buf
}

// A length whose byte count (n·4) wraps around 64 bits must not pass for
// a small one: 2^62+1 float32s are 2^64+4 bytes, 4 once wrapped, and fit
// the 64-byte buffers here that way.
func TestElementwiseLengthOverflow(t *testing.T) {
	m, s, buf := unloaded(t)
	x, y, z := buf(64), buf(64), buf(64)
	for _, n := range []int{1<<62 + 1, 1 << 62, math.MaxInt, 17} {
		calls := map[string]func() error{
			"Axpy":         func() error { return m.Axpy(s, 2, x, y, n) },
			"Scale":        func() error { return m.Scale(s, 2, x, n) },
			"Tanh":         func() error { return m.Tanh(s, x, y, n) },
			"TanhBackward": func() error { return m.TanhBackward(s, x, y, z, n) },
			"Dot":          func() error { return m.Dot(s, x, y, z, n) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, runtime.StatusInvalidArgument) {
				t.Errorf("%s of %d float32s in 64-byte buffers: %v, want InvalidArgument", name, n, err)
			}
		}
	}
	// 16 float32s fit: the call gets past the checks to the absent cuBLAS.
	if err := m.Axpy(s, 2, x, y, 16); !errors.Is(err, runtime.StatusUnavailable) {
		t.Errorf("Axpy of 16 float32s in 64-byte buffers: %v, want Unavailable (no cuBLAS)", err)
	}
}

// A GEMM's operand sizes must not wrap around 64 bits either. With
// ldC = 2^31−1 and E = 2^61+1 = ldC·q + r elements (r rows, q+1
// columns), a float64 C needs 8·E = 2^64+8 bytes, 8 once wrapped; with
// M = 1 and N = ldC it needs 8·(ldC·(ldC−1)+1) bytes, negative once
// wrapped. Each dimension is within cuBLAS's 32 bits.
func TestGemmSizeOverflow(t *testing.T) {
	m, s, buf := unloaded(t)
	c := buf(64)
	const ld = math.MaxInt32
	e := uint64(1)<<61 + 1
	q, r := int(e/ld), int(e%ld)
	if r < 1 || q+1 > math.MaxInt32 {
		t.Fatalf("shape %d×%d does not fit the test's premise", r, q+1)
	}
	for _, g := range []runtime.GemmArgs{
		{Type: runtime.Float64, M: r, N: q + 1, K: 0, LDA: 1, LDB: 1, LDC: ld, C: c},
		{Type: runtime.Float64, M: 1, N: ld, K: 0, LDA: 1, LDB: 1, LDC: ld, C: c},
	} {
		g.Alpha = 1
		if err := m.Gemm(s, g); !errors.Is(err, runtime.StatusInvalidArgument) {
			t.Errorf("Gemm M=%d N=%d K=%d LDA=%d LDB=%d LDC=%d on 64-byte buffers: %v, want InvalidArgument",
				g.M, g.N, g.K, g.LDA, g.LDB, g.LDC, err)
		}
	}
	// A 2×2 float64 C fits: the call gets past the checks.
	if err := m.Gemm(s, runtime.GemmArgs{Type: runtime.Float64, M: 2, N: 2, K: 0, LDA: 2, LDB: 1, LDC: 2, C: c}); !errors.Is(err, runtime.StatusUnavailable) {
		t.Errorf("Gemm of a 2×2 float64 C in 64 bytes: %v, want Unavailable (no cuBLAS)", err)
	}
}

// With K = 0, A and B are not read and the runtime takes any LDA and LDB
// (the CPU backend computes C = βC); one beyond 32 bits must neither be
// refused nor reach cuBLAS cut to a C int.
func TestGemmEmptyInnerTakesAnyLeadingDimension(t *testing.T) {
	m, s, buf := unloaded(t)
	g := runtime.GemmArgs{Type: runtime.Float32, M: 4, N: 3, K: 0, LDA: 1 << 40, LDB: 1 << 40, LDC: 4, C: buf(48), Beta: 1}
	if err := m.Gemm(s, g); !errors.Is(err, runtime.StatusUnavailable) {
		t.Errorf("Gemm K=0 LDA=LDB=2^40: %v, want Unavailable (no cuBLAS), past the checks", err)
	}
}

// A library that failed to load is reported by every later call under
// that call's own name, not the name of the call that first tried it.
func TestKeptLoadErrorNamesItsCaller(t *testing.T) {
	m, s, buf := unloaded(t)
	x, y := buf(64), buf(64)
	opOf := func(err error) string {
		var e *runtime.Error
		if !errors.As(err, &e) {
			return ""
		}
		return e.Op
	}
	for _, c := range []struct {
		op   string
		call func() error
	}{
		{"Axpy", func() error { return m.Axpy(s, 2, x, y, 4) }},
		{"Scale", func() error { return m.Scale(s, 2, x, 4) }},
		{"Gemm", func() error {
			return m.Gemm(s, runtime.GemmArgs{Type: runtime.Float32, M: 2, N: 2, K: 2, LDA: 2, LDB: 2, LDC: 2, A: x, B: y, C: x})
		}},
		{"Axpy", func() error { return m.Axpy(s, 2, x, y, 4) }},
		{"Dot", func() error { return m.Dot(s, x, y, x, 4) }},
	} {
		err := c.call()
		if !errors.Is(err, runtime.StatusUnavailable) || opOf(err) != c.op || !strings.HasPrefix(err.Error(), "runtime: "+c.op+": ") {
			t.Errorf("%s without cuBLAS: %v (op %q), want Unavailable for %s", c.op, err, opOf(err), c.op)
		}
		if !strings.Contains(err.Error(), "libcublas") {
			t.Errorf("%s: error does not name libcublas: %v", c.op, err)
		}
	}
	for _, op := range []string{"StreamCreate", "DeviceName", "Tanh", "DeviceName"} {
		_, err := m.driverAPI(op)
		if !errors.Is(err, runtime.StatusUnavailable) || opOf(err) != op {
			t.Errorf("driver library for %s: %v (op %q), want Unavailable for %s", op, err, opOf(err), op)
		}
	}
}

// A BLAS call that passed its stream check while StreamDestroy ran, and
// got the stream's cuBLAS lock after it, must not make a cuBLAS handle
// for the destroyed stream: nothing would ever destroy it. The test holds
// the lock, lets Scale wait for it, marks the stream as StreamDestroy
// does before it takes the lock, and lets Scale go.
func TestBlasCallAfterStreamDestroyMakesNoHandle(t *testing.T) {
	impl, err := runtime.Available(runtime.CUDA)
	if err != nil {
		t.Skipf("skipped: no CUDA GPU on this machine: %v", err)
	}
	m := impl.(*Impl)
	if _, err := m.cublasAPI("test"); err != nil {
		t.Skipf("skipped: no cuBLAS: %v", err)
	}
	sh, err := m.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := sh.(*stream)
	mem, err := m.Malloc(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Free(mem) }()
	x := runtime.NewBufferView(m, runtime.Device{Type: runtime.CUDA, Index: 0}, mem, 0, 64)

	s.blasMu.Lock()
	done := make(chan error, 1)
	go func() { done <- m.Scale(s, 2, x, 16) }()
	time.Sleep(200 * time.Millisecond) // Scale reaches the lock
	s.destroyed.Store(true)
	s.blasMu.Unlock()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Scale did not return within a minute")
	}
	if !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("Scale on a stream destroyed while it waited: %v, want InvalidArgument", err)
	}
	s.blasMu.Lock()
	h := s.blas
	s.blasMu.Unlock()
	if h != 0 {
		t.Errorf("cuBLAS handle %#x made for a destroyed stream", h)
	}
	s.destroyed.Store(false)
	if err := m.StreamDestroy(sh); err != nil {
		t.Fatal(err)
	}
}

// A Free that CUDA refuses leaves the allocation live: the memory is
// still allocated, and a later Free must reach CUDA again rather than
// answer "already freed" and lose it. The handle here points inside a
// real allocation, which cudaFree refuses (it takes only what cudaMalloc
// returned).
func TestFailedFreeLeavesAllocationLive(t *testing.T) {
	impl, err := runtime.Available(runtime.CUDA)
	if err != nil {
		t.Skipf("skipped: no CUDA GPU on this machine: %v", err)
	}
	m := impl.(*Impl)
	h, err := m.Malloc(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Free(h); err != nil {
			t.Error(err)
		}
	}()
	whole := h.(*allocation)
	inner := &allocation{owner: m, ptr: whole.ptr + 4096, dev: 0, size: 4096}
	for i := range 2 {
		err := m.Free(inner)
		if err == nil {
			t.Fatalf("Free %d of a pointer inside an allocation succeeded", i+1)
		}
		if strings.Contains(err.Error(), "already freed") || !strings.Contains(err.Error(), "cuda error") {
			t.Errorf("Free %d of a pointer inside an allocation: %v, want CUDA's own error", i+1, err)
		}
		if inner.freed.Load() {
			t.Errorf("Free %d failed and left the handle marked freed", i+1)
		}
	}
}
