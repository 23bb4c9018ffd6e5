package runtime

import "github.com/trainscope/trainscope/internal/status"

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

// statusTable describes runtime's codes to the shared status code.
type statusTable struct{}

func (statusTable) Package() string { return "runtime" }

func (statusTable) Name(s Status) (string, bool) {
	n, ok := statusNames[s]
	return n, ok
}

// String names a listed status. A value outside the list is reported as
// unsupported rather than as "Unknown", which is itself a listed value.
func (s Status) String() string { return status.String[statusTable](s) }

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return status.Message[statusTable](s) }

// OK reports whether s is a normal (non-negative) outcome. NotReady and
// Timeout are non-negative too: they mean "not yet" or "gave up waiting",
// not success, so code that needs success compares with StatusSuccess (or
// checks err == nil).
func (s Status) OK() bool { return status.OK(s) }

// Error is a failed runtime operation: which operation (Op, e.g.
// "EventElapsed"), the Status it maps to, the backend's own Detail (a CUDA
// error name and string, say) and the underlying cause Err; the last two
// may be empty. errors.Is and errors.As see both the status and the cause.
type Error = status.Error[Status, statusTable]

// Errorf returns an *Error for op with status st and a formatted detail.
func Errorf(op string, st Status, format string, args ...any) error {
	return status.Errorf[statusTable](op, st, format, args...)
}

// StatusOf returns the status an error carries: StatusSuccess for nil,
// the wrapped Status where there is one, and StatusUnknown otherwise.
func StatusOf(err error) Status { return status.Of[statusTable](err, StatusUnknown) }
