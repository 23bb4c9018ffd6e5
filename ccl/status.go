package ccl

import (
	"errors"
	"fmt"
	"strconv"
)

// Status is the outcome of a collective-communication call. Non-negative
// values are normal, negative values are failures; each backend maps its own
// codes (ncclResult_t, say) onto these. Status implements error, so
// errors.Is(err, ccl.StatusTimeout) matches any error wrapping it.
type Status int

// Status values: non-negative is a normal outcome, negative a failure;
// Unknown sits at -127 to leave room for new failures.
const (
	StatusSuccess         Status = 0
	StatusInProgress      Status = 1
	StatusTimeout         Status = 2
	StatusError           Status = -1
	StatusInvalidArgument Status = -2
	StatusUnavailable     Status = -3
	StatusNotSupported    Status = -4
	StatusInternal        Status = -5
	StatusUnknown         Status = -127
)

var statusNames = map[Status]string{
	StatusSuccess:         "Success",
	StatusInProgress:      "InProgress",
	StatusTimeout:         "Timeout",
	StatusError:           "Error",
	StatusInvalidArgument: "InvalidArgument",
	StatusUnavailable:     "Unavailable",
	StatusNotSupported:    "NotSupported",
	StatusInternal:        "Internal",
	StatusUnknown:         "Unknown",
}

// String names a listed status; a value outside the list says it is
// unsupported (not "Unknown", which is a listed value).
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "unsupported ccl status " + strconv.Itoa(int(s))
}

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return "ccl: " + s.String() }

// OK reports whether s is a normal (non-negative) outcome. NotReady, InProgress and Timeout are non-negative too: they
// mean "not yet" or "gave up waiting", not success, so code that needs
// success compares with StatusSuccess (or checks err == nil).
func (s Status) OK() bool { return s >= 0 }

// Error is a failed collective-communication call.
type Error struct {
	Op     string // e.g. "AllReduce"
	Status Status
	Detail string // backend detail, e.g. NCCL's error string
	Err    error  // underlying cause; may be nil
}

func (e *Error) Error() string {
	msg := "ccl: " + e.Op + ": " + e.Status.String()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes the status and the cause to errors.Is and errors.As.
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

// StatusOf returns the status an error carries: StatusSuccess for nil, the
// wrapped Status where there is one, StatusUnknown otherwise.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var st Status
	if errors.As(err, &st) {
		return st
	}
	return StatusUnknown
}
