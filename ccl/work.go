package ccl

import (
	"fmt"
	"github.com/trainscope/trainscope/profiler"
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Work is an operation issued through a ProcessGroup. Its completion
// point is an event recorded on the communication stream after the
// operation.
//
// The methods of a nil *Work return an error wrapping
// StatusInvalidArgument (Done reports false, Event nil): a call that
// failed returns no Work.
//
// A communicator's asynchronous error (GetAsyncError) is not tied to one
// operation, so once it is set every Work of that rank not yet seen to
// complete reports it, as NCCL's process groups do.
type Work struct {
	pg   *ProcessGroup
	r    *localRank
	op   string
	seq  uint64
	done *runtime.Event

	// Inside a group: the profiler range is recorded at GroupEnd, and
	// the communication stream follows the caller's stream after (nil
	// where the caller issued on the communication stream) then.
	rec   *profiler.Recorder
	call  profiler.GroupedCollective
	after *runtime.Stream

	recorded  chan struct{} // closed once done is recorded (after GroupEnd inside a group)
	recordErr error         // written before recorded is closed

	mu       sync.Mutex
	finished bool
	err      error
	// escaped: Event handed done out, so it is not given up for reuse
	// (release). done is nil once given up.
	escaped bool
}

// record marks the operation's completion point on the communication
// stream.
func (w *Work) record() {
	if err := w.done.Record(w.r.stream); err != nil {
		w.recordErr = fmt.Errorf("ccl: %s: group %q rank %d: mark completion: %w", w.op, w.pg.name, w.r.rank, err)
	}
	close(w.recorded)
}

// fail marks the operation failed without a completion point: its
// group's launch failed, so nothing on the stream completes it.
func (w *Work) fail(launch error) {
	w.abandon(fmt.Errorf("ccl: %s: group %q rank %d: the group's launch failed: %w", w.op, w.pg.name, w.r.rank, launch))
}

// abandon marks the operation failed with err, without a completion
// point; it is called once, instead of record.
func (w *Work) abandon(err error) {
	w.recordErr = err
	close(w.recorded)
}

// poll looks once: finished reports completion or failure, err the
// failure.
func (w *Work) poll() (finished bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return true, w.err
	}
	select {
	case <-w.recorded:
	default:
		return false, nil
	}
	if w.recordErr != nil {
		return w.finish(w.recordErr)
	}
	return w.settle(w.done.Query())
}

// settle decides, from q, what the completion event's query returned,
// whether w has finished; the caller holds w.mu.
func (w *Work) settle(q error) (finished bool, err error) {
	if q != nil && runtime.StatusOf(q) != runtime.StatusNotReady {
		return w.finish(fmt.Errorf("ccl: %s: group %q rank %d: %w", w.op, w.pg.name, w.r.rank, q))
	}
	if aerr := w.pg.asyncError(w.r); aerr != nil {
		return w.finish(&Error{Op: w.op, Status: StatusOf(aerr), Detail: fmt.Sprintf("group %q rank %d, operation #%d", w.pg.name, w.r.rank, w.seq), Err: aerr})
	}
	if q == nil {
		return w.finish(nil)
	}
	return false, nil
}

func (w *Work) finish(err error) (bool, error) {
	w.finished, w.err = true, err
	return true, err
}

// release gives up w's completion event for a later operation of the rank
// to record (completionRing) and reports true, if the device has passed
// it: w is then seen complete (or failed, where its communicator reports
// an asynchronous error, as poll would say). An event handed out by Event,
// not yet recorded (inside a group not yet launched), recorded with an
// error or not yet passed stays w's, as does one of a Work another
// goroutine is asking at the moment: the issuing rank never waits for a
// caller of w's methods (StreamWait may wait for room on a stream). The
// caller holds w.r.mu.
func (w *Work) release() bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	if w.escaped || w.done == nil {
		return false
	}
	select {
	case <-w.recorded:
	default:
		return false
	}
	if w.recordErr != nil {
		return false
	}
	q := w.done.Query()
	if q != nil {
		return false
	}
	if !w.finished {
		w.settle(q)
	}
	w.done = nil
	return true
}

// Wait blocks the host until the operation has completed, its
// communicator has failed, or timeout has passed. A failure of the
// communicator (a peer that never arrived, say) is returned as soon as
// the backend reports it; running out of time gives an error wrapping
// StatusTimeout that names the operation, group and rank. A timeout of 0
// or less looks once.
func (w *Work) Wait(timeout time.Duration) error {
	if w == nil {
		return errNilWork("Wait")
	}
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Microsecond
	for {
		if finished, err := w.poll(); finished {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return w.timeoutError(timeout)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, time.Millisecond)
	}
}

func (w *Work) timeoutError(timeout time.Duration) error {
	detail := fmt.Sprintf("group %q rank %d: operation #%d not complete", w.pg.name, w.r.rank, w.seq)
	if timeout > 0 { // Wait(0) only asked
		detail += fmt.Sprintf(" after %v", timeout)
	}
	select {
	case <-w.recorded:
	default:
		detail += " (issued inside a group that has not ended: call GroupEnd first)"
	}
	return &Error{Op: w.op, Status: StatusTimeout, Detail: detail}
}

// Done reports, without waiting, whether the operation has completed or
// failed.
func (w *Work) Done() bool {
	if w == nil {
		return false
	}
	finished, _ := w.poll()
	return finished
}

// Err returns, without waiting, the operation's failure: nil while it is
// pending and after it succeeded.
func (w *Work) Err() error {
	if w == nil {
		return errNilWork("Err")
	}
	_, err := w.poll()
	return err
}

// StreamWait makes work enqueued on s from now on wait for the operation;
// the host does not wait.
func (w *Work) StreamWait(s *runtime.Stream) error {
	if w == nil {
		return errNilWork("StreamWait")
	}
	select {
	case <-w.recorded:
	default:
		return Errorf(w.op, StatusInvalidArgument, "group %q rank %d: operation #%d was issued inside a group that has not ended: call GroupEnd first", w.pg.name, w.r.rank, w.seq)
	}
	if w.recordErr != nil {
		return w.recordErr
	}
	// Under w.mu, so that the event is not given up and recorded again
	// by a later operation before s is told to wait for this record.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		return nil // given up once the device had passed it: nothing to wait for
	}
	return s.WaitEvent(w.done)
}

// Event returns the event that completes with the operation. It is
// recorded only after the outermost GroupEnd when the operation was issued
// inside a group. It stays valid while the Work or the event is
// referenced; do not Destroy it. A Work already seen complete when a later
// operation of its rank came round to reuse its event (see events.go)
// returns a new event, never recorded, which reports itself complete; nil
// if the backend cannot make one.
func (w *Work) Event() *runtime.Event {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.escaped = true
	if w.done == nil {
		ev, err := w.pg.newOpEvent(w.r.dev)
		if err != nil {
			return nil
		}
		w.done = ev
	}
	return w.done
}

// errNilWork is what a nil *Work's methods return: the Work of a call
// that failed (its error was not checked) has nothing to wait for.
func errNilWork(op string) error {
	return Errorf(op, StatusInvalidArgument, "nil *Work (was the error of the call that returned it checked?)")
}
