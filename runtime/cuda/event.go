package cuda

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// event is the handle of a CUDA event.
type event struct {
	owner     *Impl
	h         uintptr // cudaEvent_t
	dev       int
	flags     runtime.EventFlag
	destroyed atomic.Bool
}

// EventCreate makes an event on device. runtime.EventFlag numbers its
// flags as CUDA does, so they pass through unchanged.
func (m *Impl) EventCreate(device int, flags runtime.EventFlag) (any, error) {
	const op = "EventCreate"
	if _, err := m.device(op, device); err != nil {
		return nil, err
	}
	const known = runtime.EventBlockingSync | runtime.EventDisableTiming | runtime.EventInterprocess
	if flags&^known != 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "unknown event flags %#x", uint32(flags&^known))
	}
	sc, err := m.enter(op, device)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.eventCreateWithFlags, f.OutPtr(0), uintptr(flags))); rc != 0 {
		return nil, m.cudaErr(op, rc)
	}
	return &event{owner: m, h: uintptr(f.Out[0]), dev: device, flags: flags}, nil
}

func (m *Impl) event(op string, h any) (*event, error) {
	e, ok := h.(*event)
	if !ok || e == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cuda event handle", h)
	}
	if e.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "event belongs to another cuda backend instance")
	}
	if e.destroyed.Load() {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "event on cuda:%d used after EventDestroy", e.dev)
	}
	return e, nil
}

// EventDestroy releases the event; a record still pending completes
// harmlessly, as CUDA allows.
func (m *Impl) EventDestroy(h any) error {
	const op = "EventDestroy"
	e, err := m.event(op, h)
	if err != nil {
		return err
	}
	if e.destroyed.Swap(true) {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "event on cuda:%d destroyed twice", e.dev)
	}
	if rc := int32(dl.Call(m.rt.eventDestroy, e.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// EventRecord captures the work enqueued on the stream so far. It does
// not depend on the current device and allocates nothing: it is the
// profiler's hot path.
func (m *Impl) EventRecord(eh, sh any) error {
	const op = "EventRecord"
	e, err := m.event(op, eh)
	if err != nil {
		return err
	}
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	if e.dev != s.dev {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "event on cuda:%d recorded on a stream of cuda:%d", e.dev, s.dev)
	}
	if rc := int32(dl.Call(m.rt.eventRecord, e.h, s.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// EventQuery returns nil once the recorded work has completed, an error
// wrapping StatusNotReady before.
func (m *Impl) EventQuery(h any) error {
	const op = "EventQuery"
	e, err := m.event(op, h)
	if err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.eventQuery, e.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// EventSynchronize blocks until the event has completed.
func (m *Impl) EventSynchronize(h any) error {
	const op = "EventSynchronize"
	e, err := m.event(op, h)
	if err != nil {
		return err
	}
	if rc := int32(dl.Call(m.rt.eventSynchronize, e.h)); rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// EventElapsed returns the device time between two completed timing
// events. CUDA reports it as float32 milliseconds (about half a
// microsecond of resolution); an end event not yet completed gives an
// error wrapping StatusNotReady.
func (m *Impl) EventElapsed(sh, eh any) (time.Duration, error) {
	const op = "EventElapsed"
	start, err := m.event(op, sh)
	if err != nil {
		return 0, err
	}
	end, err := m.event(op, eh)
	if err != nil {
		return 0, err
	}
	if (start.flags|end.flags)&runtime.EventDisableTiming != 0 {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "elapsed time asked of an event created with EventDisableTiming")
	}
	f := dl.Get()
	rc := int32(f.Call(m.rt.eventElapsedTime, f.OutPtr(0), start.h, end.h))
	ms := math.Float32frombits(uint32(f.Out[0]))
	f.Put()
	if rc != 0 {
		return 0, m.cudaErr(op, rc)
	}
	return time.Duration(float64(ms) * 1e6), nil
}
