package ccl

import (
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// ResetFactories forgets the process-wide factories, for tests that need
// a fresh state.
func ResetFactories() { resetFactories() }

// AddFactory installs f as the process-wide factory of t.
func AddFactory(t runtime.DeviceType, f *ProcessGroupFactory) {
	factories.mu.Lock()
	factories.m[t] = f
	factories.mu.Unlock()
}

// SetDestroyTimeout shortens how long Destroy waits for a rank's pending
// work before it aborts; the returned function restores it.
func SetDestroyTimeout(d time.Duration) (restore func()) {
	saved := destroyTimeout
	destroyTimeout = d
	return func() { destroyTimeout = saved }
}

// CompletionSlots is the length of a rank's ring of completion events.
const CompletionSlots = completionSlots
