// Command profile-run trains trainscope's built-in pipelined model on the
// best available backend and reports where each step's time went.
//
// Usage:
//
//	profile-run [flags]
//
// Run `profile-run -h` for the flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
