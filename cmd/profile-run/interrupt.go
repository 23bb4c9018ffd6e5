package main

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"
)

// interrupt is what profile-run does with SIGINT, SIGTERM, SIGHUP and
// SIGQUIT. The first
// signal during training ends stop: training stops at the next action
// boundary, and everything recorded is flushed and written out, marked
// partial. A second signal (not the first one delivered twice: see
// watch), or any signal once training is over, ends
// abort: every wait left (flushing device work, delivering spans, the
// metrics linger, a push) ends at once. No wait in profile-run ignores
// them: each is bounded by a deadline and by abort.
type interrupt struct {
	stop, abort             context.Context
	cancelStop, cancelAbort context.CancelCauseFunc

	mu       sync.Mutex
	first    os.Signal // the first signal, which sets the exit status
	training bool
	wrapped  bool // a command is wrapped: its output is its own
	// leaving says, when profile-run exits without finishing (a wait
	// that no signal reaches outlasted the grace), what it leaves
	// unfinished; nil: nothing to say.
	leaving func()
}

// errInterrupted is the cause of stop and abort when a signal ended them.
type errInterrupted struct{ sig os.Signal }

func (e *errInterrupted) Error() string { return "interrupted by " + signalName(e.sig) }

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return s.String()
}

// newInterrupt returns an interrupt whose contexts also end with parent.
func newInterrupt(parent context.Context) *interrupt {
	in := &interrupt{training: true}
	in.abort, in.cancelAbort = context.WithCancelCause(parent)
	in.stop, in.cancelStop = context.WithCancelCause(in.abort)
	return in
}

// watch delivers signals from ch until it is closed. A signal that comes
// again within repeatWindow of its last delivery is that one delivered
// twice, not a second signal, and is dropped.
func (in *interrupt) watch(ch <-chan os.Signal) {
	var (
		last   os.Signal
		lastAt time.Time
	)
	for s := range ch {
		if s == last && time.Since(lastAt) < repeatWindow {
			continue
		}
		last, lastAt = s, time.Now()
		in.deliver(s)
	}
}

// repeatWindow is how soon the same signal again is taken for the one
// just received, delivered twice: timeout(1) sends its signal to
// profile-run and then to its process group, which holds profile-run too,
// so that profile-run gets it twice, microseconds apart, or once, when
// the kernel or the Go runtime merged the two (which depends on timing).
// Taken for a second signal, the copy cut the run's outputs short. A
// second Ctrl-C typed on purpose comes later than this.
const repeatWindow = 100 * time.Millisecond

// deliver acts on one signal.
func (in *interrupt) deliver(s os.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	cause := &errInterrupted{s}
	if in.first == nil {
		in.first = s
		if in.training {
			in.cancelStop(cause)
			return
		}
	}
	in.cancelStop(cause)
	in.cancelAbort(cause)
}

// readerGone says the reader of profile-run's stdout or stderr has gone
// (`profile-run | head`, head done). Training the built-in model stops as
// on a signal, SIGPIPE (exit status 141), and everything recorded is
// written out: the run ends, as head asks of whatever writes into it, but
// not with the half-written files that dying of SIGPIPE would leave. A
// wrapped command is not touched (its output is its own, and it meets the
// closed pipe itself), and once training is over, or for import and
// report, nothing stops: only what would have been printed is dropped.
// stdout and stderr going together (`profile-run 2>&1 | head`) are one
// reader gone, not a second signal.
func (in *interrupt) readerGone() {
	in.mu.Lock()
	leave := in.wrapped || !in.training || in.first == syscall.SIGPIPE
	in.mu.Unlock()
	if !leave {
		in.deliver(syscall.SIGPIPE)
	}
}

// wrapping says that a command is wrapped (see readerGone).
func (in *interrupt) wrapping() {
	in.mu.Lock()
	in.wrapped = true
	in.mu.Unlock()
}

// trainingDone says training is over: from now on the first signal cuts
// the remaining waits short.
func (in *interrupt) trainingDone() {
	in.mu.Lock()
	in.training = false
	in.mu.Unlock()
}

// nothingToStop says there is no training to stop gracefully (import,
// report): the first signal, even one already received, cuts every wait
// short.
func (in *interrupt) nothingToStop() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.training = false
	if in.first != nil {
		in.cancelAbort(&errInterrupted{in.first})
	}
}

// onHardExit has f say, should profile-run exit before it is done (see
// hardExit), what it leaves unfinished; nil says nothing.
func (in *interrupt) onHardExit(f func()) {
	in.mu.Lock()
	in.leaving = f
	in.mu.Unlock()
}

// hardExit runs what onHardExit registered, for at most bound: the
// process is about to end without finishing, and whatever kept it (a
// stuck disk, say) must not keep it from ending.
func (in *interrupt) hardExit(bound time.Duration) {
	in.mu.Lock()
	f := in.leaving
	in.mu.Unlock()
	if f == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// signal is the first signal received, or nil.
func (in *interrupt) signal() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.first
}

// exitCode is the conventional status of a process ended by the first
// signal: 128 + its number (130 for SIGINT, 143 for SIGTERM).
func (in *interrupt) exitCode() int {
	if s, ok := in.signal().(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFail
}

// stopped reports whether a signal (not an error) ended training.
func (in *interrupt) stopped() bool {
	var ei *errInterrupted
	return errors.As(context.Cause(in.stop), &ei)
}
