package goid

import "github.com/petermattis/goid"

// Get returns the runtime's number for the calling goroutine, the one a
// stack trace prints ("goroutine 18 [running]"). Numbers are never reused,
// so a goroutine that exits with a group open cannot pass that group on to
// a later goroutine. On the common platforms it is read from the
// goroutine's descriptor in a few instructions.
func Get() uint64 { return uint64(goid.Get()) }
