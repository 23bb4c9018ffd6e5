package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	in := newInterrupt(context.Background())
	go in.watch(sigs)
	// Signals stay caught until the process is gone: one arriving while
	// it exits must not replace the status.
	os.Exit(runWith(in, os.Args[1:], os.Stdout, os.Stderr))
}
