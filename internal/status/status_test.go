package status_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/trainscope/trainscope/internal/status"
)

// code is a package's status type as runtime and ccl define theirs.
type code int

const (
	done    code = 0
	pending code = 1
	broken  code = -1
	unknown code = -127
)

type table struct{}

func (table) Package() string { return "disk" }

func (table) Name(c code) (string, bool) {
	n, ok := map[code]string{done: "Done", pending: "Pending", broken: "Broken", unknown: "Unknown"}[c]
	return n, ok
}

func (c code) String() string { return status.String[table](c) }
func (c code) Error() string  { return status.Message[table](c) }

type diskError = status.Error[code, table]

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		c         code
		name, msg string
		ok        bool
	}{
		{done, "Done", "disk: Done", true},
		{pending, "Pending", "disk: Pending", true},
		{broken, "Broken", "disk: Broken", false},
		{unknown, "Unknown", "disk: Unknown", false},
		{code(9), "unsupported disk status 9", "disk: unsupported disk status 9", true},
		{code(-3), "unsupported disk status -3", "disk: unsupported disk status -3", false},
	} {
		if got := tc.c.String(); got != tc.name {
			t.Errorf("code %d: String %q, want %q", int(tc.c), got, tc.name)
		}
		if got := tc.c.Error(); got != tc.msg {
			t.Errorf("code %d: Error %q, want %q", int(tc.c), got, tc.msg)
		}
		if got := status.OK(tc.c); got != tc.ok {
			t.Errorf("code %d: OK %v, want %v", int(tc.c), got, tc.ok)
		}
	}
}

func TestErrorMessageAndMatching(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	for _, tc := range []struct {
		err  *diskError
		want string
	}{
		{&diskError{Op: "Read", Status: broken}, "disk: Read: Broken"},
		{&diskError{Op: "Read", Status: broken, Detail: "sector 7"}, "disk: Read: Broken: sector 7"},
		{&diskError{Op: "Read", Status: pending, Detail: "sector 7", Err: cause}, "disk: Read: Pending: sector 7: unexpected EOF"},
		{&diskError{Op: "Read", Status: code(5), Err: cause}, "disk: Read: unsupported disk status 5: unexpected EOF"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		wrapped := fmt.Errorf("rank 2: %w", tc.err)
		if !errors.Is(wrapped, tc.err.Status) {
			t.Errorf("errors.Is(%v, %v) = false", wrapped, tc.err.Status)
		}
		if errors.Is(wrapped, done) || errors.Is(wrapped, unknown) {
			t.Errorf("%v matches a code it does not carry", wrapped)
		}
		if got := errors.Is(wrapped, cause); got != (tc.err.Err != nil) {
			t.Errorf("errors.Is(%v, cause) = %v", wrapped, got)
		}
		var e *diskError
		if !errors.As(wrapped, &e) || e != tc.err {
			t.Errorf("errors.As did not find the *Error in %v", wrapped)
		}
	}
}

func TestErrorf(t *testing.T) {
	err := status.Errorf[table]("Write", broken, "block %d of %d", 3, 8)
	if got, want := err.Error(), "disk: Write: Broken: block 3 of 8"; got != want {
		t.Errorf("Errorf: %q, want %q", got, want)
	}
	if !errors.Is(err, broken) {
		t.Errorf("errors.Is(%v, broken) = false", err)
	}
}

// otherCode is another package's status type: Of must not take it for
// one of its own.
type otherCode int

func (otherCode) Error() string { return "other" }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want code
	}{
		{"nil", nil, done},
		{"bare code", pending, pending},
		{"*Error", &diskError{Op: "Read", Status: broken}, broken},
		{"wrapped *Error", fmt.Errorf("x: %w", &diskError{Op: "Read", Status: code(-4)}), code(-4)},
		{"wrapped code", fmt.Errorf("x: %w", pending), pending},
		{"joined", errors.Join(io.EOF, broken), broken},
		{"foreign error", io.EOF, unknown},
		{"another package's code", otherCode(-1), unknown},
	} {
		if got := status.Of[table](tc.err, unknown); got != tc.want {
			t.Errorf("%s: Of = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Polling asks Of of every "not ready": the direct cases must not allocate.
func TestOfDoesNotAllocate(t *testing.T) {
	var e error = &diskError{Op: "Query", Status: pending}
	var c error = pending
	if n := testing.AllocsPerRun(100, func() {
		if status.Of[table](e, unknown) != pending || status.Of[table](c, unknown) != pending {
			t.Fatal("wrong code")
		}
	}); n != 0 {
		t.Errorf("Of allocates %v times per call", n)
	}
}

func ExampleError() {
	err := fmt.Errorf("rank 3: %w", &diskError{Op: "Read", Status: broken, Detail: "sector 7"})
	fmt.Println(err)
	fmt.Println(errors.Is(err, broken), status.Of[table](err, unknown))
	// Output:
	// rank 3: disk: Read: Broken: sector 7
	// true disk: Broken
}
