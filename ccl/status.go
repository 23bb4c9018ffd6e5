package ccl

import "github.com/trainscope/trainscope/internal/status"

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

// statusTable describes ccl's codes to the shared status code.
type statusTable struct{}

func (statusTable) Package() string { return "ccl" }

func (statusTable) Name(s Status) (string, bool) {
	n, ok := statusNames[s]
	return n, ok
}

// String names a listed status; a value outside the list says it is
// unsupported (not "Unknown", which is a listed value).
func (s Status) String() string { return status.String[statusTable](s) }

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return status.Message[statusTable](s) }

// OK reports whether s is a normal (non-negative) outcome. InProgress and
// Timeout are non-negative too: they mean "not yet" or "gave up waiting",
// not success, so code that needs success compares with StatusSuccess (or
// checks err == nil).
func (s Status) OK() bool { return status.OK(s) }

// Error is a failed collective-communication call: the operation (Op, e.g.
// "AllReduce"), the Status it maps to, the backend's Detail (NCCL's error
// string, say) and the underlying cause Err; the last two may be empty.
// errors.Is and errors.As see both the status and the cause.
type Error = status.Error[Status, statusTable]

// Errorf returns an *Error for op with status st and a formatted detail.
func Errorf(op string, st Status, format string, args ...any) error {
	return status.Errorf[statusTable](op, st, format, args...)
}

// StatusOf returns the status an error carries: StatusSuccess for nil, the
// wrapped Status where there is one, StatusUnknown otherwise.
func StatusOf(err error) Status { return status.Of[statusTable](err, StatusUnknown) }
