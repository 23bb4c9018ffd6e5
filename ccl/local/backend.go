package local

import (
	"crypto/rand"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// Compile-time check that Backend is a complete ccl backend.
var _ ccl.Impl = (*Backend)(nil)

// DefaultTimeout bounds every wait of a Backend made without WithTimeout.
const DefaultTimeout = 60 * time.Second

// MaxRanks is the most ranks a communicator of the backend may have. Its
// ranks are goroutines of one process, each with its own stream and
// buffers, and a collective gathers every rank's part; far beyond a few
// thousand ranks a process runs out of memory or time before a step ends.
// CommInitAll and CommInitRank refuse a larger size with an error wrapping
// StatusInvalidArgument, before allocating anything for it.
const MaxRanks = 4096

// checkRanks refuses a communicator size above MaxRanks.
func checkRanks(op string, n int) error {
	if n > MaxRanks {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "communicator of %d ranks: the in-process backend allows at most %d (local.MaxRanks)", n, MaxRanks)
	}
	return nil
}

// Backend is the in-process ccl backend. Make one with New; the package
// registers one for runtime.CPU from init.
type Backend struct {
	cfg    config
	groups groups // open GroupStart regions, per goroutine
	typ    runtime.DeviceType
	// shared: data moves through the runtime's own operations (see
	// NewShared), not through host memory on the streams' goroutines.
	shared bool
}

// Option configures New. Options are sealed: only this package makes them.
type Option interface{ apply(*config) }

type config struct {
	timeout time.Duration
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTimeout bounds each wait of an operation: for the other ranks to
// reach a collective, for a message to a Recv, for the other ranks to join
// CommInitRank. Values of 0 or less keep DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// New returns a backend configured by opts.
func New(opts ...Option) *Backend {
	c := config{timeout: DefaultTimeout}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return &Backend{cfg: c, groups: groups{m: make(map[uint64]*openGroup)}, typ: runtime.CPU}
}

// NewShared returns a backend for ranks of one process on devices of type
// t, several ranks to a device where there are fewer devices than ranks
// (see the package documentation, "Shared devices"). It moves data only
// through t's runtime operations — copies between buffers, and the
// Elementwise Axpy and Scale for reductions — ordered by events, so it
// works with any backend's buffers: on CUDA the data never leaves the
// devices. NewShared(runtime.CPU) runs the same code on cpu devices.
func NewShared(t runtime.DeviceType, opts ...Option) *Backend {
	b := New(opts...)
	b.typ, b.shared = t, true
	return b
}

// Timeout returns the bound on each wait.
func (b *Backend) Timeout() time.Duration { return b.cfg.timeout }

// Type returns the device type the backend serves: runtime.CPU, or
// NewShared's type.
func (b *Backend) Type() runtime.DeviceType { return b.typ }

// Shared reports whether the backend was made by NewShared.
func (b *Backend) Shared() bool { return b.shared }

// Init does nothing: the backend needs no library.
func (*Backend) Init() error { return nil }

// GetAsyncError returns the communicator's failure, or nil while it is
// healthy. It keeps answering after CommDestroy.
func (b *Backend) GetAsyncError(c ccl.Comm) error {
	lc, err := asComm("GetAsyncError", c)
	if err != nil {
		return err
	}
	return lc.w.failure()
}

// uniqueID is 16 random bytes naming a communicator being formed.
type uniqueID [idSize]byte

const idSize = 16

func (u *uniqueID) Data() []byte { return append([]byte(nil), u[:]...) }
func (u *uniqueID) Size() int    { return idSize }
func (u *uniqueID) Load(b []byte) error {
	if len(b) != idSize {
		return ccl.Errorf("UniqueIDLoad", ccl.StatusInvalidArgument, "local unique id is %d bytes, got %d", idSize, len(b))
	}
	copy(u[:], b)
	return nil
}

// GetUniqueID returns a new random id for CommInitRank.
func (*Backend) GetUniqueID() (ccl.UniqueID, error) {
	u := new(uniqueID)
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails
	return u, nil
}

// NewUniqueID returns a zero id to Load into.
func (*Backend) NewUniqueID() ccl.UniqueID { return new(uniqueID) }

func init() {
	ccl.MustRegister(runtime.CPU, New())
}
