// Command profile-run trains trainscope's built-in pipelined model on the
// best available backend and reports where each step's time went.
//
// Usage:
//
//	profile-run [flags]
//
// Run `profile-run -h` for the flags.
package main
