package cuda

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

func TestStatusOf(t *testing.T) {
	cases := []struct {
		code int32
		want runtime.Status
	}{
		{0, runtime.StatusSuccess},
		{1, runtime.StatusInvalidArgument},    // cudaErrorInvalidValue
		{2, runtime.StatusOutOfMemory},        // cudaErrorMemoryAllocation
		{35, runtime.StatusUnavailable},       // cudaErrorInsufficientDriver
		{100, runtime.StatusUnavailable},      // cudaErrorNoDevice
		{101, runtime.StatusInvalidArgument},  // cudaErrorInvalidDevice
		{400, runtime.StatusInvalidArgument},  // cudaErrorInvalidResourceHandle
		{600, runtime.StatusNotReady},         // cudaErrorNotReady
		{700, runtime.StatusError},            // cudaErrorIllegalAddress
		{800, runtime.StatusPermissionDenied}, // cudaErrorNotPermitted
		{801, runtime.StatusNotSupported},     // cudaErrorNotSupported
		{999, runtime.StatusUnknown},          // cudaErrorUnknown
		{12345, runtime.StatusError},
	}
	for _, c := range cases {
		if got := statusOf(c.code); got != c.want {
			t.Errorf("statusOf(%d) = %v, want %v", c.code, got, c.want)
		}
	}
}

func TestNotReadyAllocatesNothing(t *testing.T) {
	m := New()
	var err error
	if n := testing.AllocsPerRun(100, func() { err = m.cudaErr("EventQuery", cudaErrorNotReady) }); n != 0 {
		t.Errorf("a NotReady result allocates %v times", n)
	}
	if !errors.Is(err, runtime.StatusNotReady) {
		t.Errorf("err %v", err)
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0x1c, 0x2f, 0x93, 0x04, 0xaa, 0x0b, 0x77, 0x10, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03}
	if got, want := formatUUID(u), "GPU-1c2f9304-aa0b-7710-dead-beef00010203"; got != want {
		t.Errorf("formatUUID = %s, want %s", got, want)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12040: "12.4", 12080: "12.8", 11080: "11.8", 0: "none"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestCandidates(t *testing.T) {
	t.Setenv(EnvCudartLib, "/from/env.so")
	if got := candidates("/explicit.so", EnvCudartLib, "a", "b"); len(got) != 1 || got[0] != "/explicit.so" {
		t.Errorf("explicit: %v", got)
	}
	if got := candidates("", EnvCudartLib, "a", "b"); len(got) != 1 || got[0] != "/from/env.so" {
		t.Errorf("environment: %v", got)
	}
	t.Setenv(EnvCudartLib, "")
	if got := candidates("", EnvCudartLib, "a", "b"); len(got) != 2 {
		t.Errorf("defaults: %v", got)
	}
}

// TestCuptiFollowsTheRuntimesMajor: a runtime that fell back to CUDA 12
// (a driver too old for 13) tries CUPTI 12 first, since CUPTI 13 refuses
// that driver; an unknown major keeps the newest first.
func TestCuptiFollowsTheRuntimesMajor(t *testing.T) {
	t.Setenv(EnvCuptiLib, "")
	for _, c := range []struct {
		major int
		first string
	}{{12, "libcupti.so.12"}, {13, "libcupti.so.13"}, {0, "libcupti.so.13"}, {14, "libcupti.so.14"}} {
		got := cuptiCandidates(c.major)
		if len(got) == 0 || got[0] != c.first {
			t.Errorf("major %d: candidates %v, want %s first", c.major, got, c.first)
		}
		seen := map[string]bool{}
		for _, n := range got {
			if seen[n] {
				t.Errorf("major %d: %s tried twice in %v", c.major, n, got)
			}
			seen[n] = true
		}
		if !seen["libcupti.so.12"] || !seen["libcupti.so.13"] {
			t.Errorf("major %d: %v lacks a known major", c.major, got)
		}
	}
	t.Setenv(EnvCuptiLib, "/from/env/libcupti.so")
	if got := cuptiCandidates(12); len(got) != 1 || got[0] != "/from/env/libcupti.so" {
		t.Errorf("with %s set: %v", EnvCuptiLib, got)
	}
}

// cGetenv returns C's getenv, through libc, or skips the test: what CUDA
// reads its variables with.
func cGetenv(t *testing.T) func(name string) string {
	t.Helper()
	libc, _, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Skipf("skipped: no libc.so.6 to read the C environment with: %v", err)
	}
	getenv, err := libc.Lookup("getenv")
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) string {
		c := dl.CString(name)
		v := dl.GoString(dl.Call(getenv, uintptr(unsafe.Pointer(&c[0]))))
		goruntime.KeepAlive(c)
		return v
	}
}

// TestModuleLoadingReachesC checks that Init's CUDA_MODULE_LOADING=EAGER
// is visible to C code (CUDA reads it with getenv), not only to Go, and
// that a value the user set, or WithLazyLoading, is left alone. It needs
// no GPU: the variable is set before libcudart is looked for.
func TestModuleLoadingReachesC(t *testing.T) {
	cgetenv := cGetenv(t)
	nowhere := filepath.Join(t.TempDir(), "libcudart.so")
	cases := []struct {
		name       string
		preset     string // "" for unset
		opts       []Option
		want, seen string
	}{
		{name: "unset", want: "EAGER", seen: "EAGER"},
		{name: "user's value kept", preset: "LAZY", want: "LAZY", seen: "LAZY"},
		{name: "WithLazyLoading", opts: []Option{WithLazyLoading(true)}, want: "", seen: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvModuleLoading, "x") // restored after the test
			if c.preset == "" {
				os.Unsetenv(EnvModuleLoading)
			} else {
				os.Setenv(EnvModuleLoading, c.preset)
			}
			m := New(append(c.opts, WithLibrary(nowhere))...)
			if err := m.Init(); runtime.StatusOf(err) != runtime.StatusUnavailable {
				t.Fatalf("Init with %s: %v, want Unavailable", nowhere, err)
			}
			if got := m.ModuleLoading(); got != c.want {
				t.Errorf("ModuleLoading() = %q, want %q", got, c.want)
			}
			if got := cgetenv(EnvModuleLoading); got != c.seen {
				t.Errorf("C getenv(%s) = %q, want %q", EnvModuleLoading, got, c.seen)
			}
		})
	}
}

// TestDeviceConnectionsReachC: WithDeviceConnections sets
// CUDA_DEVICE_MAX_CONNECTIONS where the C environment (CUDA reads it with
// getenv) has none, and keeps a value the user set; without it Init
// leaves the variable alone.
// It needs no GPU: the variable is set before libcudart is looked for.
func TestDeviceConnectionsReachC(t *testing.T) {
	cgetenv := cGetenv(t)
	nowhere := filepath.Join(t.TempDir(), "libcudart.so")
	cases := []struct {
		name   string
		preset string // "" for unset
		opts   []Option
		want   string
	}{
		{name: "unset", want: ""},
		{name: "user's value kept", preset: "4", want: "4"},
		{name: "asked for", opts: []Option{WithDeviceConnections(32)}, want: "32"},
		{name: "asked for, user's value kept", preset: "1", opts: []Option{WithDeviceConnections(32)}, want: "1"},
		{name: "0 leaves it to CUDA", opts: []Option{WithDeviceConnections(0)}, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvDeviceMaxConnections, "x") // restored after the test
			if c.preset == "" {
				os.Unsetenv(EnvDeviceMaxConnections)
			} else {
				os.Setenv(EnvDeviceMaxConnections, c.preset)
			}
			m := New(append(c.opts, WithLibrary(nowhere))...)
			if err := m.Init(); runtime.StatusOf(err) != runtime.StatusUnavailable {
				t.Fatalf("Init with %s: %v, want Unavailable", nowhere, err)
			}
			if got := m.DeviceConnections(); got != c.want {
				t.Errorf("DeviceConnections() = %q, want %q", got, c.want)
			}
			if got := cgetenv(EnvDeviceMaxConnections); got != c.want {
				t.Errorf("C getenv(%s) = %q, want %q", EnvDeviceMaxConnections, got, c.want)
			}
		})
	}
}

// The compute type each float32 GEMM gets, with and without WithTF32. The
// numbers are cublasComputeType_t's in cublas_api.h: CUBLAS_COMPUTE_32F
// 68, CUBLAS_COMPUTE_32F_FAST_16BF 75, CUBLAS_COMPUTE_32F_FAST_TF32 77.
func TestFloat32Compute(t *testing.T) {
	const full, bf16, tf32 = 68, 75, 77
	cases := []struct {
		mode     runtime.MathMode
		withTF32 bool
		want     uintptr
	}{
		{runtime.MathDefault, false, full},
		{runtime.MathDefault, true, tf32}, // WithTF32 lowers the default only
		{runtime.MathTF32, false, tf32},
		{runtime.MathTF32, true, tf32},
		{runtime.MathBF16, false, bf16},
		{runtime.MathBF16, true, bf16}, // an explicit mode wins over WithTF32
	}
	for _, c := range cases {
		got, err := float32Compute(runtime.GemmArgs{Type: runtime.Float32, Math: c.mode}, c.withTF32)
		if err != nil || got != c.want {
			t.Errorf("%s (WithTF32 %v): compute type %d, %v; want %d", c.mode, c.withTF32, got, err, c.want)
		}
	}
	for _, g := range []runtime.GemmArgs{
		{Type: runtime.Float64, Math: runtime.MathTF32},
		{Type: runtime.BFloat16, Math: runtime.MathBF16},
		{Type: runtime.Float32, Math: runtime.MathMode(3)},
	} {
		if _, err := float32Compute(g, false); !errors.Is(err, runtime.StatusInvalidArgument) {
			t.Errorf("%s GEMM with math %s: %v, want InvalidArgument", g.Type, g.Math, err)
		}
	}
	m := New()
	for mode, want := range map[runtime.MathMode]bool{runtime.MathDefault: true, runtime.MathTF32: true, runtime.MathBF16: true, 3: false} {
		if got := m.SupportsMath(mode); got != want {
			t.Errorf("SupportsMath(%s) = %v, want %v", mode, got, want)
		}
	}
}

// BenchmarkEventRecordDriver: where the host time of an event record
// goes. The runtime's cudaEventRecord beside the driver's cuEventRecord
// on the same timing event and stream (the handles are the same objects),
// and beside a Go → C call that does almost nothing (cudaGetLastError):
// the purego call's own share. Run on a GPU machine with -test.bench
// EventRecordDriver.
func BenchmarkEventRecordDriver(b *testing.B) {
	impl, err := runtime.Available(runtime.CUDA)
	if err != nil {
		b.Skipf("skipped: no CUDA GPU on this machine: %v", err)
	}
	m := impl.(*Impl)
	drv, err := m.driverAPI("bench")
	if err != nil {
		b.Fatal(err)
	}
	cuEventRecord, err := drv.lib.Lookup("cuEventRecord")
	if err != nil {
		b.Fatal(err)
	}
	// The driver API needs the device's context current on the calling
	// thread; the runtime makes it so at its first call there. Each
	// sub-benchmark runs on a goroutine of its own, so each locks its
	// thread.
	onDevice := func(b *testing.B) {
		if rc := int32(dl.Call(m.rt.setDevice, 0)); rc != 0 {
			b.Fatal(m.cudaErr("bench", rc))
		}
	}
	d := runtime.Device{Type: runtime.CUDA, Index: 0}
	s, err := runtime.NewStream(d)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	e, err := runtime.NewEvent(d, runtime.EventDefault)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Destroy()
	sh, eh := s.Handle().(*stream).h, e.Handle().(*event).h
	if rc := int32(dl.Call(m.rt.eventRecord, eh, sh)); rc != 0 {
		b.Fatal(m.cudaErr("bench", rc))
	}
	drain := func(b *testing.B, i int) {
		if i%1024 == 1023 {
			b.StopTimer()
			dl.Call(m.rt.streamSynchronize, sh)
			b.StartTimer()
		}
	}
	b.Run("cudaEventRecord", func(b *testing.B) {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		onDevice(b)
		for i := 0; b.Loop(); i++ {
			dl.Call(m.rt.eventRecord, eh, sh)
			drain(b, i)
		}
	})
	b.Run("cuEventRecord", func(b *testing.B) {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		onDevice(b)
		if rc := int32(dl.Call(cuEventRecord, eh, sh)); rc != 0 {
			b.Fatalf("cuEventRecord: error %d", rc)
		}
		for i := 0; b.Loop(); i++ {
			dl.Call(cuEventRecord, eh, sh)
			drain(b, i)
		}
	})
	b.Run("cudaGetLastError", func(b *testing.B) {
		for b.Loop() {
			dl.Call(m.rt.getLastError)
		}
	})
}

// The leading dimensions a GEMM gives cuBLAS meet cuBLAS's own check
// (cublas<t>gemm and cublasGemmEx return CUBLAS_STATUS_INVALID_VALUE "if
// lda < max(1, m) when transa == CUBLAS_OP_N and lda < max(1, k)
// otherwise", ldb likewise with k and n, "or if ldc < max(1, m)"), which
// holds whatever k is. With K = 0 the runtime accepts any LDA and LDB (A
// and B are not read; the CPU backend computes C = βC), so those must not
// reach cuBLAS as given: LDA 0 with M 4 went as lda 1 and failed on the
// GPU only.
func TestLeadingDimsMeetCublasChecks(t *testing.T) {
	accepts := func(g runtime.GemmArgs, lda, ldb, ldc uintptr) bool {
		ar, br := g.M, g.K
		if g.TransA {
			ar = g.K
		}
		if g.TransB {
			br = g.N
		}
		// cuBLAS takes them as C ints.
		for _, v := range []uintptr{lda, ldb, ldc} {
			if v > math.MaxInt32 {
				return false
			}
		}
		return lda >= uintptr(max(1, ar)) && ldb >= uintptr(max(1, br)) && ldc >= uintptr(max(1, g.M))
	}
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, ld := range []int{0, 1, 1 << 40} {
				g := runtime.GemmArgs{TransA: ta, TransB: tb, M: 4, N: 3, K: 0, LDA: ld, LDB: ld, LDC: 4}
				lda, ldb, ldc := leadingDims(g)
				if !accepts(g, lda, ldb, ldc) {
					t.Errorf("K=0 transA=%v transB=%v LDA=LDB=%d: cuBLAS gets lda %d ldb %d ldc %d, which it refuses", ta, tb, ld, lda, ldb, ldc)
				}
			}
		}
	}
	// Checked leading dimensions of a GEMM with K > 0 pass unchanged,
	// padding included.
	for _, g := range []runtime.GemmArgs{
		{M: 4, N: 3, K: 5, LDA: 4, LDB: 5, LDC: 4},
		{M: 4, N: 3, K: 5, LDA: 7, LDB: 9, LDC: 6},
		{TransA: true, TransB: true, M: 4, N: 3, K: 5, LDA: 5, LDB: 3, LDC: 4},
		{TransA: true, M: 1, N: 1, K: 1, LDA: 1, LDB: 1, LDC: 1},
	} {
		lda, ldb, ldc := leadingDims(g)
		if int(lda) != g.LDA || int(ldb) != g.LDB || int(ldc) != g.LDC {
			t.Errorf("%+v: lda %d ldb %d ldc %d, want them as given", g, lda, ldb, ldc)
		}
	}
}
