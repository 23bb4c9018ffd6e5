package profiler

import (
	"sync/atomic"

	"github.com/trainscope/trainscope/runtime"
)

// pooledEvent is a timing event of a recorder's pool and the number of
// references to it: the records that use it as their start or end, the
// recorder while a range may start or end on it (Recorder.latest, and a
// stream's past events, given up first when the pool runs dry), and
// whoever has just taken it from the pool. It goes back to the pool when
// the last one is dropped.
type pooledEvent struct {
	*runtime.Event
	refs atomic.Int32
}

// event takes a timing event for s's device, holding one reference: from
// the owner's cache, else by moving the shared free list into the cache in
// one locked swap, else a new one while under the pool's bound; nil when
// none can be had.
func (r *Recorder) event(s *runtime.Stream) *pooledEvent {
	forgot := false
	for {
		if n := len(r.cache); n > 0 {
			ev := r.cache[n-1]
			r.cache = r.cache[:n-1]
			if ev.Device() == s.Device() {
				ev.refs.Store(1)
				return ev
			}
			// A recorder normally times one device; an event of another
			// device is destroyed rather than kept.
			_ = ev.Destroy()
			r.mu.Lock()
			r.events--
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		if len(r.free) > 0 {
			r.cache, r.free = r.free, r.cache
			r.mu.Unlock()
			continue
		}
		if r.events >= r.p.cfg.eventPool {
			r.mu.Unlock()
			if !forgot {
				// The streams' past events are only there to be shared:
				// a range's own event comes first.
				forgot = true
				r.forgetPast()
				continue
			}
			r.eventDrops.Add(1)
			r.p.wake()
			return nil
		}
		r.events++
		created := r.events
		r.mu.Unlock()
		if created > r.p.cfg.eventPool/2 {
			// Running through the pool: resolved events should come back.
			r.p.wake()
		}
		rev, err := runtime.NewEventWith(s.Impl(), s.Device(), runtime.EventDefault)
		if err != nil {
			r.mu.Lock()
			r.events--
			r.mu.Unlock()
			r.recordErrs.Add(1)
			r.p.backendError(err)
			return nil
		}
		ev := &pooledEvent{Event: rev}
		ev.refs.Store(1)
		return ev
	}
}

// drop releases one reference from the owner's goroutine; the last one
// returns the event to the pool.
func (r *Recorder) drop(ev *pooledEvent) {
	if ev != nil && ev.refs.Add(-1) == 0 {
		r.cache = append(r.cache, ev)
	}
}

// releaseAll releases one reference to each of evs from the collector;
// those that were the last go back to the pool.
func (r *Recorder) releaseAll(evs []*pooledEvent) {
	r.mu.Lock()
	for _, ev := range evs {
		if ev != nil && ev.refs.Add(-1) == 0 {
			r.free = append(r.free, ev)
		}
	}
	r.mu.Unlock()
}
