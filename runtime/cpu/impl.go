package cpu

import (
	"sync"
	"sync/atomic"

	"github.com/trainscope/trainscope/runtime"
)

// Compile-time checks that Impl is a complete backend.
var (
	_ runtime.Impl            = (*Impl)(nil)
	_ runtime.Elementwise     = (*Impl)(nil)
	_ runtime.MemoryDescriber = (*Impl)(nil)
	_ runtime.MathModes       = (*Impl)(nil)
)

// Impl is the host backend. Make one with New; the package registers one in
// the process-wide registry from init. Handles (streams, events,
// allocations) are valid only with the Impl that made them; a handle of
// another backend or instance is refused with StatusInvalidArgument.
//
// The current device (SetDevice, GetDevice) is one atomic index shared by
// every goroutine using the Impl, not one per thread as in CUDA;
// trainscope's APIs pass devices explicitly and do not rely on it.
//
// Memory operations given a nil stream run at once on the calling
// goroutine; given a stream, they run when the stream reaches them.
type Impl struct {
	cfg     config
	devices []device
	current atomic.Int64 // the device SetDevice selected, for all goroutines
	trace   atomic.Pointer[workTrace]
}

// device is the state of one virtual device.
type device struct {
	inUse atomic.Int64
	peak  atomic.Int64

	mu      sync.Mutex
	streams map[*stream]struct{} // live streams and destroyed ones still draining
}

// New returns a host backend configured by opts.
func New(opts ...Option) *Impl {
	cfg := newConfig(opts)
	return &Impl{cfg: cfg, devices: make([]device, cfg.devices)}
}

// Type returns runtime.CPU.
func (*Impl) Type() runtime.DeviceType { return runtime.CPU }

// Init does nothing: the host backend is always available.
func (*Impl) Init() error { return nil }

// DeviceCount returns the number of virtual devices.
func (m *Impl) DeviceCount() (int, error) { return len(m.devices), nil }

// SetDevice makes index the current device, for every goroutine (see Impl).
func (m *Impl) SetDevice(index int) error {
	if _, err := m.device("SetDevice", index); err != nil {
		return err
	}
	m.current.Store(int64(index))
	return nil
}

// GetDevice returns the current device index (0 until SetDevice).
func (m *Impl) GetDevice() (int, error) { return int(m.current.Load()), nil }

// DeviceSynchronize waits until every stream of the device, including
// destroyed streams still draining, has finished the work enqueued so far.
func (m *Impl) DeviceSynchronize(index int) error {
	d, err := m.device("DeviceSynchronize", index)
	if err != nil {
		return err
	}
	d.mu.Lock()
	streams := make([]*stream, 0, len(d.streams))
	for s := range d.streams {
		streams = append(streams, s)
	}
	d.mu.Unlock()
	for _, s := range streams {
		s.synchronize()
	}
	return nil
}

func (m *Impl) device(op string, index int) (*device, error) {
	if index < 0 || index >= len(m.devices) {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "invalid device index %d: %d cpu devices", index, len(m.devices))
	}
	return &m.devices[index], nil
}

func init() {
	runtime.MustRegister(runtime.CPU, New())
}
