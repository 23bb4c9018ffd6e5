package ccl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestStatusString(t *testing.T) {
	for _, tc := range []struct {
		s    Status
		want string
		ok   bool
	}{
		{StatusSuccess, "Success", true},
		{StatusInProgress, "InProgress", true},
		{StatusTimeout, "Timeout", true},
		{StatusError, "Error", false},
		{StatusInvalidArgument, "InvalidArgument", false},
		{StatusUnavailable, "Unavailable", false},
		{StatusNotSupported, "NotSupported", false},
		{StatusInternal, "Internal", false},
		{StatusUnknown, "Unknown", false},
		{Status(7), "unsupported ccl status 7", true},
		{Status(-6), "unsupported ccl status -6", false},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("Status(%d).String() = %q, want %q", int(tc.s), got, tc.want)
		}
		if got := tc.s.OK(); got != tc.ok {
			t.Errorf("Status(%d).OK() = %v, want %v", int(tc.s), got, tc.ok)
		}
		if got := tc.s.Error(); got != "ccl: "+tc.want {
			t.Errorf("Status(%d).Error() = %q", int(tc.s), got)
		}
	}
	// The values are part of the API: they must not change.
	for s, v := range map[Status]int{StatusSuccess: 0, StatusInProgress: 1, StatusTimeout: 2, StatusError: -1,
		StatusInvalidArgument: -2, StatusUnavailable: -3, StatusNotSupported: -4, StatusInternal: -5, StatusUnknown: -127} {
		if int(s) != v {
			t.Errorf("%s = %d, want %d", s, int(s), v)
		}
	}
}

func TestErrorWrapping(t *testing.T) {
	cause := errors.New("socket closed")
	err := fmt.Errorf("rank 3: %w", &Error{Op: "AllReduce", Status: StatusTimeout, Detail: "peer 2", Err: cause})
	if !errors.Is(err, StatusTimeout) || errors.Is(err, StatusError) {
		t.Errorf("errors.Is on %v: wrong status match", err)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause) = false", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "AllReduce" {
		t.Errorf("errors.As: %v", e)
	}
	for _, s := range []string{"AllReduce", "Timeout", "peer 2", "socket closed"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if got := StatusOf(err); got != StatusTimeout {
		t.Errorf("StatusOf = %v", got)
	}
	if got := StatusOf(nil); got != StatusSuccess {
		t.Errorf("StatusOf(nil) = %v", got)
	}
	if got := StatusOf(cause); got != StatusUnknown {
		t.Errorf("StatusOf(plain error) = %v", got)
	}
	if err := Errorf("Send", StatusInvalidArgument, "peer %d", 9); !errors.Is(err, StatusInvalidArgument) || err.Error() != "ccl: Send: InvalidArgument: peer 9" {
		t.Errorf("Errorf: %v", err)
	}
}

// A process group asks StatusOf of every asynchronous error check while it
// waits ("in progress" included): the direct cases must not allocate.
func TestStatusOfDoesNotAllocate(t *testing.T) {
	var e error = &Error{Op: "AllReduce", Status: StatusInProgress}
	var s error = StatusTimeout
	if n := testing.AllocsPerRun(100, func() {
		if StatusOf(e) != StatusInProgress || StatusOf(s) != StatusTimeout {
			t.Fatal("wrong status")
		}
	}); n != 0 {
		t.Errorf("StatusOf allocates %v times per call", n)
	}
}
