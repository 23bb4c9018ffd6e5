package runtime

import "sync/atomic"

// Guard sets a current device and restores the previous one on Release
// (a scoped device guard). For CUDA the current device belongs to the
// OS thread, so a goroutine that relies on it should hold
// runtime.LockOSThread (Go's) for the guard's lifetime; trainscope's own
// APIs take the device explicitly and do not rely on it.
type Guard struct {
	impl     Impl
	previous int
	released atomic.Bool
}

// NewGuard makes dev current and remembers the device that was.
func NewGuard(dev Device) (*Guard, error) {
	impl, err := Available(dev.Type)
	if err != nil {
		return nil, err
	}
	if err := checkDevice(impl, dev, "NewGuard"); err != nil {
		return nil, err
	}
	prev, err := impl.GetDevice()
	if err != nil {
		return nil, err
	}
	if err := impl.SetDevice(dev.Index); err != nil {
		return nil, err
	}
	return &Guard{impl: impl, previous: prev}, nil
}

// Previous returns the device index that was current before the guard.
func (g *Guard) Previous() int { return g.previous }

// Release restores the previous device; calling it again does nothing.
func (g *Guard) Release() error {
	if g == nil {
		return nil
	}
	if g.impl == nil {
		return Errorf("GuardRelease", StatusInvalidArgument, "zero Guard (not made by NewGuard)")
	}
	if g.released.Swap(true) {
		return nil
	}
	return g.impl.SetDevice(g.previous)
}
