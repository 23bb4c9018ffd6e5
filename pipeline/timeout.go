package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trainscope/trainscope/ccl"
)

// ErrCommTimeout is wrapped by the error of a wait for communication or
// device work that Config.CommTimeout cut short, so that a failed run can
// be told from one whose deadline was too short for it.
var ErrCommTimeout = errors.New("communication timeout")

// CommTimeoutError is a wait that Config.CommTimeout cut short. Its text
// names the timeout by value; a caller that sets it from elsewhere (a
// command-line flag) finds it with errors.As and names it its own way.
type CommTimeoutError struct {
	Timeout time.Duration // the CommTimeout that expired
	Err     error         // what the wait returned
}

func (e *CommTimeoutError) Error() string {
	return fmt.Sprintf("gave up after the communication timeout (%v): %v", e.Timeout, e.Err)
}

// Unwrap makes errors.Is find ErrCommTimeout and the wait's own error.
func (e *CommTimeoutError) Unwrap() []error { return []error{ErrCommTimeout, e.Err} }

// sharedTimeout wraps err as a *CommTimeoutError when it is a collective's
// timeout and own says the collectives are the trainer's own in-process
// ones (ccl/local.NewShared where ranks share devices, a ccl/local
// backend of the run's on CPU devices), whose timeout is CommTimeout. A
// timeout that a context's end caused — the caller's deadline, or the
// wait for a unique-id file, which has its own — is not CommTimeout's.
func sharedTimeout(own bool, cfg Config, err error) error {
	if !own || !errors.Is(err, ccl.StatusTimeout) || errors.Is(err, ErrCommTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return &CommTimeoutError{Timeout: cfg.commTimeout(), Err: err}
}

// timedOut wraps err, a wait's error under wctx (a context.WithTimeout of
// parent by timeout), as a *CommTimeoutError when it is wctx's deadline
// that ended the wait, not parent's end or a failure.
func timedOut(err error, parent, wctx context.Context, timeout time.Duration) error {
	if err == nil || parent.Err() != nil || !errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return &CommTimeoutError{Timeout: timeout, Err: err}
}
