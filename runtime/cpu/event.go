package cpu

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// epoch is the origin of event timestamps; time.Since reads the monotonic
// clock.
var epoch = time.Now()

// event is the handle of a cpu event. Each record gets a generation
// number; queries refer to the most recent one.
type event struct {
	owner *Impl
	dev   int
	flags runtime.EventFlag

	destroyed atomic.Bool
	recorded  atomic.Uint64 // generation of the most recent record, 0 if none

	mu   sync.Mutex
	cond sync.Cond     // waiters for a generation
	done atomic.Uint64 // highest completed generation; written under mu
	ts   int64         // completion time of generation done, ns since epoch; under mu
	// The most recent record's stream and its place in that stream's
	// queue (its ticket, see stream.reached); under mu. Records on
	// different streams complete in any order, so done alone cannot say
	// whether an older record has completed.
	src    *stream
	ticket uint64
}

// noteRecord numbers a record enqueued on s as item ticket and makes it
// the most recent; the caller holds s.mu.
func (e *event) noteRecord(s *stream, ticket uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.src, e.ticket = s, ticket
	return e.recorded.Add(1)
}

// lastRecord returns the stream and ticket of the most recent record, or
// a nil stream if the event was never recorded.
func (e *event) lastRecord() (*stream, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.src, e.ticket
}

// EventCreate makes an event on device.
func (m *Impl) EventCreate(device int, flags runtime.EventFlag) (any, error) {
	if _, err := m.device("EventCreate", device); err != nil {
		return nil, err
	}
	const known = runtime.EventBlockingSync | runtime.EventDisableTiming | runtime.EventInterprocess
	if flags&^known != 0 {
		return nil, runtime.Errorf("EventCreate", runtime.StatusInvalidArgument, "unknown event flags %#x", uint32(flags&^known))
	}
	e := &event{owner: m, dev: device, flags: flags}
	e.cond.L = &e.mu
	return e, nil
}

// EventDestroy releases the event. A record still pending on a stream
// completes harmlessly.
func (m *Impl) EventDestroy(h any) error {
	e, err := m.event("EventDestroy", h)
	if err != nil {
		return err
	}
	if e.destroyed.Swap(true) {
		return errEventDestroyed("EventDestroy")
	}
	return nil
}

// EventRecord captures the work enqueued on the stream so far; the event
// completes, and takes its timestamp, when the stream's goroutine reaches
// this point. It does not allocate (a stream's queue grows to its bound
// the first times it fills, a few allocations in the stream's life) and
// blocks only while the stream's queue is full.
func (m *Impl) EventRecord(eh, sh any) error {
	e, err := m.liveEvent("EventRecord", eh)
	if err != nil {
		return err
	}
	s, err := m.stream("EventRecord", sh)
	if err != nil {
		return err
	}
	if e.dev != s.dev {
		return runtime.Errorf("EventRecord", runtime.StatusInvalidArgument, "event on cpu:%d recorded on a stream of cpu:%d", e.dev, s.dev)
	}
	it := item{kind: opRecord, ev: e}
	return s.push("EventRecord", &it)
}

// EventQuery returns nil once the most recent record has completed (or if
// the event was never recorded) and an error wrapping StatusNotReady
// before.
func (m *Impl) EventQuery(h any) error {
	e, err := m.liveEvent("EventQuery", h)
	if err != nil {
		return err
	}
	if e.done.Load() < e.recorded.Load() {
		return errEventNotReady
	}
	return nil
}

// EventSynchronize blocks until the most recent record has completed.
func (m *Impl) EventSynchronize(h any) error {
	e, err := m.liveEvent("EventSynchronize", h)
	if err != nil {
		return err
	}
	e.wait(e.recorded.Load())
	return nil
}

// EventElapsed returns end's completion time minus start's. Both must be
// recorded, completed timing events of one device.
func (m *Impl) EventElapsed(start, end any) (time.Duration, error) {
	s, err := m.liveEvent("EventElapsed", start)
	if err != nil {
		return 0, err
	}
	e, err := m.liveEvent("EventElapsed", end)
	if err != nil {
		return 0, err
	}
	if s.dev != e.dev {
		return 0, runtime.Errorf("EventElapsed", runtime.StatusInvalidArgument, "events on different devices (cpu:%d, cpu:%d)", s.dev, e.dev)
	}
	t0, err := s.timestamp()
	if err != nil {
		return 0, err
	}
	t1, err := e.timestamp()
	if err != nil {
		return 0, err
	}
	return time.Duration(t1 - t0), nil
}

// timestamp returns the completion time of the most recent record.
func (e *event) timestamp() (int64, error) {
	if e.flags&runtime.EventDisableTiming != 0 {
		return 0, runtime.Errorf("EventElapsed", runtime.StatusInvalidArgument, "elapsed time asked of an event created with EventDisableTiming")
	}
	rec := e.recorded.Load()
	if rec == 0 {
		return 0, runtime.Errorf("EventElapsed", runtime.StatusInvalidArgument, "event never recorded")
	}
	e.mu.Lock()
	done, ts := e.done.Load(), e.ts
	e.mu.Unlock()
	if done < rec {
		return 0, errElapsedNotReady
	}
	return ts, nil
}

// complete marks generation gen done, on the stream's goroutine. A
// generation older than one already done (the event was re-recorded on a
// faster stream) changes nothing.
func (e *event) complete(gen uint64) {
	now := int64(time.Since(epoch))
	e.mu.Lock()
	if gen > e.done.Load() {
		e.ts = now
		e.done.Store(gen)
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

// wait blocks until generation gen has completed.
func (e *event) wait(gen uint64) {
	if e.done.Load() >= gen {
		return
	}
	e.mu.Lock()
	for e.done.Load() < gen {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

func (m *Impl) event(op string, h any) (*event, error) {
	e, ok := h.(*event)
	if !ok || e == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cpu event handle", h)
	}
	if e.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "event handle belongs to another cpu backend instance")
	}
	return e, nil
}

func (m *Impl) liveEvent(op string, h any) (*event, error) {
	e, err := m.event(op, h)
	if err != nil {
		return nil, err
	}
	if e.destroyed.Load() {
		return nil, errEventDestroyed(op)
	}
	return e, nil
}

func errEventDestroyed(op string) error {
	return runtime.Errorf(op, runtime.StatusInvalidArgument, "event used after EventDestroy")
}

// Shared NotReady errors, so that polling does not allocate.
var (
	errEventNotReady   error = &runtime.Error{Op: "EventQuery", Status: runtime.StatusNotReady, Detail: "recorded work has not completed"}
	errElapsedNotReady error = &runtime.Error{Op: "EventElapsed", Status: runtime.StatusNotReady, Detail: "recorded work has not completed"}
)
