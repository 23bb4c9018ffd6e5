package profiler

import (
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the one time.Now's monotonic
// reading comes from. Reading it directly skips time.Since's bookkeeping,
// which matters at two readings per range; the runtime keeps this name
// available to other packages for exactly this use.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// monoClock reads the monotonic clock relative to an epoch.
type monoClock struct {
	epoch time.Time
	base  int64 // nanotime at epoch
}

func newMonoClock() monoClock {
	return monoClock{epoch: time.Now(), base: nanotime()}
}

func (c monoClock) since() time.Duration { return time.Duration(nanotime() - c.base) }
