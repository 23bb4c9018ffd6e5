package cuda_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// The tests below need a GPU and skip without one.

func TestDevices(t *testing.T) {
	impl := gpu(t)
	n, err := impl.DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	rv, dv := impl.RuntimeVersion()
	t.Logf("%d GPUs, CUDA runtime %d, driver %d, %s", n, rv, dv, impl.LibraryPath())
	uuid := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := range n {
		name, err := impl.DeviceName(i)
		if err != nil || !strings.Contains(name, "NVIDIA") {
			t.Errorf("DeviceName(%d) = %q, %v", i, name, err)
		}
		id, err := impl.DeviceUUID(i)
		if err != nil || !uuid.MatchString(id) || seen[id] {
			t.Errorf("DeviceUUID(%d) = %q, %v", i, id, err)
		}
		seen[id] = true
		t.Logf("cuda:%d %s %s", i, name, id)
		// The driver's total, without a context, is the runtime's
		// (cudaMemGetInfo's, through a context).
		total, err := impl.DeviceTotalMemory(i)
		mem, merr := impl.DeviceMemory(i)
		if err != nil || merr != nil || total <= 0 || total != mem.Total {
			t.Errorf("DeviceTotalMemory(%d) = %d, %v; DeviceMemory's total %d, %v", i, total, err, mem.Total, merr)
		}
	}
	if _, err := impl.DeviceTotalMemory(n); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("DeviceTotalMemory(%d) of %d GPUs: %v, want InvalidArgument", n, n, err)
	}
	// The libraries as the run's summary names them: each loaded from a
	// file, with a version in the form the vendor prints (the runtime's
	// matching RuntimeVersion), and the cuBLAS one of the same major.
	libs := impl.Libraries()
	byName := map[string]runtime.Library{}
	for _, l := range libs {
		byName[l.Name] = l
		t.Logf("library %+v", l)
	}
	cudart, blas := byName["CUDA runtime"], byName["cuBLAS"]
	// The files as the process maps them: absolute paths, whatever name
	// opened them (libcudart.so.13 through the loader's search).
	if want := fmt.Sprintf("%d.%d", rv/1000, rv%1000/10); cudart.Version != want || !strings.HasPrefix(cudart.Path, "/") || !strings.Contains(cudart.Path, "libcudart") {
		t.Errorf("CUDA runtime %+v, want version %s from an absolute path to libcudart (opened as %s)", cudart, want, impl.LibraryPath())
	}
	if d := byName["CUDA driver"]; d.Problem != "" || !strings.HasPrefix(d.Path, "/") || !strings.Contains(d.Path, "libcuda") || d.Version == "" {
		t.Errorf("CUDA driver %+v", d)
	}
	if blas.Problem != "" || !strings.HasPrefix(blas.Path, "/") || !strings.Contains(blas.Path, "cublas") || !strings.HasPrefix(blas.Version, fmt.Sprint(rv/1000)+".") {
		t.Errorf("cuBLAS %+v, want a libcublas of CUDA %d", blas, rv/1000)
	}
	if d, ok := byName["NVIDIA driver"]; ok && !regexp.MustCompile(`^\d+\.\d+`).MatchString(d.Version) {
		t.Errorf("NVIDIA driver %+v", d)
	}
	// The current device belongs to the thread; the guard restores it.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	g, err := runtime.NewGuard(dev(n - 1))
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := impl.GetDevice(); cur != n-1 {
		t.Errorf("current device %d under a guard for %d", cur, n-1)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if cur, _ := impl.GetDevice(); cur != g.Previous() {
		t.Errorf("current device %d after release, want %d", cur, g.Previous())
	}
}

func TestInvalidDevice(t *testing.T) {
	impl := gpu(t)
	n, _ := impl.DeviceCount()
	err := impl.SetDevice(n + 7)
	if !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "cudaErrorInvalidDevice") {
		t.Errorf("SetDevice(%d): %v", n+7, err)
	}
	if _, err := impl.Malloc(n+7, 16); !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "cudaErrorInvalidDevice") {
		t.Errorf("Malloc on device %d: %v", n+7, err)
	}
	if _, err := runtime.NewStream(dev(n)); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("NewStream(cuda:%d): %v", n, err)
	}
	if _, err := impl.StreamCreate(-1, 0); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("StreamCreate(-1): %v", err)
	}
}

func TestOutOfMemory(t *testing.T) {
	gpu(t)
	_, err := runtime.Malloc(dev(0), 1<<40) // 1 TiB
	if !errors.Is(err, runtime.StatusOutOfMemory) || !strings.Contains(err.Error(), "cudaErrorMemoryAllocation") {
		t.Fatalf("Malloc(1 TiB): %v", err)
	}
	t.Log(err)
	// The failure is not sticky: the device still works.
	b := malloc(t, dev(0), 1<<20)
	if err := runtime.Memset(b, 1, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStreamsAndEvents(t *testing.T) {
	gpu(t)
	d := dev(0)
	least, greatest, err := gpu(t).StreamPriorityRange(0)
	if err != nil || greatest > least {
		t.Fatalf("priority range %d..%d, %v", least, greatest, err)
	}
	hi := newStream(t, d, runtime.WithPriority(greatest))
	lo := newStream(t, d)
	start, _ := runtime.NewEvent(d, runtime.EventDefault)
	end, _ := runtime.NewEvent(d, runtime.EventDefault)
	nt, _ := runtime.NewEvent(d, runtime.EventDisableTiming)
	defer start.Destroy()
	defer end.Destroy()
	defer nt.Destroy()

	const n = 1 << 26 // 256 MiB: a copy long enough to see
	a, b := malloc(t, d, 4*n), malloc(t, d, 4*n)
	if err := start.Record(lo); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := runtime.Copy(b, a, lo); err != nil {
			t.Fatal(err)
		}
	}
	if err := end.Record(lo); err != nil {
		t.Fatal(err)
	}
	if err := nt.Record(lo); err != nil {
		t.Fatal(err)
	}
	// The high-priority stream waits for the copies.
	if err := hi.WaitEvent(nt); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Memset(a, 0, hi); err != nil {
		t.Fatal(err)
	}
	if err := end.Query(); err != nil && !errors.Is(err, runtime.StatusNotReady) {
		t.Fatalf("Query: %v", err)
	}
	if _, err := runtime.Elapsed(start, end); err != nil && !errors.Is(err, runtime.StatusNotReady) {
		t.Fatalf("Elapsed before completion: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hi.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := end.Query(); err != nil {
		t.Fatalf("end not complete after the waiting stream finished: %v", err)
	}
	el, err := runtime.Elapsed(start, end)
	if err != nil || el <= 0 || el > 5*time.Second {
		t.Fatalf("Elapsed = %v, %v", el, err)
	}
	t.Logf("4 × 256 MiB device copies: %v (%.0f GB/s read+write)", el, 4*2*4*n/el.Seconds()/1e9)
	if _, err := runtime.Elapsed(start, nt); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("Elapsed with a disable-timing event: %v", err)
	}
	if err := gpu(t).DeviceSynchronize(0); err != nil {
		t.Fatal(err)
	}
}

func TestMemory(t *testing.T) {
	impl := gpu(t)
	d := dev(0)
	s := newStream(t, d)
	before, _ := impl.MemoryStats(0)
	const n = 1000
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) * 0.5
	}
	a := upload(t, d, v)
	st, err := impl.MemoryStats(0)
	if err != nil || st.InUse != before.InUse+4*n || st.Peak < st.InUse || st.Total <= 0 || st.Free <= 0 || st.Free > st.Total {
		t.Fatalf("MemoryStats after a 4000-byte allocation: %+v (before %+v), %v", st, before, err)
	}
	b := malloc(t, d, 4*n)
	// A view: elements 100..299 of a into 0..199 of b, asynchronously.
	av, _ := a.Elems(runtime.Float32, 100, 200)
	bv, _ := b.Elems(runtime.Float32, 0, 200)
	if err := runtime.Memset(b, 0, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Copy(bv, av, s); err != nil {
		t.Fatal(err)
	}
	got := download(t, s, b, n)
	for i := range n {
		want := float32(0)
		if i < 200 {
			want = v[100+i]
		}
		if got[i] != want {
			t.Fatalf("b[%d] = %v, want %v", i, got[i], want)
		}
	}
	// Stream-ordered allocation.
	c, err := runtime.MallocAsync(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Memset(c, 0xab, s); err != nil {
		t.Fatal(err)
	}
	host := make([]byte, 1<<20)
	if err := runtime.CopyToHost(host, c, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.FreeAsync(c, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if host[0] != 0xab || host[len(host)-1] != 0xab {
		t.Errorf("memset through MallocAsync memory: %#x %#x", host[0], host[len(host)-1])
	}
	if err := runtime.FreeAsync(c, s); err == nil {
		t.Error("second FreeAsync succeeded")
	}
	if err := impl.ResetPeakMemory(0); err != nil {
		t.Fatal(err)
	}
	if st, _ := impl.MemoryStats(0); st.Peak != st.InUse {
		t.Errorf("after reset: %+v", st)
	}
}

// DeviceMemory asks CUDA itself: a 256 MiB allocation shows in its free
// memory, and it agrees with what MemoryStats kept from the last
// allocation.
func TestDeviceMemory(t *testing.T) {
	impl := gpu(t)
	before, err := impl.DeviceMemory(0)
	if err != nil {
		t.Fatal(err)
	}
	if before.Host || !before.AvailableKnown || before.Total <= 0 || before.Available <= 0 || before.Available > before.Total {
		t.Fatalf("DeviceMemory(0) = %+v", before)
	}
	const size = 256 << 20
	malloc(t, dev(0), size)
	after, err := impl.DeviceMemory(0)
	if err != nil {
		t.Fatal(err)
	}
	// Other processes may allocate meanwhile; CUDA rounds up to its
	// page size.
	if after.Total != before.Total || after.Available > before.Available-size {
		t.Errorf("after a %d-byte allocation: %+v (before %+v)", size, after, before)
	}
	if st, err := impl.MemoryStats(0); err != nil || st.Total != after.Total || st.Free != after.Available {
		t.Errorf("MemoryStats %+v, %v; want Total and Free as DeviceMemory said: %+v", st, err, after)
	}
	if _, err := impl.DeviceMemory(1 << 20); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("DeviceMemory of a device that does not exist: %v", err)
	}
}

// cpuGemm is the column-major reference in float64.
func cpuGemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, len(c))
	for i := range c {
		out[i] = float64(c[i])
	}
	at := func(i, l int) float64 {
		if ta {
			return float64(a[l+i*lda])
		}
		return float64(a[i+l*lda])
	}
	bt := func(l, j int) float64 {
		if tb {
			return float64(b[j+l*ldb])
		}
		return float64(b[l+j*ldb])
	}
	for j := range n {
		for i := range m {
			var s float64
			for l := range k {
				s += at(i, l) * bt(l, j)
			}
			out[i+j*ldc] = float64(alpha)*s + float64(beta)*out[i+j*ldc]
		}
	}
	return out
}

func randomVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(2*r.Float64() - 1)
	}
	return v
}

// GEMM in float32 agrees with a float64 reference to fp32 rounding: TF32
// (10-bit mantissas) would be off by about 1e-3 relative and fail.
func TestGemmFloat32IsFullPrecision(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	r := rand.New(rand.NewPCG(1, 2))
	const m, n, k = 96, 80, 512
	for _, tc := range []struct{ ta, tb bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		lda, ldb := m, k
		if tc.ta {
			lda = k
		}
		if tc.tb {
			ldb = n
		}
		a, b, c := randomVec(r, m*k), randomVec(r, k*n), randomVec(r, m*n)
		da, db, dc := upload(t, d, a), upload(t, d, b), upload(t, d, c)
		err := runtime.Gemm(s, runtime.GemmArgs{TransA: tc.ta, TransB: tc.tb, M: m, N: n, K: k, Alpha: 0.75, Beta: 0.5,
			A: da, LDA: lda, B: db, LDB: ldb, C: dc, LDC: m, Type: runtime.Float32})
		if err != nil {
			t.Fatal(err)
		}
		got := download(t, s, dc, m*n)
		want := cpuGemm(tc.ta, tc.tb, m, n, k, 0.75, a, lda, b, ldb, 0.5, c, m)
		var worst float64
		for i := range got {
			// Error relative to the magnitude of the dot product (√k).
			worst = max(worst, math.Abs(float64(got[i])-want[i])/math.Sqrt(k))
		}
		if worst > 2e-6 {
			t.Errorf("transA=%v transB=%v: max error %.3g (×√k), want fp32 rounding (< 2e-6); TF32 on?", tc.ta, tc.tb, worst)
		}
	}
}

func TestGemmReducedPrecision(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	tf32 := cuda.New(cuda.WithTF32(true))
	if err := tf32.Init(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 64, 64, 256
	a, b := randomVec(r, m*k), randomVec(r, k*n)
	want := cpuGemm(false, false, m, n, k, 1, a, m, b, k, 0, make([]float32, m*n), m)
	// TF32 through a second backend instance of its own.
	ts, err := runtime.NewStreamWith(tf32, d)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Destroy()
	ta, tb, tc := tf32bufs(t, tf32, a, b, m*n)
	if err := runtime.Gemm(ts, runtime.GemmArgs{M: m, N: n, K: k, Alpha: 1, A: ta, LDA: m, B: tb, LDB: k, C: tc, LDC: m, Type: runtime.Float32}); err != nil {
		t.Fatal(err)
	}
	if err := ts.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*m*n)
	if err := runtime.CopyToHost(out, tc, nil); err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, g := range bytesf32(out) {
		worst = max(worst, math.Abs(float64(g)-want[i])/math.Sqrt(k))
	}
	t.Logf("TF32 GEMM max error %.3g (×√k)", worst)
	if worst > 5e-3 || worst < 1e-6 {
		t.Errorf("TF32 error %.3g: not reduced precision, or wrong", worst)
	}
	for _, ft := range []runtime.DataType{runtime.BFloat16, runtime.Float16, runtime.Float64} {
		es := int64(ft.Size())
		da, db, dc := malloc(t, d, es*m*k), malloc(t, d, es*k*n), malloc(t, d, es*m*n)
		for _, buf := range []runtime.Buffer{da, db} {
			if err := runtime.Memset(buf, 0, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := runtime.Gemm(s, runtime.GemmArgs{M: m, N: n, K: k, Alpha: 1, A: da, LDA: m, B: db, LDB: k, C: dc, LDC: m, Type: ft}); err != nil {
			t.Errorf("%s GEMM: %v", ft, err)
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Gemm(s, runtime.GemmArgs{M: 1, N: 1, K: 1, Alpha: 1, A: malloc(t, d, 4), LDA: 1, B: malloc(t, d, 4), LDB: 1, C: malloc(t, d, 4), LDC: 1, Type: runtime.Int32}); !errors.Is(err, runtime.StatusNotSupported) {
		t.Errorf("int32 GEMM: %v", err)
	}
}

// Per-call precision (GemmArgs.Math) on the default backend, in the three
// forms the trainer uses: forward (no transposes), the weight gradient
// (B transposed, accumulating into C) and the input gradient (A
// transposed); K from a small layer to the trainer's 4096.
//
// Error model. Rounding the inputs to a format with a p-bit significand
// changes each by a relative δ with |δ| ≤ u = 2⁻ᵖ when rounded to nearest
// and 0 ≤ −δ < 2u when truncated (tensor cores may read fp32 bits and drop
// the low ones): TF32 has p = 11 (u ≈ 4.9e-4), bfloat16 p = 8 (u ≈ 3.9e-3).
// A product a·b then errs by a·b·(δa+δb), and the K errors of a dot
// product add like a random walk, to about σ·s where s = √(Σₖ aₖ²bₖ²)
// (≈ √K/3 for inputs uniform in [−1, 1]) and σ is the spread of δa+δb.
// Rounding 64×64 products of such inputs on the host, with K 256 and 4096
// and fp32 accumulation in the worst (sequential) order, gives for the
// element error e = |got − exact|/s an RMS of 0.54u rounded to nearest and
// 1.4u truncated, a largest e of 2.5u and 5.3u, and, with no rounding of
// the inputs (full fp32), an RMS of 1.2e-6 at K 4096. So against an fp64
// host reference:
//   - the RMS of e over the matrix is below 4u and every e below 16u (about
//     three times the truncated figures: an error of the wrong format or a
//     wrong result breaks them, the order cuBLAS sums in does not);
//   - the RMS is above u/8 (6.1e-5 for TF32, fifty times full fp32's):
//     reduced precision really was used.
//
// In the element's own terms: TF32 about 1e-3 of s, bfloat16 about 1e-2.
// CUBLAS_COMPUTE_32F_FAST_16BF allows cuBLAS to round to TF32 instead, so
// whether bf16 gave bfloat16-sized errors is logged, not asserted.
func TestGemmMathModes(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	r := rand.New(rand.NewPCG(7, 8))
	const m, n = 64, 64
	unit := map[runtime.MathMode]float64{runtime.MathTF32: 0x1p-11, runtime.MathBF16: 0x1p-8}
	for _, k := range []int{256, 4096} {
		for _, form := range []struct {
			name   string
			ta, tb bool
			beta   float32
		}{{"forward", false, false, 0}, {"grad-weight", false, true, 1}, {"grad-input", true, false, 0}} {
			lda, ldb := m, k
			if form.ta {
				lda = k
			}
			if form.tb {
				ldb = n
			}
			a, b, c := randomVec(r, m*k), randomVec(r, k*n), randomVec(r, m*n)
			exact := cpuGemm(form.ta, form.tb, m, n, k, 1, a, lda, b, ldb, form.beta, c, m)
			scale := cpuGemm(form.ta, form.tb, m, n, k, 1, squares(a), lda, squares(b), ldb, 0, make([]float32, m*n), m)
			da, db := upload(t, d, a), upload(t, d, b)
			rms := map[runtime.MathMode]float64{}
			for _, mode := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
				u := unit[mode]
				dc := upload(t, d, c)
				err := runtime.Gemm(s, runtime.GemmArgs{TransA: form.ta, TransB: form.tb, M: m, N: n, K: k, Alpha: 1, Beta: form.beta,
					A: da, LDA: lda, B: db, LDB: ldb, C: dc, LDC: m, Type: runtime.Float32, Math: mode})
				if err != nil {
					t.Fatalf("%s K=%d %s: %v", form.name, k, mode, err)
				}
				got := download(t, s, dc, m*n)
				var sum, worst float64
				for i := range got {
					e := math.Abs(float64(got[i])-exact[i]) / math.Sqrt(scale[i])
					sum += e * e
					worst = max(worst, e)
				}
				rms[mode] = math.Sqrt(sum / float64(len(got)))
				t.Logf("%s K=%d %s: error RMS %.3g u, max %.3g u (u = %.3g)", form.name, k, mode, rms[mode]/u, worst/u, u)
				if rms[mode] > 4*u || worst > 16*u || math.IsNaN(worst) {
					t.Errorf("%s K=%d %s: error RMS %.3g, max %.3g of √Σ(ab)²; want within %.3g and %.3g (4u, 16u)", form.name, k, mode, rms[mode], worst, 4*u, 16*u)
				}
				// Reduced precision must show: at least TF32's u/8 (bf16
				// mode may run as TF32: cublas_api.h lets
				// CUBLAS_COMPUTE_32F_FAST_16BF use TF32 tensor cores for
				// float32 matrices, and cuBLAS 13 on an H200 does).
				if floor := unit[runtime.MathTF32] / 8; rms[mode] < floor {
					t.Errorf("%s K=%d %s: error RMS %.3g, below %.3g (TF32's u/8): computed in full fp32?", form.name, k, mode, rms[mode], floor)
				}
			}
			if bf, tf := rms[runtime.MathBF16], rms[runtime.MathTF32]; bf < unit[runtime.MathBF16]/4 {
				t.Logf("%s K=%d: bf16 error RMS %.3g is TF32-sized (tf32 %.3g): cuBLAS rounded to TF32 under FAST_16BF", form.name, k, bf, tf)
			}
		}
	}
}

// squares returns v with each element squared.
func squares(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * x
	}
	return out
}

func tf32bufs(t *testing.T, impl *cuda.Impl, a, b []float32, nc int) (runtime.Buffer, runtime.Buffer, runtime.Buffer) {
	t.Helper()
	d := dev(0)
	mk := func(v []float32) runtime.Buffer {
		h, err := impl.Malloc(0, int64(4*len(v)))
		if err != nil {
			t.Fatal(err)
		}
		buf := runtime.NewBufferView(impl, d, h, 0, int64(4*len(v)))
		if err := impl.MemcpyHtoD(buf, f32bytes(v), nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = impl.Free(h) })
		return buf
	}
	return mk(a), mk(b), mk(make([]float32, nc))
}

func TestElementwise(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	x := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-8, 1e-3, 0.1, -0.3, 0.5499, 0.55, 0.5501, -0.6, 1, -2, 5, 9, -9.1, 20, -50, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1))}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		x = append(x, float32(r.NormFloat64()*3))
	}
	n := len(x)
	dx, dy := upload(t, d, x), malloc(t, d, int64(4*n))
	if err := runtime.Tanh(s, dx, dy, n); err != nil {
		t.Fatal(err)
	}
	got := download(t, s, dy, n)
	var worst float64
	for i, v := range x {
		want := float32(math.Tanh(float64(v)))
		u := ulps(got[i], want)
		if u > 4 || math.Signbit(float64(got[i])) != math.Signbit(float64(want)) {
			t.Fatalf("tanh(%g) = %g, want %g (%v ulp)", v, got[i], want, u)
		}
		worst = max(worst, u)
	}
	t.Logf("tanh over %d values: within %v ulp of math.Tanh", n, worst)
	// In place, as the trainer calls it.
	if err := runtime.Tanh(s, dx, dx, n); err != nil {
		t.Fatal(err)
	}
	if inPlace := download(t, s, dx, n); ulps(inPlace[7], got[7]) != 0 {
		t.Errorf("in-place tanh differs")
	}
	// TanhBackward is exact: the same three roundings as the CPU backend.
	g := randomVec(r, n)
	dg, dout := upload(t, d, g), malloc(t, d, int64(4*n))
	if err := runtime.TanhBackward(s, dy, dg, dout, n); err != nil {
		t.Fatal(err)
	}
	back := download(t, s, dout, n)
	for i := range n {
		y := got[i]
		if want := g[i] * (1 - y*y); back[i] != want {
			t.Fatalf("TanhBackward[%d] = %g, want %g", i, back[i], want)
		}
	}
	// Axpy and Scale through cuBLAS (fused multiply-add: within an ulp).
	ax := randomVec(r, n)
	da := upload(t, d, ax)
	if err := runtime.Axpy(s, -0.25, dg, da, n); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Scale(s, 3, da, n); err != nil {
		t.Fatal(err)
	}
	res := download(t, s, da, n)
	for i := range n {
		want := float32((float64(ax[i]) + -0.25*float64(g[i])) * 3)
		if u := ulps(res[i], want); u > 2 {
			t.Fatalf("axpy+scale[%d] = %g, want %g (%v ulp)", i, res[i], want, u)
		}
	}
	// Zero-length calls do nothing and succeed.
	if err := runtime.Tanh(s, dx, dy, 0); err != nil {
		t.Error(err)
	}
}

// Dot sums on the device, in stream order: the sum of squares of a
// million values (the trainer's loss at 256 rows of width 4096) within
// float32 accumulation's error of the float64 sum, a short dot exact, and
// a GEMM after it still reads its alpha and beta from the host (the
// handle back in host pointer mode).
func TestDot(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1 << 20
	x := randomVec(r, n)
	dx, out := upload(t, d, x), malloc(t, d, 8)
	second, err := out.Elems(runtime.Float32, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Dot(s, dx, dx, out, n); err != nil {
		t.Fatal(err)
	}
	short := upload(t, d, []float32{1, 2, 3, 4})
	if err := runtime.Dot(s, short, short, second, 4); err != nil {
		t.Fatal(err)
	}
	got := download(t, s, out, 2)
	var want float64
	for _, v := range x {
		want += float64(v) * float64(v)
	}
	if rel := math.Abs(float64(got[0])-want) / want; rel > 1e-5 {
		t.Errorf("Σx² over %d values: %g, want %g (relative error %.2g)", n, got[0], want, rel)
	}
	if got[1] != 30 {
		t.Errorf("1+4+9+16 = %g, want 30", got[1])
	}
	// C = 2·A·B + 0.5·C with 1×1 matrices, alpha and beta from the host.
	a, c := upload(t, d, []float32{3}), upload(t, d, []float32{10})
	if err := runtime.Gemm(s, runtime.GemmArgs{M: 1, N: 1, K: 1, Alpha: 2, Beta: 0.5, A: a, B: a, C: c, LDA: 1, LDB: 1, LDC: 1, Type: runtime.Float32}); err != nil {
		t.Fatal(err)
	}
	if v := download(t, s, c, 1); v[0] != 23 {
		t.Errorf("GEMM after Dot: %g, want 2·3·3 + 0.5·10 = 23", v[0])
	}
}

// Synchronous and stream-ordered memory operations on every GPU from one
// thread, whose current device stays what it was.
func TestEveryDeviceFromOneThread(t *testing.T) {
	impl := gpu(t)
	n, _ := impl.DeviceCount()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	before, _ := impl.GetDevice()
	for i := range n {
		d := dev(i)
		s := newStream(t, d)
		a := malloc(t, d, 4096)
		b := malloc(t, d, 4096)
		if err := runtime.Memset(a, 7, nil); err != nil {
			t.Fatalf("cuda:%d: synchronous Memset: %v", i, err)
		}
		if err := runtime.Copy(b, a, s); err != nil {
			t.Fatalf("cuda:%d: Copy: %v", i, err)
		}
		if err := runtime.Memset(a, 1, s); err != nil {
			t.Fatalf("cuda:%d: Memset: %v", i, err)
		}
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4096)
		if err := runtime.CopyToHost(out, b, nil); err != nil {
			t.Fatal(err)
		}
		if out[0] != 7 || out[4095] != 7 {
			t.Errorf("cuda:%d: copy of a memset reads %d", i, out[0])
		}
	}
	if after, _ := impl.GetDevice(); after != before {
		t.Errorf("current device changed from %d to %d", before, after)
	}
}

// Ranks on goroutines of their own, each locked to a thread, drive their
// own GPUs at once: the current device never leaks between them.
func TestConcurrentDevices(t *testing.T) {
	impl := gpu(t)
	n, _ := impl.DeviceCount()
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for g := range 2 * n {
		wg.Go(func() {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			d := dev(g % n)
			s, err := runtime.NewStream(d)
			if err != nil {
				errs[g] = err
				return
			}
			defer s.Destroy()
			const w = 256
			a, err := runtime.Malloc(d, 4*w*w)
			if err != nil {
				errs[g] = err
				return
			}
			defer runtime.Free(a)
			for range 200 {
				if err := runtime.Gemm(s, runtime.GemmArgs{M: w, N: w, K: w, Alpha: 1, A: a, LDA: w, B: a, LDB: w, C: a, LDC: w, Type: runtime.Float32}); err != nil {
					errs[g] = err
					return
				}
				if err := runtime.Tanh(s, a, a, w*w); err != nil {
					errs[g] = err
					return
				}
			}
			errs[g] = s.Synchronize(context.Background())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// The profiler times a GEMM through the backend's events.
func TestProfilerDeviceRange(t *testing.T) {
	gpu(t)
	d := dev(0)
	p, rec, s := profiled(t, d, profiler.WithCollectInterval(0))
	const w = 4096
	a := malloc(t, d, 4*w*w)
	c := malloc(t, d, 4*w*w)
	// The first cuBLAS call on a device loads cuBLAS (every kernel, with
	// eager module loading: about 2 s); it is not what is measured here.
	if err := runtime.Gemm(s, runtime.GemmArgs{M: w, N: w, K: w, Alpha: 1, A: a, LDA: w, B: a, LDB: w, C: c, LDC: w, Type: runtime.Float32}); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.StartDevice("gemm", s)
	for range 4 {
		if err := runtime.Gemm(s, runtime.GemmArgs{M: w, N: w, K: w, Alpha: 1, A: a, LDA: w, B: a, LDB: w, C: c, LDC: w, Type: runtime.Float32}); err != nil {
			t.Fatal(err)
		}
	}
	rec.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 1 || !recs[0].HasDevice {
		t.Fatalf("records %+v", recs)
	}
	r := recs[0]
	dur := r.DeviceDuration()
	tflops := 4 * 2 * float64(w) * w * w / dur.Seconds() / 1e12
	t.Logf("4 × %d³ SGEMM: device %v (%.1f TFLOP/s), host %v, peak memory %d", w, dur, tflops, r.HostDuration(), r.PeakMemory)
	if tflops < 5 || tflops > 200 {
		t.Errorf("%.1f TFLOP/s is implausible for fp32", tflops)
	}
	if r.PeakMemory < 2*4*w*w {
		t.Errorf("peak memory %d below the two buffers", r.PeakMemory)
	}
}

// The profiler's clock placement on a real device, across recalibrations:
// ranges started on an idle stream begin on the device right after the
// host records their start event, so each device start must lie close to
// the host time StartDevice was called at, whichever calibration point
// (one every 20 ms here) placed it. The record's host start is read after
// the event is recorded: where that call takes long (a driver lock held
// by another thread, the goroutine descheduled), the device may start
// before it, by as long as the call took, with the placement correct.
func TestProfilerCalibrationOnDevice(t *testing.T) {
	gpu(t)
	d := dev(0)
	p, rec, s := profiled(t, d, profiler.WithCollectInterval(2*time.Millisecond), profiler.WithRecalibration(20*time.Millisecond))
	const w = 1024
	a := malloc(t, d, 4*w*w)
	c := malloc(t, d, 4*w*w)
	const n = 150 // about 1.5 s: some 75 calibration points
	called := make([]time.Duration, 0, n)
	for range n {
		called = append(called, time.Since(p.Epoch())) // the profiler's clock: the monotonic one, from its epoch
		rec.StartDevice("gemm", s)
		if err := runtime.Gemm(s, runtime.GemmArgs{M: w, N: w, K: w, Alpha: 1, A: a, LDA: w, B: a, LDB: w, C: c, LDC: w, Type: runtime.Float32}); err != nil {
			t.Fatal(err)
		}
		rec.End()
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	slices.SortFunc(recs, func(a, b profiler.Record) int { return cmp.Compare(a.HostStart, b.HostStart) })
	// Before the call by more than the calibration's bracket, or after
	// the host end by more than a launch's latency, is misplaced.
	const early, late = 20 * time.Microsecond, 500 * time.Microsecond
	var worstEarly, worstLate, worstRecord time.Duration
	after := []time.Duration{} // device start less the call's time, per range
	for i, r := range recs {
		if !r.HasDevice {
			t.Fatalf("record %d has no device time", i)
		}
		if r.HostStart < called[i] {
			t.Fatalf("record %d: host start %v before StartDevice was called (%v): not in call order", i, r.HostStart, called[i])
		}
		after = append(after, r.DeviceStart-called[i])
		worstEarly = max(worstEarly, called[i]-r.DeviceStart)
		worstLate = max(worstLate, r.DeviceStart-r.HostEnd)
		worstRecord = max(worstRecord, r.HostStart-r.DeviceStart)
	}
	t.Logf("%d ranges: device start %v to %v after StartDevice was called (up to %v before the host start read after recording its event), at most %v after its host end",
		n, slices.Min(after), slices.Max(after), worstRecord, worstLate)
	if worstEarly > early || worstLate > late {
		t.Errorf("device starts misplaced: up to %v early (bound %v), %v late (bound %v)", worstEarly, early, worstLate, late)
	}
}

// profiled returns a profiler made with opts (closed when t ends), a
// recorder for rank 0 on d, and a stream on d.
func profiled(t *testing.T, d runtime.Device, opts ...profiler.Option) (*profiler.Profiler, *profiler.Recorder, *runtime.Stream) {
	t.Helper()
	s := newStream(t, d) // destroyed after the profiler closes
	p, err := profiler.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	rec, err := p.NewRecorder(0, d)
	if err != nil {
		t.Fatal(err)
	}
	return p, rec, s
}

// Pinned host memory round-trips through the device on a stream, and is
// released.
func TestHostAlloc(t *testing.T) {
	gpu(t)
	const n = 8 << 20
	src, freeSrc, err := runtime.HostAlloc(runtime.CUDA, n)
	if err != nil {
		t.Fatal(err)
	}
	dst, freeDst, err := runtime.HostAlloc(runtime.CUDA, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(src) != n || len(dst) != n {
		t.Fatalf("lengths %d, %d, want %d", len(src), len(dst), n)
	}
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	d := dev(0)
	s := newStream(t, d)
	buf := malloc(t, d, n)
	if err := runtime.CopyToDevice(buf, src, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.CopyToHost(dst, buf, s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		if dst[i] != byte(i*7+i>>8) {
			t.Fatalf("byte %d came back %d, want %d", i, dst[i], byte(i*7+i>>8))
		}
	}
	if err := freeSrc(); err != nil {
		t.Fatal(err)
	}
	if err := freeDst(); err != nil {
		t.Fatal(err)
	}
}

// TestSleepOnDevice: runtime.Sleep holds its stream for the time asked,
// as the stream's own events measure it, and leaves the rest of the
// device free: work on another stream finishes while it sleeps.
func TestSleepOnDevice(t *testing.T) {
	gpu(t)
	d := dev(0)
	s, other := newStream(t, d), newStream(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first kernel of a device loads the module (the PTX JIT, about
	// 0.1 s), with the stream idle meanwhile: not the sleep's to measure.
	if err := runtime.Sleep(s, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	for _, nap := range []time.Duration{100 * time.Microsecond, 2 * time.Millisecond, 20 * time.Millisecond} {
		start, _ := runtime.NewEvent(d, runtime.EventDefault)
		end, _ := runtime.NewEvent(d, runtime.EventDefault)
		// Queued behind a millisecond's hold, the start event and the
		// sleep run back to back on the device: the host's pause
		// between enqueuing them (tens of microseconds, at times) would
		// otherwise be timed as part of the sleep.
		if err := runtime.Sleep(s, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := start.Record(s); err != nil {
			t.Fatal(err)
		}
		if err := runtime.Sleep(s, nap); err != nil {
			t.Fatal(err)
		}
		if err := end.Record(s); err != nil {
			t.Fatal(err)
		}
		if err := end.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		el, err := runtime.Elapsed(start, end)
		if err != nil {
			t.Fatal(err)
		}
		// Below: never shorter. Above: the timer's steps, the naps
		// between its reads (1 µs) and the kernel's start, well under
		// 50 µs on an idle device.
		if el < nap || el > nap+50*time.Microsecond {
			t.Errorf("a %v sleep measured %v by its stream's events", nap, el)
		}
		t.Logf("sleep %v: %v between its stream's events", nap, el)
		start.Destroy()
		end.Destroy()
	}

	const long = 500 * time.Millisecond
	end, _ := runtime.NewEvent(d, runtime.EventDisableTiming)
	defer end.Destroy()
	if err := runtime.Sleep(s, long); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	x := upload(t, d, randomVec(rand.New(rand.NewPCG(1, 2)), n))
	y := malloc(t, d, 4*n)
	for range 10 {
		if err := runtime.Tanh(other, x, y, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := end.Query(); !errors.Is(err, runtime.StatusNotReady) {
		t.Errorf("the sleeping stream was done (%v) when another stream's kernels finished: the sleep held the device, or ended early", err)
	}
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
}

// A nil stream's Memset and device-to-device Copy are done when they
// return: a stream of the backend's (non-blocking: it does not wait for
// CUDA's legacy stream) reading the memory right after sees the new
// bytes. cudaMemset and cudaMemcpy alone return early for device memory;
// a 16 GiB memset showed the old bytes 10 times in 10.
func TestNilStreamWorkIsDoneOnReturn(t *testing.T) {
	gpu(t)
	d := dev(0)
	const size = 16 << 30
	buf := malloc(t, d, size)
	other := malloc(t, d, size)
	s := newStream(t, d)
	tail, err := buf.Slice(size-4, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []byte{0xab, 0x5c, 0x17} {
		if err := runtime.Memset(buf, v, nil); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if err := runtime.CopyToHost(got, tail, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got[0] != v || got[3] != v {
			t.Errorf("round %d: the last bytes after Memset(%#x, nil) read %x on a stream: the memset was not done", i, v, got)
		}
		// And a copy of the whole buffer, read at its end the same way.
		if err := runtime.Copy(other, buf, nil); err != nil {
			t.Fatal(err)
		}
		otherTail, _ := other.Slice(size-4, 4)
		if err := runtime.CopyToHost(got, otherTail, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got[0] != v {
			t.Errorf("round %d: the copy's last bytes read %x: the copy was not done", i, got)
		}
	}
}

// Vectors longer than a C int are updated whole: cuBLAS takes the length
// as an int, and 2^31 + 1024 floats passed as such changed nothing.
func TestAxpyBeyond32Bits(t *testing.T) {
	gpu(t)
	d := dev(0)
	const n = 1<<31 + 1024
	x := malloc(t, d, 4*n)
	y := malloc(t, d, 4*n)
	s := newStream(t, d)
	// x: every float the bytes 0x01010101 (2.37e-38, a normal float); y: 0.
	if err := runtime.Memset(x, 1, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Memset(y, 0, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Axpy(s, 1, x, y, n); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Scale(s, 2, y, n); err != nil {
		t.Fatal(err)
	}
	want := 2 * math.Float32frombits(0x01010101)
	for _, i := range []int64{0, 1<<31 - 1, 1 << 31, n - 1} {
		at, err := y.Slice(4*i, 4)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if err := runtime.CopyToHost(got, at, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		if v := bytesf32(got)[0]; v != want {
			t.Errorf("y[%d] = %g after y += x, y *= 2, want %g", i, v, want)
		}
	}
}

// A GEMM with K = 0 computes C = βC and reads neither A nor B: the
// runtime lets them be zero Buffers with any LDA and LDB, as the CPU
// backend does, and cuBLAS must then get NULL operands with leading
// dimensions it accepts.
func TestGemmEmptyInner(t *testing.T) {
	gpu(t)
	d := dev(0)
	s := newStream(t, d)
	const m, n = 4, 3
	c0 := make([]float32, m*n)
	for i := range c0 {
		c0[i] = float32(i) - 5.5
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, ld := range []int{0, 1} {
				c := upload(t, d, c0)
				err := runtime.Gemm(s, runtime.GemmArgs{TransA: ta, TransB: tb, M: m, N: n, K: 0, Alpha: 1, Beta: 2,
					LDA: ld, LDB: ld, C: c, LDC: m, Type: runtime.Float32})
				if err != nil {
					t.Errorf("K=0 transA=%v transB=%v LDA=LDB=%d, A and B empty: %v", ta, tb, ld, err)
					continue
				}
				for i, v := range download(t, s, c, m*n) {
					if v != 2*c0[i] {
						t.Errorf("K=0 transA=%v transB=%v LDA=LDB=%d: C[%d] = %g, want β·C = %g", ta, tb, ld, i, v, 2*c0[i])
						break
					}
				}
			}
		}
	}
}

// The trainer enqueues a GEMM over many rows in pieces of at most 2^30
// (pipeline.maxGemmRows: one SGEMM of N = 2^31−1 failed here with
// CUBLAS_STATUS_INTERNAL_ERROR): over 2^31 + 1024 rows of width 1 the
// pieces start 4 GiB and 8 GiB into their buffers, and every row is
// computed; a GEMM of N = 2^31 is refused by name, not cut short.
func TestGemmPiecesBeyond32Bits(t *testing.T) {
	gpu(t)
	d := dev(0)
	const n = 1<<31 + 1024
	x := malloc(t, d, 4*n)
	z := malloc(t, d, 4*n)
	s := newStream(t, d)
	// x: every float the bytes 0x01010101 (2.37e-38, a normal float); z: 0.
	if err := runtime.Memset(x, 1, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Memset(z, 0, s); err != nil {
		t.Fatal(err)
	}
	w := upload(t, d, []float32{2})
	// z = w·x, one row of width 1 per column, as the trainer's
	// linearForward with Width 1.
	gemm := func(off, k int64) error {
		xk, err := x.Slice(4*off, 4*k)
		if err != nil {
			return err
		}
		zk, err := z.Slice(4*off, 4*k)
		if err != nil {
			return err
		}
		return runtime.Gemm(s, runtime.GemmArgs{M: 1, N: int(k), K: 1, Alpha: 1,
			A: w, LDA: 1, B: xk, LDB: 1, C: zk, LDC: 1, Type: runtime.Float32})
	}
	if err := gemm(0, math.MaxInt32+1); err == nil || !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "N 2147483648") {
		t.Errorf("a GEMM of N = 2^31: %v, want it refused naming N", err)
	}
	const piece = 1 << 30
	for off := int64(0); off < n; off += piece {
		if err := gemm(off, min(piece, n-off)); err != nil {
			t.Fatalf("rows %d…: %v", off, err)
		}
	}
	want := 2 * math.Float32frombits(0x01010101)
	for _, i := range []int64{0, piece - 1, piece, 1<<31 - 1, 1 << 31, n - 1} {
		at, err := z.Slice(4*i, 4)
		if err != nil {
			t.Fatal(err)
		}
		if v := download(t, s, at, 1)[0]; v != want {
			t.Errorf("z[%d] = %g after z = 2x in pieces, want %g", i, v, want)
		}
	}
}

// The loss's dot product runs over up to 2^31−1 elements in one GEMM
// (pipeline.maxDotLen): M = N = 1, K = 2^31−1, A transposed, computed whole.
func TestGemmDotOfMaxLength(t *testing.T) {
	gpu(t)
	d := dev(0)
	const k = math.MaxInt32
	g := malloc(t, d, 4*int64(k))
	c := malloc(t, d, 4)
	s := newStream(t, d)
	// g: every float the bytes 0x3f3f3f3f (0.7470…).
	if err := runtime.Memset(g, 0x3f, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Gemm(s, runtime.GemmArgs{TransA: true, M: 1, N: 1, K: k, Alpha: 1,
		A: g, LDA: k, B: g, LDB: k, C: c, LDC: 1, Type: runtime.Float32}); err != nil {
		t.Fatal(err)
	}
	v := float64(math.Float32frombits(0x3f3f3f3f))
	want := float64(k) * v * v
	if got := float64(download(t, s, c, 1)[0]); math.Abs(got-want) > 1e-3*want {
		t.Errorf("g·g over %d elements = %g, want %g", k, got, want)
	}
}

// TestDescribingMakesNoContext: what profile-run version asks of the
// backend — the device count, each GPU's name, UUID and total memory, the
// libraries and their versions — makes no context on any GPU, so that
// describing a machine whose GPUs train costs them no memory. It needs a
// process in which nothing has used a GPU, so it runs alone:
//
//	cuda.test -test.run '^TestDescribingMakesNoContext$'
func TestDescribingMakesNoContext(t *testing.T) {
	impl := gpu(t)
	n, err := impl.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if active, err := impl.PrimaryContextActive(i); err != nil || active {
			t.Skipf("skipped: GPU %d has a context already (%v); run this test alone in a fresh process (-test.run '^TestDescribingMakesNoContext$')", i, err)
		}
	}
	done := make(chan struct{})
	go func() { // on a thread of its own, given up afterwards: no context current before or kept
		defer close(done)
		goruntime.LockOSThread()
		for i := range n {
			if _, err := impl.DeviceName(i); err != nil {
				t.Errorf("DeviceName(%d): %v", i, err)
			}
			if _, err := impl.DeviceUUID(i); err != nil {
				t.Errorf("DeviceUUID(%d): %v", i, err)
			}
			if b, err := impl.DeviceTotalMemory(i); err != nil || b <= 0 {
				t.Errorf("DeviceTotalMemory(%d) = %d, %v", i, b, err)
			}
		}
		if len(impl.Libraries()) < 3 {
			t.Errorf("Libraries = %+v", impl.Libraries())
		}
	}()
	<-done
	for i := range n {
		if active, err := impl.PrimaryContextActive(i); err != nil || active {
			t.Errorf("GPU %d: context made by describing it (%v)", i, err)
		}
	}
}
