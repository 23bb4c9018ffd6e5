package ccl

import "github.com/trainscope/trainscope/runtime"

// ResetFactories forgets the process-wide factories, for tests that need
// a fresh state.
func ResetFactories() { resetFactories() }

// AddFactory installs f as the process-wide factory of t.
func AddFactory(t runtime.DeviceType, f *ProcessGroupFactory) {
	factories.mu.Lock()
	factories.m[t] = f
	factories.mu.Unlock()
}
