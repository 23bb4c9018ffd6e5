package status

import (
	"errors"
	"fmt"
	"strconv"
)

// Code is a package's status type: an integer where 0 is success, other
// non-negative values are normal outcomes ("not yet", "gave up waiting")
// and negative values are failures. It is an error itself, so that
// errors.Is(err, code) matches any error that wraps it.
type Code interface {
	~int
	error
}

// Table describes one package's codes. Its methods are called on the zero
// value: a table is an empty struct type.
type Table[S Code] interface {
	// Package names the package; it starts every message ("runtime: ...").
	Package() string
	// Name returns the name of a listed code.
	Name(S) (string, bool)
}

// String names s. A value outside T's list is reported as unsupported
// rather than as "Unknown", which is itself a listed value.
func String[T Table[S], S Code](s S) string {
	var t T
	if n, ok := t.Name(s); ok {
		return n
	}
	return "unsupported " + t.Package() + " status " + strconv.Itoa(int(s))
}

// Message is the text of s as an error: the package's name, then String.
func Message[T Table[S], S Code](s S) string {
	var t T
	return t.Package() + ": " + String[T](s)
}

// OK reports whether s is a normal (non-negative) outcome. That includes
// the "not yet" and "gave up waiting" codes, so code that needs success
// compares with 0 (or checks err == nil).
func OK[S ~int](s S) bool { return s >= 0 }

// Error is a failed operation: which operation, the code it maps to, and
// the backend's own detail (a CUDA or NCCL error string, say).
type Error[S Code, T Table[S]] struct {
	Op     string // the operation, e.g. "AllReduce"
	Status S
	Detail string // backend-specific explanation; may be empty
	Err    error  // underlying cause; may be nil
}

func (e *Error[S, T]) Error() string {
	var t T
	msg := t.Package() + ": " + e.Op + ": " + String[T](e.Status)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes both the code and the cause to errors.Is and errors.As.
func (e *Error[S, T]) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Status}
	}
	return []error{e.Status, e.Err}
}

// Errorf returns an *Error for op with code st and a formatted detail.
func Errorf[T Table[S], S Code](op string, st S, format string, args ...any) error {
	return &Error[S, T]{Op: op, Status: st, Detail: fmt.Sprintf(format, args...)}
}

// Of returns the code an error carries: 0 (success) for nil, the wrapped
// code of type S where there is one, and unknown otherwise.
func Of[T Table[S], S Code](err error, unknown S) S {
	if err == nil {
		return 0
	}
	// The common cases without errors.As, which allocates: polling asks
	// this of every "not ready".
	switch e := err.(type) {
	case *Error[S, T]:
		return e.Status
	case S:
		return e
	}
	var st S
	if errors.As(err, &st) {
		return st
	}
	return unknown
}
