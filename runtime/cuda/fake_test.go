package cuda

import (
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// A fake CUDA: Go functions made callable from C (purego.NewCallback)
// stand in for the libcudart, libcuda and libcublas entry points the
// backend calls, so that what it does around them — which calls it
// makes, with what, and what it undoes after a failure — is checked
// without a GPU. The callbacks are made once per process (their number is
// limited) and act on fake, which each test resets.

// fakeState is what the fake functions do and what they have seen.
type fakeState struct {
	mu sync.Mutex

	// Return codes, by function name; 0 where absent.
	rc map[string]int32
	// failFunction is a kernel name cuModuleGetFunction fails for,
	// with rc["cuModuleGetFunction"].
	failFunction string
	// The runtime's answers: versions, the device count, by runtime
	// (fakeRuntime's argument).
	runtimeVersion map[int]int32
	deviceCount    map[int]int32

	device  int32   // the runtime's current device
	ctx     uintptr // the driver's current context
	calls   map[string]int
	retains map[uintptr]int // primary-context retains less releases, by CUdevice
	modules map[uintptr]bool
	nextMod uintptr
	args    map[string][]uintptr // the arguments of the last call, by name
}

var fake fakeState

// resetFake clears the fake's state for a test.
func resetFake() {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	fake.rc = map[string]int32{}
	fake.failFunction = ""
	fake.runtimeVersion = map[int]int32{}
	fake.deviceCount = map[int]int32{}
	fake.device, fake.ctx = 0, 0
	fake.calls = map[string]int{}
	fake.retains = map[uintptr]int{}
	fake.modules = map[uintptr]bool{}
	fake.nextMod = 0x7000
	fake.args = map[string][]uintptr{}
}

// enterFake records a call and returns its configured result code; the
// caller holds nothing.
func enterFake(name string, args ...uintptr) int32 {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	fake.calls[name]++
	fake.args[name] = args
	return fake.rc[name]
}

func fakeCalls(name string) int {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	return fake.calls[name]
}

func fakeArgs(name string) []uintptr {
	fake.mu.Lock()
	defer fake.mu.Unlock()
	return fake.args[name]
}

// put writes v where p points: memory of a dl.Frame.
func put[T any](p uintptr, v T) { *(*T)(cPointer(p)) = v }

var (
	fakeErrName = []byte("cudaErrorFake\x00")
	fakeErrDesc = []byte("a fake failure\x00")
)

func cstr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

var (
	fakeOnce     sync.Once
	fakeRuntimes [2]*cudart // fakeRuntime(0) and fakeRuntime(1)
	fakeDrv      *driver
	fakeBlas     *cublas
)

func makeFakes() {
	cb := purego.NewCallback
	status := func(name string) uintptr {
		return cb(func(a uintptr) uintptr { return uintptr(enterFake(name, a)) })
	}
	shared := cudart{
		getErrorName:   cb(func(uintptr) uintptr { return cstr(fakeErrName) }),
		getErrorString: cb(func(uintptr) uintptr { return cstr(fakeErrDesc) }),
		getLastError:   cb(func() uintptr { return 0 }),
		getDevice: cb(func(p uintptr) uintptr {
			rc := enterFake("cudaGetDevice", p)
			if rc == 0 {
				fake.mu.Lock()
				put(p, fake.device)
				fake.mu.Unlock()
			}
			return uintptr(rc)
		}),
		setDevice: cb(func(d uintptr) uintptr {
			rc := enterFake("cudaSetDevice", d)
			if rc == 0 {
				fake.mu.Lock()
				fake.device = int32(d)
				fake.mu.Unlock()
			}
			return uintptr(rc)
		}),
		streamDestroy: status("cudaStreamDestroy"),
		driverGetVersion: cb(func(p uintptr) uintptr {
			put(p, int32(12040))
			return 0
		}),
	}
	for i := range fakeRuntimes {
		rt := shared
		rt.runtimeGetVersion = cb(func(p uintptr) uintptr {
			fake.mu.Lock()
			defer fake.mu.Unlock()
			put(p, fake.runtimeVersion[i])
			return 0
		})
		name := []string{"cudaGetDeviceCount0", "cudaGetDeviceCount1"}[i]
		rt.getDeviceCount = cb(func(p uintptr) uintptr {
			rc := enterFake(name, p)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			put(p, fake.deviceCount[i])
			return uintptr(rc)
		})
		fakeRuntimes[i] = &rt
	}
	fakeDrv = &driver{
		init: status("cuInit"),
		deviceGet: cb(func(p, ordinal uintptr) uintptr {
			put(p, int32(ordinal)+100) // CUdevice 100 + ordinal
			return uintptr(enterFake("cuDeviceGet", p, ordinal))
		}),
		primaryCtxRetain: cb(func(p, dev uintptr) uintptr {
			rc := enterFake("cuDevicePrimaryCtxRetain", p, dev)
			if rc == 0 {
				fake.mu.Lock()
				fake.retains[dev]++
				fake.mu.Unlock()
				put(p, 0xc000+dev)
			}
			return uintptr(rc)
		}),
		primaryCtxRelease: cb(func(dev uintptr) uintptr {
			rc := enterFake("cuDevicePrimaryCtxRelease", dev)
			fake.mu.Lock()
			fake.retains[dev]--
			fake.mu.Unlock()
			return uintptr(rc)
		}),
		ctxGetCurrent: cb(func(p uintptr) uintptr {
			rc := enterFake("cuCtxGetCurrent", p)
			fake.mu.Lock()
			put(p, fake.ctx)
			fake.mu.Unlock()
			return uintptr(rc)
		}),
		ctxSetCurrent: cb(func(c uintptr) uintptr {
			rc := enterFake("cuCtxSetCurrent", c)
			if rc == 0 {
				fake.mu.Lock()
				fake.ctx = c
				fake.mu.Unlock()
			}
			return uintptr(rc)
		}),
		moduleLoadDataEx: cb(func(p, image, n, opts, vals uintptr) uintptr {
			rc := enterFake("cuModuleLoadDataEx", p, image, n, opts, vals)
			if rc == 0 {
				fake.mu.Lock()
				fake.nextMod++
				fake.modules[fake.nextMod] = true
				put(p, fake.nextMod)
				fake.mu.Unlock()
			}
			return uintptr(rc)
		}),
		moduleGetFunction: cb(func(p, mod, name uintptr) uintptr {
			enterFake("cuModuleGetFunction", p, mod, name)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if fake.failFunction == goString(name) {
				return uintptr(fake.rc["cuModuleGetFunction"])
			}
			put(p, mod<<8+uintptr(len(goString(name))))
			return 0
		}),
		moduleUnload: cb(func(mod uintptr) uintptr {
			enterFake("cuModuleUnload", mod)
			fake.mu.Lock()
			delete(fake.modules, mod)
			fake.mu.Unlock()
			return 0
		}),
		getErrorName: cb(func(code, p uintptr) uintptr {
			put(p, cstr(fakeErrName))
			return 0
		}),
		getErrorString: cb(func(code, p uintptr) uintptr {
			put(p, cstr(fakeErrDesc))
			return 0
		}),
	}
	fakeBlas = &cublas{destroy: status("cublasDestroy_v2")}
}

func goString(p uintptr) string {
	n := 0
	for *(*byte)(unsafe.Add(cPointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(cPointer(p)), n))
}

// fakeImpl returns a backend initialised on the fake, with two GPUs,
// the driver loaded and cuBLAS bound; the fake is reset. Its real library
// paths lead nowhere.
func fakeImpl(t *testing.T) *Impl {
	t.Helper()
	fakeOnce.Do(makeFakes)
	resetFake()
	dir := t.TempDir()
	m := New(WithLibrary(filepath.Join(dir, "libcudart.so")),
		WithCUBLASLibrary(filepath.Join(dir, "libcublas.so")),
		WithDriverLibrary(filepath.Join(dir, "libcuda.so")))
	m.rt = fakeRuntimes[0]
	m.devices = []device{{index: 0}, {index: 1}}
	m.loaded.Store(true)
	m.once.Do(func() {}) // Init must not load
	m.drv.kept.Store(&loadResult[driver]{v: fakeDrv})
	m.blasOnce.Do(func() { m.blas = fakeBlas })
	return m
}
