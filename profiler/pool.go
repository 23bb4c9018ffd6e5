package profiler

import "github.com/trainscope/trainscope/runtime"

// event takes a timing event for s's device: from the owner's cache, else
// by moving the shared free list into the cache in one locked swap, else a
// new one while under the pool's bound; nil when none can be had.
func (r *Recorder) event(s *runtime.Stream) *runtime.Event {
	for {
		if n := len(r.cache); n > 0 {
			ev := r.cache[n-1]
			r.cache = r.cache[:n-1]
			if ev.Device() == s.Device() {
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
		ev, err := runtime.NewEventWith(s.Impl(), s.Device(), runtime.EventDefault)
		if err != nil {
			r.mu.Lock()
			r.events--
			r.mu.Unlock()
			r.recordErrs.Add(1)
			return nil
		}
		return ev
	}
}

// keep returns an event to the pool from the owner's goroutine.
func (r *Recorder) keep(ev *runtime.Event) {
	if ev != nil {
		r.cache = append(r.cache, ev)
	}
}

// releaseAll returns events to the pool from the collector.
func (r *Recorder) releaseAll(evs []*runtime.Event) {
	r.mu.Lock()
	for _, ev := range evs {
		if ev != nil {
			r.free = append(r.free, ev)
		}
	}
	r.mu.Unlock()
}
