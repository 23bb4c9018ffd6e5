package nccl

import (
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// Compile-time check that Backend is a complete ccl backend.
var (
	_ ccl.Impl                 = (*Backend)(nil)
	_ runtime.LibraryDescriber = (*Backend)(nil)
)

// Environment variables: EnvLibrary overrides the search for libnccl;
// EnvBlocking=1 makes backends created without an explicit
// WithBlockingOps choose blocking communicators.
const (
	EnvLibrary  = "TRAINSCOPE_NCCL_LIB"
	EnvBlocking = "TRAINSCOPE_NCCL_BLOCKING"
)

// DefaultTimeout bounds each wait of a Backend made without WithTimeout:
// for the ranks of a new communicator to join, for an operation NCCL
// reports in progress, for a communicator to finish its work at
// CommDestroy.
const DefaultTimeout = 60 * time.Second

// minVersion is the oldest NCCL accepted: 2.14 brought non-blocking
// communicators and ncclCommFinalize (ncclAvg dates from 2.10).
const minVersion = 21400

// Backend is the NCCL backend. Make one with New; the package registers
// one for runtime.CUDA from init. Nothing is loaded until Init.
type Backend struct {
	cfg config

	once    sync.Once
	loaded  atomic.Bool
	initErr error

	api     *api
	version int
	rt      runtime.Impl // the CUDA runtime backend, for the current device

	groups groups
}

// Option configures New. Options are sealed: only this package makes them.
type Option interface{ apply(*config) }

type config struct {
	lib         string
	timeout     time.Duration
	rt          runtime.Impl
	minVersion  int
	blocking    bool
	blockingSet bool
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithLibrary loads libnccl from path and nowhere else.
func WithLibrary(path string) Option { return optionFunc(func(c *config) { c.lib = path }) }

// WithTimeout bounds each wait (see DefaultTimeout); values of 0 or less
// keep the default.
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.timeout = d }) }

// WithRuntime sets the CUDA runtime backend whose devices the
// communicators use (default: the one registered for runtime.CUDA).
func WithRuntime(rt runtime.Impl) Option { return optionFunc(func(c *config) { c.rt = rt }) }

// WithBlockingOps chooses blocking communicators (ncclConfig_t.blocking
// = 1) when on. NCCL then launches each operation on the calling thread,
// which is several times cheaper for small operations than the
// non-blocking default, where every group end runs on a thread NCCL starts
// for it. The price: a call that needs a peer to act (creation, the
// first operation between two ranks, which connects them) blocks its
// thread until the peer does. Creation still returns at the timeout
// (leaving the stuck thread behind), and CommAbort frees a communicator
// even while a call on it is blocked, as PyTorch's watchdog does; but
// non-blocking (the default) is the mode in which nothing ever waits
// without a deadline.
func WithBlockingOps(on bool) Option {
	return optionFunc(func(c *config) { c.blocking, c.blockingSet = on, true })
}

// New returns a backend configured by opts; it loads nothing.
func New(opts ...Option) *Backend {
	c := config{timeout: DefaultTimeout, minVersion: minVersion}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if !c.blockingSet {
		c.blocking = os.Getenv(EnvBlocking) == "1"
	}
	return &Backend{cfg: c, groups: groups{m: make(map[uint64]*openGroup)}}
}

// Type returns runtime.CUDA.
func (*Backend) Type() runtime.DeviceType { return runtime.CUDA }

// Timeout returns the bound on each wait.
func (b *Backend) Timeout() time.Duration { return b.cfg.timeout }

// Init loads libnccl and the CUDA runtime, once; the result is kept.
func (b *Backend) Init() error {
	if b.loaded.Load() {
		return nil
	}
	b.once.Do(func() {
		b.initErr = b.load()
		if b.initErr == nil {
			b.loaded.Store(true)
		}
	})
	return b.initErr
}

func (b *Backend) load() error {
	const op = "Init"
	cands := []string{"libnccl.so.2", "libnccl.so"}
	if b.cfg.lib != "" {
		cands = []string{b.cfg.lib}
	} else if p := os.Getenv(EnvLibrary); p != "" {
		cands = []string{p}
	}
	lib, _, err := dl.Open(cands)
	if err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusUnavailable, Detail: "NCCL library (libnccl) not found", Err: err}
	}
	a, err := bind(lib)
	if err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusNotSupported, Detail: "NCCL library unusable", Err: err}
	}
	b.api = a
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(a.getVersion, f.OutPtr(0))); rc != 0 {
		return b.ncclErr(op, rc, 0, lib.Path)
	}
	b.version = int(int32(f.Out[0]))
	if b.version < b.cfg.minVersion {
		return ccl.Errorf(op, ccl.StatusNotSupported, "%s is NCCL %s; trainscope needs %s or newer", lib.Path, VersionString(b.version), VersionString(b.cfg.minVersion))
	}
	// The library is checked first, so that its problems are reported
	// on machines without a GPU too; then the CUDA runtime it runs on.
	rt := b.cfg.rt
	if rt == nil {
		var err error
		if rt, err = runtime.Lookup(runtime.CUDA); err != nil {
			return &ccl.Error{Op: op, Status: ccl.StatusUnavailable, Detail: "NCCL needs the CUDA runtime backend (import runtime/cuda)", Err: err}
		}
	}
	if err := rt.Init(); err != nil {
		return &ccl.Error{Op: op, Status: cclStatusOfRuntime(err), Detail: "NCCL " + VersionString(b.version) + " found, but the CUDA runtime is not usable", Err: err}
	}
	b.rt = rt
	return nil
}

// cclStatusOfRuntime carries a runtime failure's meaning over: a missing
// GPU stays "unavailable".
func cclStatusOfRuntime(err error) ccl.Status {
	switch runtime.StatusOf(err) {
	case runtime.StatusUnavailable:
		return ccl.StatusUnavailable
	case runtime.StatusNotSupported:
		return ccl.StatusNotSupported
	}
	return ccl.StatusError
}

// VersionString writes NCCL_VERSION_CODE (22803) as "2.28.3".
func VersionString(v int) string {
	if v < 10000 { // before 2.9: X*1000 + Y*100 + Z
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// Libraries names libnccl, its version and the file the process mapped
// (PyTorch's copy or the system's) once Init has succeeded
// (runtime.LibraryDescriber); nothing before.
func (b *Backend) Libraries() []runtime.Library {
	if !b.loaded.Load() {
		return nil
	}
	return []runtime.Library{{Name: "NCCL", Version: VersionString(b.version), Path: b.api.lib.File("ncclGetVersion")}}
}

// Blocking reports whether the backend makes blocking communicators.
func (b *Backend) Blocking() bool { return b.cfg.blocking }

// Version returns NCCL's version code (e.g. 22803), once Init succeeded.
func (b *Backend) Version() int { return b.version }

// LibraryPath returns the path libnccl was loaded from, or "".
func (b *Backend) LibraryPath() string {
	if !b.loaded.Load() {
		return ""
	}
	return b.api.lib.Path
}

func (b *Backend) ready(op string) error {
	if b.loaded.Load() {
		return nil
	}
	return b.Init()
}

// uniqueID is ncclUniqueId.
type uniqueID struct{ internal [idSize]byte }

const idSize = 128

func (u *uniqueID) Data() []byte { return append([]byte(nil), u.internal[:]...) }
func (u *uniqueID) Size() int    { return idSize }
func (u *uniqueID) Load(b []byte) error {
	if len(b) != idSize {
		return ccl.Errorf("UniqueIDLoad", ccl.StatusInvalidArgument, "NCCL unique id is %d bytes, got %d", idSize, len(b))
	}
	copy(u.internal[:], b)
	return nil
}

// GetUniqueID asks NCCL for a new id (which starts its bootstrap root on
// this process).
func (b *Backend) GetUniqueID() (ccl.UniqueID, error) {
	const op = "GetUniqueID"
	if err := b.ready(op); err != nil {
		return nil, err
	}
	u := new(uniqueID)
	rc := int32(dl.Call(b.api.getUniqueID, uintptr(unsafe.Pointer(&u.internal[0]))))
	goruntime.KeepAlive(u)
	if rc != 0 {
		return nil, b.ncclErr(op, rc, 0, "")
	}
	return u, nil
}

// NewUniqueID returns a zero id to Load into.
func (*Backend) NewUniqueID() ccl.UniqueID { return new(uniqueID) }

func init() {
	ccl.MustRegister(runtime.CUDA, New())
}
