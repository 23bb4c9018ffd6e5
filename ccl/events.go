package ccl

import (
	goruntime "runtime"

	"github.com/trainscope/trainscope/runtime"
)

// Events of a process group's operations. Every operation records its
// completion point (Work's event) on the rank's communication stream, and
// one issued from another stream first has the communication stream wait
// for that stream (follow). Creating and destroying an event are driver
// calls of a microsecond or more on CUDA, and ones the driver holds back
// while another thread waits in it (docs/gpu.md); recording one is not.
// A pipeline rank issues a Send or Recv per microbatch and chunk, so the
// rank keeps its events and records them again:
//
//   - follow's event is recorded on the caller's stream and waited for at
//     once; StreamWaitEvent waits for the record made before the call, so
//     the next follow may record the same event again. Where the event
//     recorded last on that stream, by anyone, still marks its point (a
//     profiler's range end, the previous follow's), the communication
//     stream waits for that one and nothing is recorded
//     (runtime.Stream.WaitStream).
//   - completion events go round a ring of completionSlots per rank. An
//     operation takes the slot after the previous one's; the Work that
//     held it gives its event up (Work.release) once the device has passed
//     it, asked once then: the Work is seen complete, and answers from
//     what it saw from then on (Done, Err, StreamWait: nothing to wait
//     for). A Work not yet complete then, one inside a group not yet
//     launched, one whose event was handed out (Work.Event) or one that
//     another goroutine is asking at that moment keeps its event, and the
//     slot gets a new one.
//
// Events are destroyed when nothing refers to them any more (a Work, its
// Event's caller, the ring), as before they were reused.

// completionSlots is the ring's length: a rank issuing more operations than
// this ahead of the device creates an event per operation, as it did
// without the ring.
const completionSlots = 64

// completionRing is a rank's reusable events; guarded by localRank.mu.
type completionRing struct {
	slots  [completionSlots]completionSlot
	next   int
	follow *runtime.Event // follow's event; nil until the first follow
}

type completionSlot struct {
	ev    *runtime.Event
	owner *Work // the operation that recorded ev last; nil if none did
}

// newOpEvent creates an untimed event on dev, destroyed once nothing
// refers to it.
func (pg *ProcessGroup) newOpEvent(dev runtime.Device) (*runtime.Event, error) {
	e, err := runtime.NewEventWith(pg.rt, dev, runtime.EventDisableTiming)
	if err != nil {
		return nil, err
	}
	impl := pg.rt
	goruntime.AddCleanup(e, func(h any) { _ = impl.EventDestroy(h) }, e.Handle())
	return e, nil
}

// completion returns the event for the completion point of the operation
// r issues next, and its slot, whose owner the caller sets once the
// operation's Work exists. The caller holds r.mu.
func (pg *ProcessGroup) completion(r *localRank) (*runtime.Event, *completionSlot, error) {
	sl := &r.events.slots[r.events.next]
	if sl.ev == nil || (sl.owner != nil && !sl.owner.release()) {
		ev, err := pg.newOpEvent(r.dev)
		if err != nil {
			return nil, nil, err
		}
		sl.ev = ev
	}
	// An event whose operation failed to issue was never recorded for
	// it (owner nil): free to use.
	sl.owner = nil
	r.events.next = (r.events.next + 1) % completionSlots
	return sl.ev, sl, nil
}

// follow makes r's communication stream wait for what is enqueued on s.
// The caller holds r.mu.
func (pg *ProcessGroup) follow(r *localRank, s *runtime.Stream) error {
	ready := r.events.follow
	if ready == nil || ready.Device() != s.Device() {
		var err error
		if ready, err = pg.newOpEvent(s.Device()); err != nil {
			return err
		}
		if s.Device() == r.dev {
			r.events.follow = ready
		}
	}
	recorded, err := r.stream.WaitStream(s, ready)
	if err != nil && recorded && r.events.follow == ready {
		r.events.follow = nil // its state is unknown: the next follow makes another
	}
	return err
}
