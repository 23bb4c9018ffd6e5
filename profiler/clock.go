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
	base  int64 // nanotime just after epoch was read
	// skew is base less epoch's monotonic reading (the nanotime
	// time.Now took), measured to some ten nanoseconds: what at
	// subtracts to put a time.Time on this clock exactly enough to tell
	// whether work a backend stamped was issued inside a range.
	skew time.Duration
}

func newMonoClock() monoClock {
	c := monoClock{epoch: time.Now(), base: nanotime()}
	// A time.Time read between two nanotimes a and b has its monotonic
	// reading in [a, b]; the tightest of a few brackets places it.
	best := time.Duration(1<<63 - 1)
	for range 16 {
		a := nanotime()
		t := time.Now()
		b := nanotime()
		if w := time.Duration(b - a); w < best {
			best = w
			mid := a + (b-a)/2
			// mono(t) − mono(epoch) = t.Sub(epoch), so
			// base − mono(epoch) = base − mono(t) + t.Sub(epoch).
			c.skew = time.Duration(c.base-mid) + t.Sub(c.epoch)
		}
	}
	return c
}

// at places a time.Time with a monotonic reading (time.Now's, a
// backend's) on the clock.
func (c monoClock) at(t time.Time) time.Duration { return t.Sub(c.epoch) - c.skew }

func (c monoClock) since() time.Duration { return time.Duration(nanotime() - c.base) }
