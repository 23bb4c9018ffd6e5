package prom

import (
	"cmp"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Busy and idle time per step.
//
// A step's busy time is the union of the device intervals of the forward
// and backward ranges directly inside its "step" range, clipped to the
// step's host interval; its idle time is the step's host wall time minus
// that. Both need the whole step: the actions usually arrive before the
// step range (they end first), but a device range arrives only once its
// events complete, possibly after. A step is accounted at the end of the
// batch that brings its step range. The profiler resolves every device
// range whose events have completed in the same pass as it collects the
// host ranges that ended, so for a loop that waits for the step's device
// work before ending the step (the built-in trainer does, to read the
// loss) every action is there by then. An action arriving after its step
// was accounted is counted as late instead of busy.

// maxOpenSteps bounds the steps waiting for their step range, and
// maxDoneSteps the accounted steps remembered to recognise late actions.
const (
	maxOpenSteps = 4096
	maxDoneSteps = 4096
)

type accKey struct {
	dev  runtime.Device
	rank int32
	id   uint64 // the step range's record ID
}

type interval struct{ start, end time.Duration }

type doneStep struct {
	seq uint64        // order of accounting, for eviction
	end time.Duration // the step's host end
}

type openStep struct {
	key        accKey
	seq        uint64 // order of arrival, for eviction
	haveStep   bool
	stage      int16
	start, end time.Duration
	actions    []interval
}

type stepAccounting struct {
	open  map[accKey]*openStep
	done  map[accKey]doneStep // recently accounted steps
	ready []*openStep         // steps whose step range came in this batch
	free  []*openStep
	seq   uint64
}

func (a *stepAccounting) init() {
	a.open = make(map[accKey]*openStep)
	a.done = make(map[accKey]doneStep)
}

func (a *stepAccounting) get(k accKey) *openStep {
	if s, ok := a.open[k]; ok {
		return s
	}
	var s *openStep
	if n := len(a.free); n > 0 {
		s, a.free = a.free[n-1], a.free[:n-1]
	} else {
		s = new(openStep)
	}
	a.seq++
	*s = openStep{key: k, seq: a.seq, actions: s.actions[:0]}
	a.open[k] = s
	return s
}

// step takes a step range.
func (a *stepAccounting) step(r *profiler.Record) {
	k := accKey{dev: r.Device, rank: int32(r.Rank), id: r.ID}
	// Record IDs are unique per recorder, not per rank: a later recorder
	// for the same rank (a second training run on one profiler) starts
	// again from 1. A step range is never delivered twice, so a known key
	// means a new recorder's step.
	delete(a.done, k)
	s := a.get(k)
	if s.haveStep {
		return
	}
	s.haveStep, s.stage, s.start, s.end = true, r.Stage, r.HostStart, r.HostEnd
	a.ready = append(a.ready, s)
}

// action takes a forward or backward range; it reports whether the range
// came after its step was accounted.
func (a *stepAccounting) action(r *profiler.Record) (late bool) {
	k := accKey{dev: r.Device, rank: int32(r.Rank), id: r.Parent}
	// Late if it started before the accounted step with its parent's key
	// ended; otherwise it belongs to a later recorder's step of that key.
	if d, done := a.done[k]; done && r.DeviceStart < d.end {
		return true
	}
	s := a.get(k)
	s.actions = append(s.actions, interval{r.DeviceStart, r.DeviceEnd})
	return false
}

// finish accounts the steps whose step range came in this batch, and
// gives up on the oldest steps that never got one once too many wait.
func (a *stepAccounting) finish(account func(dev runtime.Device, rank int, stage int16, busy, idle float64), unaccounted func(dev runtime.Device, rank int)) {
	for _, s := range a.ready {
		busy := busyTime(s.actions, s.start, s.end)
		account(s.key.dev, int(s.key.rank), s.stage, busy.Seconds(), (s.end - s.start - busy).Seconds())
		a.retire(s)
		a.seq++
		a.done[s.key] = doneStep{seq: a.seq, end: s.end}
	}
	clear(a.ready)
	a.ready = a.ready[:0]
	if len(a.open) > maxOpenSteps {
		cut := a.seq - maxOpenSteps/2
		for k, s := range a.open {
			if s.seq < cut {
				unaccounted(k.dev, int(k.rank))
				a.retire(s)
			}
		}
	}
	if len(a.done) > maxDoneSteps {
		cut := a.seq - maxDoneSteps/2
		for k, d := range a.done {
			if d.seq < cut {
				delete(a.done, k)
			}
		}
	}
}

func (a *stepAccounting) retire(s *openStep) {
	delete(a.open, s.key)
	if cap(s.actions) > 1024 {
		s.actions = nil // do not hold on to an outsized step
	}
	a.free = append(a.free, s)
}

// busyTime is the length of the union of the intervals, each clipped to
// [start, end]. It sorts the intervals in place.
func busyTime(iv []interval, start, end time.Duration) time.Duration {
	slices.SortFunc(iv, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	var busy time.Duration
	curS, curE := time.Duration(0), time.Duration(0)
	open := false
	for _, x := range iv {
		s, e := max(x.start, start), min(x.end, end)
		if e <= s {
			continue
		}
		switch {
		case !open:
			curS, curE, open = s, e, true
		case s > curE:
			busy += curE - curS
			curS, curE = s, e
		default:
			curE = max(curE, e)
		}
	}
	if open {
		busy += curE - curS
	}
	return busy
}
