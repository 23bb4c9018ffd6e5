package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Event marks a point in a stream's work. Create one with NewEvent, Record
// it on a stream, then Query, Synchronize or measure Elapsed between two.
type Event struct {
	dev       Device
	impl      Impl
	h         any
	flags     EventFlag
	destroyed atomic.Bool
	// mu is held while the event is recorded or destroyed, and by a
	// Stream.WaitStream that waits for it, from the check that it still
	// marks its stream's point to the wait.
	mu sync.Mutex
	// Where the last Record put it: the stream's ID (0 while none, or
	// while a Record is writing the others), its WorkOps and Waits then.
	pointStream atomic.Uint64
	pointWork   atomic.Uint64
	pointWaits  atomic.Uint64
}

// NewEvent creates an event on dev through the registered backend.
func NewEvent(dev Device, flags EventFlag) (*Event, error) {
	impl, err := Available(dev.Type)
	if err != nil {
		return nil, err
	}
	return NewEventWith(impl, dev, flags)
}

// NewEventWith is NewEvent on a given backend, bypassing the registry.
func NewEventWith(impl Impl, dev Device, flags EventFlag) (*Event, error) {
	if isNilImpl(impl) {
		return nil, Errorf("NewEvent", StatusInvalidArgument, "nil backend for device %s", dev)
	}
	const known = EventBlockingSync | EventDisableTiming | EventInterprocess
	if flags&^known != 0 {
		return nil, Errorf("NewEvent", StatusInvalidArgument, "unknown event flags %#x", uint32(flags&^known))
	}
	if flags&EventInterprocess != 0 && flags&EventDisableTiming == 0 {
		return nil, Errorf("NewEvent", StatusInvalidArgument, "an interprocess event must also disable timing")
	}
	if err := checkDevice(impl, dev, "NewEvent"); err != nil {
		return nil, err
	}
	h, err := impl.EventCreate(dev.Index, flags)
	if err != nil {
		return nil, err
	}
	return &Event{dev: dev, impl: impl, h: h, flags: flags}, nil
}

// Device returns the event's device.
func (e *Event) Device() Device { return e.dev }

// Flags returns the flags the event was created with.
func (e *Event) Flags() EventFlag { return e.flags }

// Handle returns the backend's handle.
func (e *Event) Handle() any { return e.h }

func (e *Event) live(op string) error {
	if e == nil {
		return Errorf(op, StatusInvalidArgument, "nil event")
	}
	if e.impl == nil {
		return Errorf(op, StatusInvalidArgument, "zero Event (not made by NewEvent)")
	}
	if e.destroyed.Load() {
		return Errorf(op, StatusInvalidArgument, "event on %s used after Destroy", e.dev)
	}
	return nil
}

// Record captures the work enqueued on s so far; the event completes when
// the stream reaches this point. It never waits for the device.
func (e *Event) Record(s *Stream) error {
	if err := e.live("EventRecord"); err != nil {
		return err
	}
	if err := s.live("EventRecord"); err != nil {
		return err
	}
	if s.dev != e.dev {
		return Errorf("EventRecord", StatusInvalidArgument, "event on %s recorded on a stream of %s", e.dev, s.dev)
	}
	e.mu.Lock()
	s.ops.Add(1) // not work (WorkOps): an event takes none of the stream's time
	s.records.Add(1)
	work, waits := s.work.Load(), s.waits.Load()
	e.pointStream.Store(0)
	if err := e.impl.EventRecord(e.h, s.h); err != nil {
		e.mu.Unlock()
		return err // where the event stands is unknown
	}
	e.pointWork.Store(work)
	e.pointWaits.Store(waits)
	e.pointStream.Store(s.id)
	e.mu.Unlock()
	s.latest.Store(e)
	return nil
}

// marks reports whether e, last recorded on s, still marks s's current
// point: nothing but event records and waits for points s had passed
// were enqueued on s since. The caller holds e.mu.
func (e *Event) marks(s *Stream) bool {
	return !e.destroyed.Load() && e.pointStream.Load() == s.id &&
		e.pointWork.Load() == s.work.Load() && e.pointWaits.Load() == s.waits.Load()
}

// point returns the point of its stream where e was last recorded; ok
// false if it never was through Record, or if a Record is under way on
// another goroutine.
func (e *Event) point() (p StreamPoint, ok bool) {
	id := e.pointStream.Load()
	p = StreamPoint{Stream: id, WorkOps: e.pointWork.Load(), Waits: e.pointWaits.Load()}
	if id == 0 || e.pointStream.Load() != id {
		return StreamPoint{}, false
	}
	return p, true
}

// Query returns nil once the recorded work has completed, and an error
// wrapping StatusNotReady before then.
func (e *Event) Query() error {
	if err := e.live("EventQuery"); err != nil {
		return err
	}
	return e.impl.EventQuery(e.h)
}

// Synchronize waits for the event. With a context that can end it polls,
// and returns an error wrapping StatusTimeout when the context ends first.
func (e *Event) Synchronize(ctx context.Context) error {
	if err := e.live("EventSynchronize"); err != nil {
		return err
	}
	if ctx == nil || ctx.Done() == nil {
		return e.impl.EventSynchronize(e.h)
	}
	return poll(ctx, "EventSynchronize", func() error { return e.impl.EventQuery(e.h) })
}

// Destroy releases the event. A second Destroy is an error, not a crash.
func (e *Event) Destroy() error {
	if e == nil {
		return Errorf("EventDestroy", StatusInvalidArgument, "nil event")
	}
	if e.impl == nil {
		return Errorf("EventDestroy", StatusInvalidArgument, "zero Event (not made by NewEvent)")
	}
	e.mu.Lock() // not while a WaitStream waits for it
	again := e.destroyed.Swap(true)
	e.mu.Unlock()
	if again {
		return Errorf("EventDestroy", StatusInvalidArgument, "event on %s destroyed twice", e.dev)
	}
	return e.impl.EventDestroy(e.h)
}

// Elapsed returns the device time from start to end. Both must be
// completed timing events of one device; an event created with
// EventDisableTiming is refused with StatusInvalidArgument.
func Elapsed(start, end *Event) (time.Duration, error) {
	if err := start.live("EventElapsed"); err != nil {
		return 0, err
	}
	if err := end.live("EventElapsed"); err != nil {
		return 0, err
	}
	if (start.flags|end.flags)&EventDisableTiming != 0 {
		return 0, Errorf("EventElapsed", StatusInvalidArgument, "elapsed time asked of an event created with EventDisableTiming")
	}
	if start.dev != end.dev {
		return 0, Errorf("EventElapsed", StatusInvalidArgument, "events on different devices (%s, %s)", start.dev, end.dev)
	}
	return start.impl.EventElapsed(start.h, end.h)
}
