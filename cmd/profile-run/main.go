package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// abortGrace is how long profile-run may take to exit once a signal has
// cut its waits short; a wait that cannot see the signal (a backend call
// without a deadline of its own, say) does not keep it alive longer.
const abortGrace = 2 * time.Second

func main() {
	sigs := make(chan os.Signal, 2)
	// A signal profile-run was started ignoring (SIGHUP under nohup,
	// SIGINT in a script's background job) stays ignored: catching it
	// would undo that for a wrapped command too, and pass it on.
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	in := newInterrupt(context.Background())
	go in.watch(sigs)
	go exitAfterAbort(in, abortGrace, abortGrace, os.Exit)
	// A write to a closed pipe on stdout or stderr fails with EPIPE
	// instead of killing the process once SIGPIPE is caught (a handler,
	// not SIG_IGN, so a wrapped command still gets the default); the
	// writers below act on it (readerGone).
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	go func() {
		for range pipes {
		}
	}()
	stdout := &outputFile{f: os.Stdout, gone: in.readerGone}
	stderr := &outputFile{f: os.Stderr, gone: in.readerGone}
	// Signals stay caught until the process is gone: one arriving while
	// it exits must not replace the status.
	os.Exit(runWith(in, os.Args[1:], stdout, stderr))
}

// exitAfterAbort calls exit with the signal's status grace after a signal
// has ended in.abort, once what is left unfinished has been said
// (in.hardExit, given at most sayFor); an abort for another reason does
// nothing.
func exitAfterAbort(in *interrupt, grace, sayFor time.Duration, exit func(int)) {
	<-in.abort.Done()
	var ei *errInterrupted
	if errors.As(context.Cause(in.abort), &ei) {
		time.Sleep(grace)
		in.hardExit(sayFor)
		exit(in.exitCode())
	}
}
