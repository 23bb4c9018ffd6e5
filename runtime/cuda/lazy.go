package cuda

import (
	"sync"
	"sync/atomic"
)

// lazyLoad is something loaded at its first use (the driver library, a
// device's kernels) and kept: once it has loaded, or has failed in a way
// that trying again cannot change (a library missing, a kernel image the
// driver refuses). A failure that a later call may not meet (the device
// short of memory or busy) is returned without being kept, and the next
// call tries again. Reading a kept result allocates nothing.
type lazyLoad[T any] struct {
	mu   sync.Mutex
	kept atomic.Pointer[loadResult[T]]
}

type loadResult[T any] struct {
	v   *T
	err error
}

// get returns the kept result, or runs load and keeps its result unless
// load says keep false. Callers are serialised while load runs.
func (l *lazyLoad[T]) get(load func() (v *T, keep bool, err error)) (*T, error) {
	if r := l.kept.Load(); r != nil {
		return r.v, r.err
	}
	return l.slow(load)
}

func (l *lazyLoad[T]) slow(load func() (*T, bool, error)) (*T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.kept.Load(); r != nil {
		return r.v, r.err
	}
	v, keep, err := load()
	if err != nil && !keep {
		return nil, err
	}
	l.kept.Store(&loadResult[T]{v: v, err: err})
	return v, err
}

// loaded returns the loaded value, or nil where it has not loaded (yet).
func (l *lazyLoad[T]) loaded() *T {
	if r := l.kept.Load(); r != nil {
		return r.v
	}
	return nil
}

// retryable reports whether a failed CUDA call (runtime or driver API:
// they number these codes alike) may succeed when made again: the device
// was short of memory, busy (exclusive-process mode) or timed out. Other
// failures of a load (no device, a driver too old, an image the driver
// refuses) stay.
func retryable(code int32) bool {
	switch code {
	case cudaErrorMemoryAllocation, cudaErrorDevicesUnavailable, cudaErrorTimeout:
		return true
	}
	return false
}
