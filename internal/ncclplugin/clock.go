package ncclplugin

import (
	"time"

	"golang.org/x/sys/unix"
)

// hostClock places the plugin's CLOCK_MONOTONIC nanoseconds on a
// profiler's clock (durations since its Epoch). Go's monotonic clock
// reading, which time.Since uses, is CLOCK_MONOTONIC on Linux minus an
// offset fixed at process start, so one pair of readings taken together
// gives the mapping for the whole run: both clocks run at the same rate
// and neither jumps. The pair with the shortest gap of several is kept;
// its error is half that gap (well under a microsecond).
type hostClock struct {
	base time.Duration // time since Epoch at the sample
	mono int64         // CLOCK_MONOTONIC ns at the same moment
}

func monotonicNow() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return ts.Nano(), nil
}

func newHostClock(epoch time.Time) (hostClock, error) {
	var best hostClock
	gap := time.Duration(1<<63 - 1)
	for range 8 {
		a := time.Since(epoch)
		m, err := monotonicNow()
		if err != nil {
			return hostClock{}, err
		}
		b := time.Since(epoch)
		if b-a < gap {
			gap = b - a
			best = hostClock{base: a + (b-a)/2, mono: m}
		}
	}
	return best, nil
}

// at maps a CLOCK_MONOTONIC reading (ns) onto the profiler's clock.
func (c hostClock) at(monoNs int64) time.Duration {
	return c.base + time.Duration(monoNs-c.mono)
}
