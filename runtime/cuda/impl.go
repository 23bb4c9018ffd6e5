package cuda

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// Compile-time checks that Impl is a complete backend with the optional
// capabilities.
var (
	_ runtime.Impl            = (*Impl)(nil)
	_ runtime.Elementwise     = (*Impl)(nil)
	_ runtime.DeviceDescriber = (*Impl)(nil)
	_ runtime.MemoryDescriber = (*Impl)(nil)
	_ runtime.MathModes       = (*Impl)(nil)
)

// Impl is the CUDA backend. Make one with New; the package registers one
// for runtime.CUDA from init. Nothing is loaded until Init.
//
// Handles (streams, events, allocations) are valid only with the Impl that
// made them.
type Impl struct {
	cfg config

	once    sync.Once
	loaded  atomic.Bool
	initErr error

	rt             *cudart
	runtimeVersion int    // e.g. 13000 for CUDA 13.0
	moduleLoading  string // CUDA_MODULE_LOADING as CUDA reads it ("" for CUDA's default)
	connections    string // CUDA_DEVICE_MAX_CONNECTIONS as CUDA reads it ("" for CUDA's default)
	driverVersion  int
	devices        []device

	blasOnce    sync.Once
	blas        *cublas
	blasLoadErr error

	drv lazyLoad[driver]

	// live holds the streams not destroyed, and wtrace the work trace
	// running (StartWorkTrace), which learns each one's CUPTI id.
	live   sync.Map // *stream → struct{}
	wtrace atomic.Pointer[workTrace]
}

// device is the backend's state for one GPU.
type device struct {
	index       int
	inUse, peak atomic.Int64
	total, free atomic.Int64 // from cudaMemGetInfo at the last allocation change
	kern        lazyLoad[kernels]
}

// New returns a CUDA backend configured by opts; it loads nothing.
func New(opts ...Option) *Impl { return &Impl{cfg: newConfig(opts)} }

// Type returns runtime.CUDA.
func (*Impl) Type() runtime.DeviceType { return runtime.CUDA }

// Init opens libcudart, checks its version and counts the GPUs, once; the
// result, success or failure, is kept. It is cheap after the first call.
// Of the default candidates, one that needs a newer driver than the
// machine has (cudaErrorInsufficientDriver) is passed over for the next.
func (m *Impl) Init() error {
	if m.loaded.Load() {
		return nil
	}
	m.once.Do(func() {
		m.initErr = m.load()
		if m.initErr == nil {
			m.loaded.Store(true)
		}
	})
	return m.initErr
}

func (m *Impl) load() error {
	const op = "Init"
	m.moduleLoading = moduleLoading(m.cfg.lazy)
	m.connections = deviceConnections(m.cfg.connections)
	// A runtime newer than the driver loads, and says so only when it
	// first talks to the driver (cudaGetDeviceCount): libcudart.so.13
	// under a CUDA 12 driver answers cudaErrorInsufficientDriver, where
	// libcudart.so.12 would work. Such a runtime is passed over for the
	// next candidate; an explicit path is the only candidate.
	_, tried, err := dl.OpenWith(candidates(m.cfg.cudart, EnvCudartLib, m.cfg.cudartDefaults...),
		func(lib *dl.Library) error {
			err := m.loadFrom(op, lib)
			if e, ok := err.(*driverTooOld); ok {
				return dl.Skip(e.err)
			}
			return err
		})
	if errors.Is(err, dl.ErrNotFound) {
		return &runtime.Error{Op: op, Status: runtime.StatusUnavailable, Detail: "CUDA runtime library (libcudart) not found", Err: err}
	}
	if err != nil {
		if e, ok := err.(*runtime.Error); ok && len(tried) > 1 {
			c := *e
			c.Detail += "; tried " + strings.Join(tried, "; ")
			return &c
		}
		return err
	}
	return nil
}

// driverTooOld is loadFrom's error for a runtime that needs a newer
// driver than the machine has: load tries the next candidate.
type driverTooOld struct{ err error }

func (e *driverTooOld) Error() string { return e.err.Error() }

// loadFrom binds the runtime in lib, checks its version and counts the
// GPUs.
func (m *Impl) loadFrom(op string, lib *dl.Library) error {
	bind := bindCudart
	if m.cfg.bindRuntime != nil {
		bind = m.cfg.bindRuntime
	}
	rt, err := bind(lib)
	if err != nil {
		return &runtime.Error{Op: op, Status: runtime.StatusNotSupported, Detail: "CUDA runtime library unusable", Err: err}
	}
	m.rt = rt
	m.runtimeVersion, m.driverVersion = 0, 0
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(rt.runtimeGetVersion, f.OutPtr(0))); rc != 0 {
		return m.cudaErr(op, rc)
	}
	m.runtimeVersion = int(int32(f.Out[0]))
	if m.runtimeVersion < m.cfg.minVersion {
		return runtime.Errorf(op, runtime.StatusNotSupported, "%s is CUDA runtime %s; trainscope needs %s or newer",
			lib.Path, versionString(m.runtimeVersion), versionString(m.cfg.minVersion))
	}
	if int32(f.Call(rt.driverGetVersion, f.OutPtr(1))) == 0 {
		m.driverVersion = int(int32(f.Out[1]))
	}
	if rc := int32(f.Call(rt.getDeviceCount, f.OutPtr(2))); rc != 0 {
		cerr := m.cudaErr(op, rc)
		err := &runtime.Error{Op: op, Status: runtime.StatusOf(cerr),
			Detail: fmt.Sprintf("no usable GPU (runtime %s from %s, driver %s)", versionString(m.runtimeVersion), lib.Path, versionString(m.driverVersion)),
			Err:    cerr}
		if rc == cudaErrorInsufficientDriver {
			return &driverTooOld{err}
		}
		return err
	}
	n := int(int32(f.Out[2]))
	if n < 1 {
		return runtime.Errorf(op, runtime.StatusUnavailable, "cudaGetDeviceCount found no GPU (runtime %s from %s)", versionString(m.runtimeVersion), lib.Path)
	}
	m.devices = make([]device, n)
	for i := range m.devices {
		m.devices[i].index = i
	}
	return nil
}

// moduleLoading sets CUDA_MODULE_LOADING=EAGER unless lazy is asked for
// or the variable is set already, and returns the value in effect. Under
// purego, as under cgo, os.Setenv reaches the C library's environment,
// which is where CUDA reads it when it initialises.
func moduleLoading(lazy bool) string {
	if v, set := os.LookupEnv(EnvModuleLoading); set || lazy {
		return v
	}
	if os.Setenv(EnvModuleLoading, "EAGER") != nil {
		return ""
	}
	return "EAGER"
}

// deviceConnections sets CUDA_DEVICE_MAX_CONNECTIONS to n unless n ≤ 0
// or the variable is set already, and returns the value in effect.
func deviceConnections(n int) string {
	if v, set := os.LookupEnv(EnvDeviceMaxConnections); set || n <= 0 {
		return v
	}
	v := strconv.Itoa(n)
	if os.Setenv(EnvDeviceMaxConnections, v) != nil {
		return ""
	}
	return v
}

// DeviceConnections returns CUDA_DEVICE_MAX_CONNECTIONS as it was when
// Init ran ("" when unset: CUDA's default, 8). See WithDeviceConnections.
func (m *Impl) DeviceConnections() string { return m.connections }

// ModuleLoading returns CUDA_MODULE_LOADING as it was when Init ran
// ("" when unset: CUDA's default, lazy loading). See WithLazyLoading.
func (m *Impl) ModuleLoading() string { return m.moduleLoading }

// versionString writes a CUDA version number (12040) as "12.4"; 0 as
// "none".
func versionString(v int) string {
	if v <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// RuntimeVersion returns the CUDA runtime and driver versions (e.g. 13000,
// 13000), once Init has succeeded.
func (m *Impl) RuntimeVersion() (runtimeVersion, driverVersion int) {
	return m.runtimeVersion, m.driverVersion
}

// LibraryPath returns the path libcudart was loaded from, or "".
func (m *Impl) LibraryPath() string {
	if !m.loaded.Load() {
		return ""
	}
	return m.rt.lib.Path
}

// ready loads the backend if needed: methods called before Init load it
// rather than crash.
func (m *Impl) ready(op string) error {
	if m.loaded.Load() {
		return nil
	}
	if err := m.Init(); err != nil {
		return err
	}
	return nil
}

// device returns the state of GPU index.
func (m *Impl) device(op string, index int) (*device, error) {
	if err := m.ready(op); err != nil {
		return nil, err
	}
	if index < 0 || index >= len(m.devices) {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument,
			"cudaErrorInvalidDevice: invalid device ordinal %d (%d CUDA devices present)", index, len(m.devices))
	}
	return &m.devices[index], nil
}

// DeviceCount returns the number of GPUs, as counted at Init.
func (m *Impl) DeviceCount() (int, error) {
	if err := m.ready("DeviceCount"); err != nil {
		return 0, err
	}
	return len(m.devices), nil
}

// SetDevice makes index the current device of the calling OS thread; it
// means something only to a goroutine locked to its thread.
func (m *Impl) SetDevice(index int) error {
	if err := m.ready("SetDevice"); err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.setDevice, uintptr(index))); rc != 0 {
		return m.cudaErr("SetDevice", rc)
	}
	return nil
}

// OnDevice runs fn on the calling goroutine locked to its OS thread with
// GPU index current, then gives the thread its previous device back — or
// no context, where it had none, rather than a new one on GPU 0 — and
// unlocks it. It is for libraries that act on the thread's current
// device: NCCL creates a communicator on it, and its finalize, destroy
// and abort set the communicator's device and then the one they found,
// which on a thread without a context is GPU 0, making a context there.
func (m *Impl) OnDevice(index int, fn func()) error {
	const op = "OnDevice"
	if err := m.ready(op); err != nil {
		return err
	}
	s, err := m.enter(op, index)
	if err != nil {
		return err
	}
	defer s.exit()
	fn()
	return nil
}

// GetDevice returns the calling OS thread's current device.
func (m *Impl) GetDevice() (int, error) {
	if err := m.ready("GetDevice"); err != nil {
		return 0, err
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.getDevice, f.OutPtr(0))); rc != 0 {
		return 0, m.cudaErr("GetDevice", rc)
	}
	return int(int32(f.Out[0])), nil
}

// DeviceSynchronize waits for all work on GPU index.
func (m *Impl) DeviceSynchronize(index int) error {
	const op = "DeviceSynchronize"
	if _, err := m.device(op, index); err != nil {
		return err
	}
	sc, err := m.enter(op, index)
	if err != nil {
		return err
	}
	defer sc.exit()
	if rc := int32(dl.Call(m.rt.deviceSynchronize)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// scope is a stretch of a call during which a device is current on a
// locked OS thread; exit restores the previous device and unlocks.
type scope struct {
	m       *Impl
	drv     *driver // set where noCtx
	prev    int32
	changed bool
	noCtx   bool // the thread had no current context: exit leaves it none
}

// enter locks the calling goroutine to its OS thread and makes dev the
// thread's current device, remembering the previous one. It allocates
// nothing, so hot paths may use it.
func (m *Impl) enter(op string, dev int) (scope, error) {
	goruntime.LockOSThread()
	f := dl.Get()
	rc := int32(f.Call(m.rt.getDevice, f.OutPtr(0)))
	prev := int32(f.Out[0])
	f.Put()
	if rc != 0 {
		goruntime.UnlockOSThread()
		return scope{}, m.cudaErr(op, rc)
	}
	if int(prev) == dev {
		return scope{m: m, prev: prev}, nil
	}
	// A thread with no context reports device 0; setting 0 back on exit
	// would make a context on GPU 0 in a process that uses another one
	// (CUDA 12 initialises the primary context at cudaSetDevice). Such a
	// thread gets no context back instead.
	noCtx := false
	drv := m.loadDriver(op)
	if drv != nil {
		g := dl.Get()
		if int32(g.Call(drv.ctxGetCurrent, g.OutPtr(0))) == 0 && g.Out[0] == 0 {
			noCtx = true
		}
		g.Put()
	}
	if rc := int32(dl.Call(m.rt.setDevice, uintptr(dev))); rc != 0 {
		goruntime.UnlockOSThread()
		return scope{}, m.cudaErr(op, rc)
	}
	return scope{m: m, drv: drv, prev: prev, changed: true, noCtx: noCtx}, nil
}

func (s scope) exit() {
	switch {
	case s.noCtx:
		dl.Call(s.drv.ctxSetCurrent, 0)
	case s.changed:
		dl.Call(s.m.rt.setDevice, uintptr(s.prev))
	}
	goruntime.UnlockOSThread()
}

// cublasAPI loads libcublas on first use.
func (m *Impl) cublasAPI(op string) (*cublas, error) {
	m.blasOnce.Do(func() {
		major := m.runtimeVersion / 1000
		lib, _, err := dl.Open(candidates(m.cfg.cublas, EnvCublasLib,
			fmt.Sprintf("libcublas.so.%d", major), "libcublas.so.13", "libcublas.so.12",
			"/usr/local/cuda/lib64/libcublas.so*"))
		if err != nil {
			m.blasLoadErr = &runtime.Error{Op: op, Status: runtime.StatusUnavailable, Detail: "cuBLAS library (libcublas) not found", Err: err}
			return
		}
		b, err := bindCublas(lib)
		if err != nil {
			m.blasLoadErr = &runtime.Error{Op: op, Status: runtime.StatusNotSupported, Detail: "cuBLAS library unusable", Err: err}
			return
		}
		m.blas = b
	})
	if m.blasLoadErr != nil {
		return nil, forOp(op, m.blasLoadErr)
	}
	return m.blas, nil
}

// driverAPI loads the CUDA driver library on first use. Its failure is
// kept, except where cuInit's may not recur (retryable).
func (m *Impl) driverAPI(op string) (*driver, error) {
	if d := m.drv.loaded(); d != nil {
		return d, nil
	}
	d, err := m.drv.get(func() (*driver, bool, error) { return m.openDriver(op) })
	if err != nil {
		return nil, forOp(op, err)
	}
	return d, nil
}

// loadDriver is driverAPI for callers that can do without the driver: it
// returns nil where the library did not load, and allocates nothing once
// it has loaded or failed for good.
func (m *Impl) loadDriver(op string) *driver {
	if d := m.drv.loaded(); d != nil {
		return d
	}
	d, _ := m.drv.get(func() (*driver, bool, error) { return m.openDriver(op) })
	return d
}

// openDriver opens, binds and initialises libcuda, and says whether its
// failure is to be kept.
func (m *Impl) openDriver(op string) (*driver, bool, error) {
	lib, _, err := dl.Open(candidates(m.cfg.driver, EnvDriverLib, "libcuda.so.1", "libcuda.so"))
	if err != nil {
		return nil, true, &runtime.Error{Op: op, Status: runtime.StatusUnavailable, Detail: "CUDA driver library (libcuda) not found", Err: err}
	}
	d, err := bindDriver(lib)
	if err != nil {
		return nil, true, &runtime.Error{Op: op, Status: runtime.StatusNotSupported, Detail: "CUDA driver library unusable", Err: err}
	}
	return m.initDriver(op, d)
}

// initDriver calls cuInit through d.
func (m *Impl) initDriver(op string, d *driver) (*driver, bool, error) {
	if rc := int32(dl.Call(d.init, 0)); rc != 0 {
		return nil, !retryable(rc), driverErrOf(d, op, rc)
	}
	return d, true, nil
}

// DeviceName returns the GPU's product name, e.g. "NVIDIA H200".
func (m *Impl) DeviceName(index int) (string, error) {
	const op = "DeviceName"
	if _, err := m.device(op, index); err != nil {
		return "", err
	}
	d, err := m.driverAPI(op)
	if err != nil {
		return "", err
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(d.deviceGet, f.OutPtr(0), uintptr(index))); rc != 0 {
		return "", m.driverErr(op, rc)
	}
	if rc := int32(f.Call(d.deviceGetName, f.BufPtr(), uintptr(len(f.Buf)-1), uintptr(int32(f.Out[0])))); rc != 0 {
		return "", m.driverErr(op, rc)
	}
	return f.BufString(), nil
}

// DeviceUUID returns the GPU's UUID as nvidia-smi prints it,
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func (m *Impl) DeviceUUID(index int) (string, error) {
	const op = "DeviceUUID"
	if _, err := m.device(op, index); err != nil {
		return "", err
	}
	d, err := m.driverAPI(op)
	if err != nil {
		return "", err
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(d.deviceGet, f.OutPtr(0), uintptr(index))); rc != 0 {
		return "", m.driverErr(op, rc)
	}
	if rc := int32(f.Call(d.deviceGetUUID, f.OutPtr(1), uintptr(int32(f.Out[0])))); rc != 0 {
		return "", m.driverErr(op, rc)
	}
	var u [16]byte
	for i := range 8 {
		u[i] = byte(f.Out[1] >> (8 * i))
		u[8+i] = byte(f.Out[2] >> (8 * i))
	}
	return formatUUID(u), nil
}

// DeviceTotalMemory returns the GPU's memory in bytes through the driver
// (cuDeviceTotalMem), which, unlike DeviceMemory (cudaMemGetInfo), makes
// no context on the device: a description of the machine costs a busy
// GPU no memory, and works on one another process holds exclusively.
func (m *Impl) DeviceTotalMemory(index int) (int64, error) {
	const op = "DeviceTotalMemory"
	if _, err := m.device(op, index); err != nil {
		return 0, err
	}
	d, err := m.driverAPI(op)
	if err != nil {
		return 0, err
	}
	if d.deviceTotalMem == 0 {
		return 0, runtime.Errorf(op, runtime.StatusNotSupported, "%s has no cuDeviceTotalMem_v2", d.lib.Path)
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(d.deviceGet, f.OutPtr(0), uintptr(index))); rc != 0 {
		return 0, m.driverErr(op, rc)
	}
	if rc := int32(f.Call(d.deviceTotalMem, f.OutPtr(1), uintptr(int32(f.Out[0])))); rc != 0 {
		return 0, m.driverErr(op, rc)
	}
	return int64(f.Out[1]), nil
}

// PrimaryContextActive reports whether GPU index has its primary context
// (cuDevicePrimaryCtxGetState). A context costs hundreds of MiB of the
// GPU's memory: a process that uses only other GPUs, or only describes
// them, should make none. Asking makes none.
func (m *Impl) PrimaryContextActive(index int) (bool, error) {
	const op = "PrimaryContextActive"
	if _, err := m.device(op, index); err != nil {
		return false, err
	}
	d, err := m.driverAPI(op)
	if err != nil {
		return false, err
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(d.deviceGet, f.OutPtr(0), uintptr(index))); rc != 0 {
		return false, m.driverErr(op, rc)
	}
	f.Out[1], f.Out[2] = 0, 0
	if rc := int32(f.Call(d.primaryCtxGetState, uintptr(int32(f.Out[0])), f.OutPtr(1), f.OutPtr(2))); rc != 0 {
		return false, m.driverErr(op, rc)
	}
	return int32(f.Out[2]) != 0, nil
}

// formatUUID writes 16 bytes the way nvidia-smi does.
func formatUUID(u [16]byte) string {
	h := fmt.Sprintf("%x", u[:])
	return "GPU-" + strings.Join([]string{h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]}, "-")
}

func init() {
	runtime.MustRegister(runtime.CUDA, New())
}
