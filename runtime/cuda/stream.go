package cuda

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// cudaStreamNonBlocking: the backend's streams do not synchronise with
// the legacy default stream, which synchronous copies use.
const cudaStreamNonBlocking = 1

// stream is the handle of a CUDA stream.
type stream struct {
	owner     *Impl
	h         uintptr // cudaStream_t
	dev       int
	destroyed atomic.Bool

	// The stream's cuBLAS handle, created at its first BLAS call: a
	// handle is bound to one stream and one device, and a handle per
	// stream lets ranks on different goroutines call cuBLAS at once.
	blasMu sync.Mutex
	blas   uintptr

	// notes are the copies and memsets issued while a work trace runs,
	// and lastQueued the enqueue time of the last kernel of the stream
	// the trace reported (its collects only).
	notes      issueNotes
	lastQueued time.Time
}

// StreamCreate creates a non-blocking stream on device with the given
// priority (lower numbers run first; see StreamPriorityRange).
func (m *Impl) StreamCreate(device, priority int) (any, error) {
	const op = "StreamCreate"
	if _, err := m.device(op, device); err != nil {
		return nil, err
	}
	sc, err := m.enter(op, device)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.streamCreateWithPriority, f.OutPtr(0), cudaStreamNonBlocking, uintptr(priority))); rc != 0 {
		return nil, m.cudaErr(op, rc)
	}
	s := &stream{owner: m, h: uintptr(f.Out[0]), dev: device}
	m.live.Store(s, struct{}{})
	if t := m.wtrace.Load(); t != nil {
		t.watch(s)
	}
	return s, nil
}

// stream resolves a stream handle of m.
func (m *Impl) stream(op string, h any) (*stream, error) {
	s, ok := h.(*stream)
	if !ok || s == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cuda stream handle", h)
	}
	if s.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "stream belongs to another cuda backend instance")
	}
	if s.destroyed.Load() {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "stream on cuda:%d used after StreamDestroy", s.dev)
	}
	return s, nil
}

// StreamDestroy releases the stream (and its cuBLAS handle, which
// synchronises the device). Work already enqueued completes.
func (m *Impl) StreamDestroy(h any) error {
	const op = "StreamDestroy"
	s, err := m.stream(op, h)
	if err != nil {
		return err
	}
	if s.destroyed.Swap(true) {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "stream on cuda:%d destroyed twice", s.dev)
	}
	m.live.Delete(s)
	s.blasMu.Lock()
	blasHandle := s.blas
	s.blas = 0
	s.blasMu.Unlock()
	if blasHandle != 0 {
		// The handle is destroyed with its device current. Where that
		// device cannot be made current (a context broken by an earlier
		// fault), it is destroyed all the same, on whatever device the
		// thread has, rather than dropped: its host state and device
		// workspace would otherwise stay allocated for good, as the
		// stream is gone either way. The error reported is the first.
		sc, err := m.enter(op, s.dev)
		rc := int32(dl.Call(m.blas.destroy, blasHandle))
		if err == nil {
			sc.exit()
			if rc != 0 {
				err = m.blasErr(op, rc)
			}
		}
		if err != nil {
			_ = dl.Call(m.rt.streamDestroy, s.h)
			return err
		}
	}
	if rc := int32(dl.Call(m.rt.streamDestroy, s.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// StreamPriorityRange returns the device's stream priorities: least is
// the default (0), greatest the most urgent (a negative number).
func (m *Impl) StreamPriorityRange(device int) (least, greatest int, err error) {
	const op = "StreamPriorityRange"
	if _, err := m.device(op, device); err != nil {
		return 0, 0, err
	}
	sc, err := m.enter(op, device)
	if err != nil {
		return 0, 0, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.deviceGetStreamPriorityRange, f.OutPtr(0), f.OutPtr(1))); rc != 0 {
		return 0, 0, m.cudaErr(op, rc)
	}
	return int(int32(f.Out[0])), int(int32(f.Out[1])), nil
}

// StreamSynchronize blocks until the stream's work has completed.
func (m *Impl) StreamSynchronize(h any) error {
	const op = "StreamSynchronize"
	s, err := m.stream(op, h)
	if err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.streamSynchronize, s.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// StreamQuery returns nil when the stream is idle and an error wrapping
// StatusNotReady otherwise.
func (m *Impl) StreamQuery(h any) error {
	const op = "StreamQuery"
	s, err := m.stream(op, h)
	if err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.streamQuery, s.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// StreamWaitEvent makes future work on the stream wait for the event;
// the stream and event may be on different devices.
func (m *Impl) StreamWaitEvent(sh, eh any) error {
	const op = "StreamWaitEvent"
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	e, err := m.event(op, eh)
	if err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.streamWaitEvent, s.h, e.h, 0)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// StreamPointer returns the cudaStream_t of a stream of this package's
// backend, for libraries that enqueue work on it (NCCL).
func StreamPointer(s *runtime.Stream) (uintptr, error) {
	if s == nil {
		return 0, runtime.Errorf("StreamPointer", runtime.StatusInvalidArgument, "nil stream")
	}
	cs, ok := s.Handle().(*stream)
	if !ok || cs == nil {
		return 0, runtime.Errorf("StreamPointer", runtime.StatusInvalidArgument, "stream on %s is not a cuda stream (%T)", s.Device(), s.Handle())
	}
	if cs.destroyed.Load() {
		return 0, runtime.Errorf("StreamPointer", runtime.StatusInvalidArgument, "stream on %s used after Destroy", s.Device())
	}
	return cs.h, nil
}
