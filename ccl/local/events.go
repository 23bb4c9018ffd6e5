package local

import (
	"reflect"
	"sync"

	"github.com/trainscope/trainscope/runtime"
)

// maxPooledEvents bounds the events an endpoint keeps for reuse. A rank
// has a few transfers in flight at a time (a pipeline step's sends and
// receives of one round, a group's collectives); more than this are
// destroyed when they come back.
const maxPooledEvents = 64

// eventPool keeps the untimed events a shared endpoint's transfers have
// finished with, for its next ones. Creating and destroying an event are
// driver calls of a microsecond or more on CUDA, and ones the driver holds
// back while another thread waits in it behind queued work (docs/gpu.md),
// which recording an event is not; a pipeline step makes several
// transfers a microbatch.
//
// An event goes back to the pool where it used to be destroyed: once the
// last stream that waits for it has been told to (StreamWaitEvent waits
// for the record made before the call, so a later record of the same
// event does not move what it waits for) and no host call will look at it
// again.
type eventPool struct {
	mu      sync.Mutex
	impl    runtime.Impl // the backend of the events in free
	free    []*runtime.Event
	retired bool // the endpoint is gone: events coming back are destroyed
}

// get returns an untimed event of s's device and backend, pooled where
// one is free.
func (p *eventPool) get(s *runtime.Stream) (*runtime.Event, error) {
	impl := s.Impl()
	p.mu.Lock()
	if n := len(p.free); n > 0 && sameImpl(p.impl, impl) {
		e := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	return runtime.NewEventWith(impl, s.Device(), runtime.EventDisableTiming)
}

// put gives back e, made by get for a stream of impl; nil is ignored. An
// event of another backend than the pooled ones, one beyond the bound, or
// one coming back after retire is destroyed.
func (p *eventPool) put(impl runtime.Impl, e *runtime.Event) {
	if e == nil {
		return
	}
	p.mu.Lock()
	if !p.retired && len(p.free) < maxPooledEvents && comparableImpl(impl) {
		if len(p.free) == 0 {
			p.impl = impl
		}
		if sameImpl(p.impl, impl) {
			p.free = append(p.free, e)
			p.mu.Unlock()
			return
		}
	}
	p.mu.Unlock()
	_ = e.Destroy()
}

// retire destroys the pooled events; those still in use are destroyed
// when they come back.
func (p *eventPool) retire() {
	p.mu.Lock()
	free := p.free
	p.free, p.retired, p.impl = nil, true, nil
	p.mu.Unlock()
	for _, e := range free {
		_ = e.Destroy()
	}
}

// comparableImpl reports whether impl can be compared with ==: a backend
// of a type that cannot (a struct holding a slice, say) is never pooled.
func comparableImpl(impl runtime.Impl) bool {
	return impl != nil && reflect.ValueOf(impl).Comparable()
}

func sameImpl(a, b runtime.Impl) bool {
	return comparableImpl(a) && comparableImpl(b) && a == b
}
