package profiler

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Device ranges timed from a work trace (WithWorkTrace) wait in the
// unresolved list as event-timed ones do, without events: each pass the
// collector takes the work the trace reported, places each piece in the
// ranges of its stream that were open when it was issued, and resolves a
// range once the trace has reported work issued on its stream after the
// range ended (a trace reports each stream's work in the order it was
// issued), or at Flush. Work reported while a range it may belong to is
// still open on the host (its work ran before its thread ended it) is
// held and placed again each pass until no such range is open
// (traceState.held).

// maxTraced bounds the trace-timed ranges waiting for their work: past it
// the oldest are delivered without device times (Stats.TraceLost); and
// the pieces of work held for ranges still open (traceState.held): past
// it the oldest are let go (Stats.TraceUnheld).
const maxTraced = 1 << 16

// tracedWork is one piece of work on the profiler's clock.
type tracedWork struct{ issued, start, end time.Duration }

// traceState is what the collector keeps of a work trace; it belongs to
// the profiler's lock.
type traceState struct {
	t *runtime.WorkTrace
	// issued is, per stream handle, the latest issue time of work the
	// trace reported on it: every range of the stream that ended before
	// it has all its work.
	issued map[any]time.Duration
	// complete is the latest time the trace said all work issued
	// before it had been reported (BackendWorkTrace.Collect); ordered
	// holds until it says any: then per-stream order is not relied on.
	complete time.Duration
	ordered  bool
	idle     map[any]bool         // streams found idle before a last forced collect (Close)
	work     map[any][]tracedWork // this pass's work, per stream handle
	// held is work reported while a range it may belong to was still
	// open on the host: issued at floor or later, the oldest start of a
	// range open when the pass began (traceFloor). It is placed again
	// each pass (placing a piece twice in a range changes nothing) until
	// the floor passes it, so that a range whose work ran and was
	// reported before it ended — its host thread slow, or descheduled —
	// still gets it.
	held    map[any][]tracedWork
	nheld   int
	floor   time.Duration
	unheld  uint64               // Stats.TraceUnheld
	groups  map[traceGroup][]int // this pass's waiting ranges, indices into unresolved
	stack   []int
	pending int    // trace-timed ranges in unresolved
	lost    uint64 // Stats.TraceLost
	dropped uint64 // Stats.TraceDropped, as of the last collect
	late    uint64 // Stats.TraceLate
	empty   uint64 // Stats.TraceEmpty
	err     error  // the last Collect error, counted once
}

// traceGroup is one recorder's ranges on one stream: they nest or follow
// one another.
type traceGroup struct {
	owner  *Recorder
	stream any
}

// collectTraceLocked takes the work the trace reported and places it in
// the waiting ranges of its stream (see traceState).
func (p *Profiler) collectTraceLocked(force bool) {
	ts := p.trace
	if ts == nil {
		return
	}
	n := 0
	complete, err := ts.t.Collect(force, func(w runtime.Work) {
		if w.Start.IsZero() || w.End.IsZero() {
			// Unfinished when a forced collect took it: no times, and
			// it says nothing of what else its stream has run.
			return
		}
		issued := p.clock.at(w.Issued)
		if last := ts.issued[w.Stream]; issued > last {
			ts.issued[w.Stream] = issued
		} else if issued < last {
			ts.late++
		}
		ts.work[w.Stream] = append(ts.work[w.Stream], tracedWork{issued, p.clock.at(w.Start), p.clock.at(w.End)})
		n++
	})
	if !complete.IsZero() {
		ts.ordered = false
		ts.complete = max(ts.complete, p.clock.at(complete))
	}
	ts.dropped = ts.t.Dropped()
	if err != nil {
		if ts.err == nil || ts.err.Error() != err.Error() {
			p.resolveErrs.Add(1)
			p.backendError(err)
		}
		ts.err = err
	}
	if n == 0 && ts.nheld == 0 {
		return
	}
	for h, w := range ts.held {
		ts.work[h] = append(ts.work[h], w...)
	}
	for i := range p.unresolved {
		u := &p.unresolved[i]
		if !u.traced {
			continue
		}
		h := u.stream.Handle()
		if len(ts.work[h]) == 0 {
			continue
		}
		g := traceGroup{u.owner, h}
		ts.groups[g] = append(ts.groups[g], i)
	}
	for g, idx := range ts.groups {
		p.placeLocked(idx, ts.work[g.stream])
		clear(idx)
		ts.groups[g] = idx[:0]
	}
	p.holdLocked()
	for h, w := range ts.work {
		ts.work[h] = w[:0]
	}
}

// traceFloor is the earliest a range not yet published can have begun:
// the oldest start of the recorders' open trace-timed ranges, or now. It
// reads the time first: a range whose start a recorder has not yet noted
// began at most as it noted it, before any of its work was issued, so
// its work is issued after that time.
func (p *Profiler) traceFloor() time.Duration {
	floor := p.now()
	for _, r := range p.recorders {
		if v := r.openSince.Load(); v != 0 {
			floor = min(floor, time.Duration(v-1))
		}
	}
	return floor
}

// holdLocked keeps this pass's work (and the work held before) that was
// issued at the floor or later, maxTraced pieces at most: the oldest
// past it are let go and counted.
func (p *Profiler) holdLocked() {
	ts := p.trace
	ts.nheld = 0
	for h, w := range ts.work {
		kept := ts.held[h][:0]
		for _, x := range w {
			if x.issued >= ts.floor {
				kept = append(kept, x)
			}
		}
		if len(kept) == 0 {
			delete(ts.held, h)
			continue
		}
		ts.held[h] = kept
		ts.nheld += len(kept)
	}
	if ts.nheld > maxTraced {
		for _, w := range ts.held {
			slices.SortStableFunc(w, func(a, b tracedWork) int { return cmp.Compare(a.issued, b.issued) })
		}
	}
	for ts.nheld > maxTraced {
		// Let the oldest go, stream by stream.
		var oldest any
		first := time.Duration(math.MaxInt64)
		for h, w := range ts.held {
			if w[0].issued < first {
				oldest, first = h, w[0].issued
			}
		}
		w := ts.held[oldest]
		k := min(len(w), ts.nheld-maxTraced)
		ts.held[oldest] = w[k:]
		if len(w) == k {
			delete(ts.held, oldest)
		}
		ts.nheld -= k
		ts.unheld += uint64(k)
	}
}

// placeLocked adds each piece of work to the ranges of idx (one group's)
// open when it was issued, sweeping both in time order: a range whose
// end precedes the next range's start or the work's issue can hold no
// later work.
func (p *Profiler) placeLocked(idx []int, work []tracedWork) {
	ts := p.trace
	rng := func(i int) *unresolved { return &p.unresolved[i] }
	slices.SortFunc(idx, func(a, b int) int {
		x, y := &rng(a).rec, &rng(b).rec
		if c := cmp.Compare(x.HostStart, y.HostStart); c != 0 {
			return c
		}
		return cmp.Compare(y.HostEnd, x.HostEnd) // the enclosing one first
	})
	slices.SortStableFunc(work, func(a, b tracedWork) int { return cmp.Compare(a.issued, b.issued) })
	stack := ts.stack[:0]
	next := 0
	for _, w := range work {
		for next < len(idx) && rng(idx[next]).rec.HostStart <= w.issued {
			start := rng(idx[next]).rec.HostStart
			for len(stack) > 0 && rng(stack[len(stack)-1]).rec.HostEnd < start {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, idx[next])
			next++
		}
		for len(stack) > 0 && rng(stack[len(stack)-1]).rec.HostEnd < w.issued {
			stack = stack[:len(stack)-1]
		}
		for _, i := range stack {
			u := rng(i)
			if w.issued < u.rec.HostStart || w.issued > u.rec.HostEnd {
				continue
			}
			if !u.hasWork {
				u.hasWork, u.devStart, u.devEnd = true, w.start, w.end
				continue
			}
			u.devStart, u.devEnd = min(u.devStart, w.start), max(u.devEnd, w.end)
		}
	}
	clear(stack)
	ts.stack = stack[:0]
}

// tracedReady reports whether a trace-timed range has all its work: the
// trace said all work issued before the range ended has been reported,
// or (a trace reporting each stream's work in issue order) it reported
// work on the range's stream issued after it ended, or its stream was
// idle before a forced collect (idleLocked). With wait (Flush, once
// its streams are idle and the trace collected by force) every range is.
func (p *Profiler) tracedReady(u *unresolved, wait bool) bool {
	ts, h := p.trace, u.stream.Handle()
	if wait || ts.idle[h] || ts.complete > u.rec.HostEnd {
		return true
	}
	return ts.ordered && ts.issued[h] > u.rec.HostEnd
}

// idleLocked notes the streams of waiting trace-timed ranges that have
// nothing left to run: a forced collect after it has all their work.
func (p *Profiler) idleLocked() {
	if p.trace == nil {
		return
	}
	for i := range p.unresolved {
		u := &p.unresolved[i]
		if u.traced && u.stream.Query() == nil {
			p.trace.idle[u.stream.Handle()] = true
		}
	}
}

// tracedTimes fills rec's device times from its placed work.
func tracedTimes(rec *Record, u *unresolved) {
	if u.hasWork {
		rec.HasDevice, rec.DeviceStart, rec.DeviceEnd = true, u.devStart, max(u.devEnd, u.devStart)
	}
}

// boundTracedLocked delivers the oldest trace-timed ranges without device
// times while more than maxTraced wait.
func (p *Profiler) boundTracedLocked() {
	ts := p.trace
	if ts == nil || ts.pending <= maxTraced {
		return
	}
	over := ts.pending - maxTraced
	kept := p.unresolved[:0]
	for _, u := range p.unresolved {
		if over > 0 && u.traced {
			over--
			ts.pending--
			ts.lost++
			p.collected.Add(1)
			p.keepLocked(u.rec)
			continue
		}
		kept = append(kept, u)
	}
	clear(p.unresolved[len(kept):])
	p.unresolved = kept
}

// syncTracedLocked waits (until ctx ends) for the streams of the
// trace-timed ranges waiting, so that a forced collect then has all their
// work. It returns ctx's error wrapped in StatusTimeout when ctx ends
// first.
func (p *Profiler) syncTracedLocked(ctx context.Context) error {
	if p.trace == nil || p.trace.pending == 0 {
		return nil
	}
	seen := map[*runtime.Stream]bool{}
	for i := range p.unresolved {
		u := &p.unresolved[i]
		if !u.traced || seen[u.stream] {
			continue
		}
		seen[u.stream] = true
		if err := u.stream.Synchronize(ctx); err != nil && runtime.StatusOf(err) == runtime.StatusTimeout {
			return err
		}
	}
	return nil
}
