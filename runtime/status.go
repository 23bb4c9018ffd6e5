package runtime

import (
	"errors"
	"fmt"
	"strconv"
)

// Status is the outcome of a runtime operation. Non-negative values are
// normal outcomes, negative values are failures. Each backend maps its own
// codes onto these values.
//
// Status implements error so that errors.Is(err, runtime.StatusTimeout)
// matches any error that wraps that status.
type Status int

// Status values: non-negative is a normal outcome, negative a failure;
// Unknown sits at -127 to leave room for new failures.
const (
	StatusSuccess          Status = 0
	StatusNotReady         Status = 1
	StatusTimeout          Status = 2
	StatusError            Status = -1
	StatusInvalidArgument  Status = -2
	StatusOutOfMemory      Status = -3
	StatusUnavailable      Status = -4
	StatusNotSupported     Status = -5
	StatusAlreadyExists    Status = -6
	StatusPermissionDenied Status = -7
	StatusInternal         Status = -8
	StatusUnknown          Status = -127
)

var statusNames = map[Status]string{
	StatusSuccess:          "Success",
	StatusNotReady:         "NotReady",
	StatusTimeout:          "Timeout",
	StatusError:            "Error",
	StatusInvalidArgument:  "InvalidArgument",
	StatusOutOfMemory:      "OutOfMemory",
	StatusUnavailable:      "Unavailable",
	StatusNotSupported:     "NotSupported",
	StatusAlreadyExists:    "AlreadyExists",
	StatusPermissionDenied: "PermissionDenied",
	StatusInternal:         "Internal",
	StatusUnknown:          "Unknown",
}

// String names a listed status. A value outside the list is reported as
// unsupported rather than as "Unknown", which is itself a listed value.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "unsupported runtime status " + strconv.Itoa(int(s))
}

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return "runtime: " + s.String() }

// OK reports whether s is a normal (non-negative) outcome. NotReady, InProgress and Timeout are non-negative too: they
// mean "not yet" or "gave up waiting", not success, so code that needs
// success compares with StatusSuccess (or checks err == nil).
func (s Status) OK() bool { return s >= 0 }

// Error is a failed runtime operation: which operation, the status it maps
// to, and the backend's own detail (a CUDA error name and string, say).
type Error struct {
	Op     string // the operation, e.g. "EventElapsed"
	Status Status
	Detail string // backend-specific explanation; may be empty
	Err    error  // underlying cause; may be nil
}

func (e *Error) Error() string {
	msg := "runtime: " + e.Op + ": " + e.Status.String()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes both the status and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Status}
	}
	return []error{e.Status, e.Err}
}

// Errorf returns an *Error for op with status st and a formatted detail.
func Errorf(op string, st Status, format string, args ...any) error {
	return &Error{Op: op, Status: st, Detail: fmt.Sprintf(format, args...)}
}

// StatusOf returns the status an error carries: StatusSuccess for nil,
// the wrapped Status where there is one, and StatusUnknown otherwise.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	// The common cases without errors.As, which allocates: polling asks
	// this of every NotReady.
	switch e := err.(type) {
	case *Error:
		return e.Status
	case Status:
		return e
	}
	var st Status
	if errors.As(err, &st) {
		return st
	}
	return StatusUnknown
}
