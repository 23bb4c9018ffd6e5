package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// CUDA's codes for the fake's failures (cuda.h, driver_types.h).
const (
	fakeOutOfMemory   = 2   // CUDA_ERROR_OUT_OF_MEMORY
	fakeBusy          = 46  // CUDA_ERROR_DEVICE_UNAVAILABLE
	fakeNoDevice      = 100 // CUDA_ERROR_NO_DEVICE
	fakeInvalidCtx    = 201 // CUDA_ERROR_INVALID_CONTEXT
	fakeInvalidPTX    = 218 // CUDA_ERROR_INVALID_PTX
	fakeNotFound      = 500 // CUDA_ERROR_NOT_FOUND
	fakeDriverTooOld  = 35  // cudaErrorInsufficientDriver
	fakeNoDeviceCount = 100 // cudaErrorNoDevice
)

// The fake's primary context of GPU 1 (CUdevice 101) and the context the
// thread has before the kernels load.
const (
	ctxOfGPU1 = 0xc000 + 101
	otherCtx  = 0x1234
)

// A kernel load that fails after cuDevicePrimaryCtxRetain releases the
// retain, unloads a module it loaded and gives the thread its context
// back, whichever step fails.
func TestKernelLoadFailureLeavesNothing(t *testing.T) {
	cases := []struct {
		name       string
		fail       string // the function that fails
		rc         int32
		failFn     string // kernel name cuModuleGetFunction fails for
		loaded     bool   // the module had loaded when the failure came
		wantStatus runtime.Status
	}{
		{name: "cuModuleGetFunction", fail: "cuModuleGetFunction", rc: fakeNotFound, failFn: "ts_tanh_backward", loaded: true, wantStatus: runtime.StatusNotSupported},
		{name: "cuModuleLoadDataEx", fail: "cuModuleLoadDataEx", rc: fakeInvalidPTX, wantStatus: runtime.StatusInternal},
		{name: "cuCtxSetCurrent", fail: "cuCtxSetCurrent", rc: fakeInvalidCtx, wantStatus: runtime.StatusError},
		{name: "cuCtxGetCurrent", fail: "cuCtxGetCurrent", rc: fakeInvalidCtx, wantStatus: runtime.StatusError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := fakeImpl(t)
			fake.mu.Lock()
			fake.device, fake.ctx = 1, otherCtx
			fake.rc[c.fail] = c.rc
			fake.failFunction = c.failFn
			fake.mu.Unlock()
			_, err := m.kernelsOn("Tanh", &m.devices[1])
			if !errors.Is(err, c.wantStatus) {
				t.Fatalf("kernelsOn: %v, want %v", err, c.wantStatus)
			}
			fake.mu.Lock()
			retains, modules, ctx := fake.retains[101], len(fake.modules), fake.ctx
			fake.mu.Unlock()
			if retains != 0 {
				t.Errorf("primary context of CUdevice 101 retained %d more times than released", retains)
			}
			if modules != 0 {
				t.Errorf("%d module(s) left loaded", modules)
			}
			if got := fakeCalls("cuModuleUnload"); c.loaded != (got == 1) {
				t.Errorf("cuModuleUnload called %d times (module loaded: %v)", got, c.loaded)
			}
			if ctx != otherCtx {
				t.Errorf("current context %#x after the failure, want %#x as before", ctx, otherCtx)
			}
		})
	}
}

// A kernel load that fails for want of device memory is tried again at
// the next call; one the driver refuses (invalid PTX) is not.
func TestKernelLoadRetriedAfterTransientFailure(t *testing.T) {
	m := fakeImpl(t)
	fake.mu.Lock()
	fake.device, fake.ctx = 1, otherCtx
	fake.rc["cuModuleLoadDataEx"] = fakeOutOfMemory
	fake.mu.Unlock()
	if _, err := m.kernelsOn("Tanh", &m.devices[1]); !errors.Is(err, runtime.StatusOutOfMemory) {
		t.Fatalf("first load: %v, want OutOfMemory", err)
	}
	fake.mu.Lock()
	delete(fake.rc, "cuModuleLoadDataEx")
	fake.mu.Unlock()
	k, err := m.kernelsOn("Sleep", &m.devices[1])
	if err != nil {
		t.Fatalf("second load, with memory: %v", err)
	}
	if k.ctx != ctxOfGPU1 || k.tanh == 0 || k.tanhBackward == 0 || k.sleep == 0 {
		t.Errorf("kernels %+v", *k)
	}
	if n := fakeCalls("cuModuleLoadDataEx"); n != 2 {
		t.Errorf("cuModuleLoadDataEx called %d times, want 2", n)
	}
	fake.mu.Lock()
	retains := fake.retains[101]
	fake.mu.Unlock()
	if retains != 1 {
		t.Errorf("primary context retained %d times net, want 1 (the loaded kernels')", retains)
	}
	// Loaded: kept, and reading it allocates nothing.
	if n := testing.AllocsPerRun(100, func() { k, err = m.kernelsOn("Tanh", &m.devices[1]) }); n != 0 || err != nil {
		t.Errorf("kernelsOn once loaded: %v allocations, %v", n, err)
	}
	if n := fakeCalls("cuModuleLoadDataEx"); n != 2 {
		t.Errorf("cuModuleLoadDataEx called %d times after the load, want 2", n)
	}

	// A refused image is kept: no second load, the error named for the
	// second caller.
	m = fakeImpl(t)
	fake.mu.Lock()
	fake.device = 1
	fake.rc["cuModuleLoadDataEx"] = fakeInvalidPTX
	fake.mu.Unlock()
	for _, op := range []string{"Tanh", "Sleep"} {
		_, err := m.kernelsOn(op, &m.devices[1])
		var e *runtime.Error
		if !errors.As(err, &e) || e.Op != op || e.Status != runtime.StatusInternal {
			t.Errorf("%s with invalid PTX: %v", op, err)
		}
	}
	if n := fakeCalls("cuModuleLoadDataEx"); n != 1 {
		t.Errorf("cuModuleLoadDataEx called %d times for invalid PTX, want 1", n)
	}
}

// cuInit failing for want of memory, or a busy device, is tried again at
// the next use of the driver; a machine without a device is not.
func TestDriverInitRetriedAfterTransientFailure(t *testing.T) {
	for _, c := range []struct {
		rc        int32
		wantInits int
	}{{fakeOutOfMemory, 2}, {fakeBusy, 2}, {fakeNoDevice, 1}} {
		m := fakeImpl(t)
		var l lazyLoad[driver]
		load := func() (*driver, bool, error) { return m.initDriver("DeviceName", fakeDrv) }
		fake.mu.Lock()
		fake.rc["cuInit"] = c.rc
		fake.mu.Unlock()
		if d, err := l.get(load); d != nil || err == nil {
			t.Errorf("cuInit failing with %d: %p, %v", c.rc, d, err)
		}
		fake.mu.Lock()
		delete(fake.rc, "cuInit")
		fake.mu.Unlock()
		d, err := l.get(load)
		if wantOK := c.wantInits == 2; wantOK != (err == nil && d == fakeDrv) {
			t.Errorf("after cuInit failed with %d, the next use: %p, %v (loaded wanted: %v)", c.rc, d, err, wantOK)
		}
		l.get(load)
		if n := fakeCalls("cuInit"); n != c.wantInits {
			t.Errorf("after cuInit failed with %d: %d calls of cuInit, want %d", c.rc, n, c.wantInits)
		}
	}
	// A loaded driver costs nothing to get.
	m := fakeImpl(t)
	var d *driver
	if n := testing.AllocsPerRun(100, func() { d = m.loadDriver("enter") }); n != 0 || d != fakeDrv {
		t.Errorf("loadDriver once loaded: %v allocations, %p", n, d)
	}
}

// StreamDestroy destroys the stream's cuBLAS handle even where the
// stream's device cannot be made current, and reports that failure.
func TestStreamDestroyDestroysBlasHandleWhenDeviceSwitchFails(t *testing.T) {
	for _, fail := range []string{"cudaGetDevice", "cudaSetDevice", ""} {
		t.Run("fail="+fail, func(t *testing.T) {
			m := fakeImpl(t)
			fake.mu.Lock()
			fake.device = 0
			if fail != "" {
				fake.rc[fail] = fakeBusy
			}
			fake.mu.Unlock()
			s := &stream{owner: m, h: 0x5000, dev: 1, blas: 0xb1a5}
			err := m.StreamDestroy(s)
			if fail != "" && !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("StreamDestroy: %v, want the Unavailable of %s", err, fail)
			}
			if fail == "" && err != nil {
				t.Errorf("StreamDestroy: %v", err)
			}
			if n, a := fakeCalls("cublasDestroy_v2"), fakeArgs("cublasDestroy_v2"); n != 1 || a[0] != 0xb1a5 {
				t.Errorf("cublasDestroy_v2 called %d times, last with %#x; want once with 0xb1a5", n, a)
			}
			if n, a := fakeCalls("cudaStreamDestroy"), fakeArgs("cudaStreamDestroy"); n != 1 || a[0] != 0x5000 {
				t.Errorf("cudaStreamDestroy called %d times, last with %#x; want once with 0x5000", n, a)
			}
			if s.blas != 0 {
				t.Errorf("stream keeps handle %#x", s.blas)
			}
		})
	}
}

// Init passes over a runtime that needs a newer driver than the machine
// has for the next candidate, and keeps the first that works; it does not
// pass over other failures.
func TestInitFallsBackFromRuntimeNeedingNewerDriver(t *testing.T) {
	t.Setenv(EnvCudartLib, "")
	// Two libraries that load here stand for libcudart.so.13 and .12;
	// what binds them gives the fake runtimes 0 (CUDA 13.0) and 1 (12.4).
	const lib13, lib12 = "libc.so.6", "libm.so.6"
	newImpl := func(cands ...string) *Impl {
		fakeOnce.Do(makeFakes)
		resetFake()
		fake.mu.Lock()
		fake.runtimeVersion[0], fake.runtimeVersion[1] = 13000, 12040
		fake.deviceCount[0], fake.deviceCount[1] = 2, 2
		fake.mu.Unlock()
		m := New(WithLazyLoading(true))
		m.cfg.cudartDefaults = cands
		m.cfg.bindRuntime = func(lib *dl.Library) (*cudart, error) {
			rt := *fakeRuntimes[1]
			if lib.Path == lib13 {
				rt = *fakeRuntimes[0]
			}
			rt.lib = lib
			return &rt, nil
		}
		return m
	}
	setRC := func(name string, rc int32) {
		fake.mu.Lock()
		fake.rc[name] = rc
		fake.mu.Unlock()
	}

	m := newImpl(lib13, "/nonexistent/libcudart.so.12", lib12)
	setRC("cudaGetDeviceCount0", fakeDriverTooOld)
	if err := m.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if rv, dv := m.RuntimeVersion(); m.LibraryPath() != lib12 || rv != 12040 || dv != 12040 {
		t.Errorf("loaded %s, runtime %d, driver %d; want %s, 12040, 12040", m.LibraryPath(), rv, dv, lib12)
	}
	if n, err := m.DeviceCount(); n != 2 || err != nil {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}

	// Only runtimes too new: the error is the last one's, naming all.
	m = newImpl(lib13, lib12)
	setRC("cudaGetDeviceCount0", fakeDriverTooOld)
	setRC("cudaGetDeviceCount1", fakeDriverTooOld)
	err := m.Init()
	if !errors.Is(err, runtime.StatusUnavailable) || !strings.Contains(err.Error(), lib13) || !strings.Contains(err.Error(), lib12) {
		t.Errorf("Init with runtimes too new: %v, want Unavailable naming %s and %s", err, lib13, lib12)
	}

	// Another failure is the result: no GPU is no GPU for any runtime.
	m = newImpl(lib13, lib12)
	setRC("cudaGetDeviceCount0", fakeNoDeviceCount)
	if err := m.Init(); !errors.Is(err, runtime.StatusUnavailable) || !strings.Contains(err.Error(), lib13) {
		t.Errorf("Init without a GPU: %v, want Unavailable from %s", err, lib13)
	}
	if n := fakeCalls("cudaGetDeviceCount1"); n != 0 {
		t.Errorf("the second runtime was asked after a failure other than the driver's age (%d calls)", n)
	}

	// The first runtime that works is kept without trying others.
	m = newImpl(lib13, lib12)
	if err := m.Init(); err != nil || m.LibraryPath() != lib13 {
		t.Errorf("Init: %v, loaded %q; want %s", err, m.LibraryPath(), lib13)
	}
}
