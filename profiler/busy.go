package profiler

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Busy and idle time of a step: the one definition the text report, the
// metrics and any later analysis use.
//
// A rank is busy while one of its streams computes: the device intervals
// of its compute ranges (device ranges in the forward, backward or
// optimizer phase, and kernels reported by the device's activity tracing,
// KindKernel), less, on the same stream, the device intervals of
// transfers (collectives and point-to-point) and of waits for input
// (device ranges in the communication phase) — a compute range whose
// stream waits for a peer is not computing meanwhile. The streams' busy
// intervals are united, clipped to the step's host interval, and summed.
// Idle is the rest of the step's wall time: the pipeline bubble, waits,
// transfers that nothing overlaps, host time, loading data. Host time never
// counts as busy, nor does a device range timed on the host only.
//
// Records are grouped into steps by rank and step label (Recorder.SetStep)
// and a step is accounted when its step range (a top-level range named
// StepName) arrives.

// Activity is what a record's device interval counts as in busy time.
type Activity uint8

// Activities.
const (
	// ActivityNone: not part of busy time (host ranges, device ranges
	// outside the compute phases, such as loading a batch).
	ActivityNone Activity = iota
	// ActivityCompute: a device range in the forward, backward or
	// optimizer phase, or a traced kernel (KindKernel).
	ActivityCompute
	// ActivityTransfer: a collective or point-to-point transfer.
	ActivityTransfer
	// ActivityWait: a device range in the communication phase — a wait
	// for, or a copy of, an action's input.
	ActivityWait
)

var activityNames = [...]string{ActivityNone: "none", ActivityCompute: "compute", ActivityTransfer: "transfer", ActivityWait: "wait"}

func (a Activity) String() string {
	if int(a) < len(activityNames) {
		return activityNames[a]
	}
	return "activity?"
}

// Activity classifies r for busy time; a record without a device
// interval is ActivityNone whatever it is.
func (r *Record) Activity() Activity {
	if !r.HasDevice {
		return ActivityNone
	}
	switch {
	case r.Kind == KindCollective || r.Kind == KindP2P:
		return ActivityTransfer
	case r.Kind == KindKernel:
		return ActivityCompute
	case r.Kind != KindDevice:
		return ActivityNone
	case r.Phase == Comm:
		return ActivityWait
	case r.Phase == Forward || r.Phase == Backward || r.Phase == Optimizer:
		return ActivityCompute
	}
	return ActivityNone
}

// BusyDefinition says in one line how busy time is computed, for report
// headers and metric help.
const BusyDefinition = "busy: device time of forward, backward and optimizer ranges and of traced kernels, less transfers and input waits on the same stream; idle: the rest of the step"

// StepTime is one rank's accounted step.
type StepTime struct {
	Rank       int
	Device     runtime.Device
	Stage      int // the step range's stage label, None without one
	Step       int // the step label, None without one
	Start, End time.Duration
	Busy       time.Duration
	// Computed reports that the step had a device-timed compute range
	// (ActivityCompute), so Busy was measured; without one (a wrapped
	// command whose kernels were not traced, only its NCCL operations)
	// Busy is 0 for want of a measure, not a measured 0.
	Computed bool
	// CutShort: the step range was cut short (Record.CutShort), so the
	// step's figures are not a step's; statistics leave it out.
	CutShort bool
}

// Wall is the step's host wall time.
func (s StepTime) Wall() time.Duration { return s.End - s.Start }

// Idle is Wall − Busy.
func (s StepTime) Idle() time.Duration { return s.Wall() - s.Busy }

// StepAccountant turns a stream of records, in any order within a batch,
// into accounted steps. It keeps only the records of steps not yet
// accounted, and a bounded memory of recent steps; use one per stream of
// records, from one goroutine (it has no lock).
type StepAccountant struct {
	open  map[stepKey]*openStep
	ranks map[rankKey]*rankAccount
	ready []*openStep
	free  []*openStep
	seq   uint64
	out   []interval
	// oversized lists the open steps whose work passed maxStepWork
	// before their step range arrived; FinishAfter gives them up.
	oversized []stepKey
	// scratch is busy time's working room, from step to step.
	scratch busyScratch
}

type rankKey struct {
	dev  runtime.Device
	rank int32
}

// rankAccount is what the accountant keeps per device and rank: the step
// ranges seen, so FinishAfter can wait for later steps, and the latest
// accounted steps, to recognise late records, in a ring indexed by step.
type rankAccount struct {
	stepRanges uint64
	done       [doneSteps]doneStep
}

// maxOpenSteps bounds the steps waiting for their step range, and
// doneSteps the accounted steps remembered per device and rank to
// recognise late records.
const (
	maxOpenSteps = 4096
	doneSteps    = 64
)

// maxStepWork bounds the device intervals kept for one step whose step
// range has not arrived. Records whose step range never comes under the
// same label — a run without step ranges, where none carries a step
// label — would otherwise all be kept for the whole run; such a step is
// given up (abandoned) once it holds more.
const maxStepWork = 1 << 20

type stepKey struct {
	dev  runtime.Device
	rank int32
	step int32
}

type interval struct{ start, end time.Duration }

type streamInterval struct {
	stream uint64
	act    Activity
	interval
}

type doneStep struct {
	step int32
	ok   bool
	end  time.Duration
}

type openStep struct {
	key      stepKey
	seq      uint64
	arrived  uint64 // stepRanges of its rank when its step range arrived
	haveStep bool
	cutShort bool
	stage    int16
	start    time.Duration
	end      time.Duration
	work     []streamInterval
}

// NewStepAccountant returns an empty accountant.
func NewStepAccountant() *StepAccountant {
	return &StepAccountant{open: make(map[stepKey]*openStep), ranks: make(map[rankKey]*rankAccount)}
}

func (a *StepAccountant) rank(k stepKey) *rankAccount {
	rk := rankKey{k.dev, k.rank}
	ra, ok := a.ranks[rk]
	if !ok {
		ra = new(rankAccount)
		a.ranks[rk] = ra
	}
	return ra
}

// doneOf is where the accounted step k would be remembered.
func (ra *rankAccount) doneOf(k stepKey) *doneStep {
	return &ra.done[uint32(k.step)%doneSteps]
}

func (a *StepAccountant) get(k stepKey) *openStep {
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
	*s = openStep{key: k, seq: a.seq, work: s.work[:0]}
	a.open[k] = s
	return s
}

// Add takes one record. It reports late when r would have counted in the
// busy time of a step already accounted (its device interval arrived
// after the batch that brought its step range); it is then left out.
func (a *StepAccountant) Add(r *Record) (late bool) {
	k := stepKey{dev: r.Device, rank: int32(r.Rank), step: r.Step}
	if r.Depth == 0 && r.Name == StepName {
		// A step range is delivered once; a known key is another
		// step under the same label: a new recorder's (a second run
		// on one profiler counts its steps from 0 again), or the
		// next of a trainer that labels no steps.
		ra := a.rank(k)
		if d := ra.doneOf(k); d.ok && d.step == k.step {
			d.ok = false
		}
		s := a.get(k)
		if s.haveStep {
			// A second step range under one key before the first was
			// accounted: steps without a step label, or two runs'
			// steps of one number in one batch. The first keeps its
			// place in ready but takes no more work; the work that
			// started after it ended is this step's.
			prev := s
			delete(a.open, k)
			s = a.get(k)
			kept := prev.work[:0]
			for _, w := range prev.work {
				if w.start >= prev.end {
					s.work = append(s.work, w)
				} else {
					kept = append(kept, w)
				}
			}
			prev.work = kept
		}
		ra.stepRanges++
		s.haveStep, s.stage, s.start, s.end = true, r.Stage, r.HostStart, r.HostEnd
		s.cutShort = r.CutShort
		s.arrived = ra.stepRanges
		a.ready = append(a.ready, s)
		return false
	}
	act := r.Activity()
	if act == ActivityNone {
		return false
	}
	// Late if it started before the accounted step of its key ended;
	// otherwise it belongs to a later step with the same key.
	if d := a.rank(k).doneOf(k); d.ok && d.step == k.step {
		if r.DeviceStart < d.end {
			return true
		}
		d.ok = false
	}
	s := a.get(k)
	s.work = append(s.work, streamInterval{stream: r.Stream, act: act, interval: interval{r.DeviceStart, r.DeviceEnd}})
	if !s.haveStep && len(s.work) == maxStepWork+1 {
		a.oversized = append(a.oversized, k)
	}
	return false
}

// Finish accounts the steps whose step range has arrived, calling emit
// for each, and gives up on the oldest steps that never got one once too
// many wait, and on a step still without one that holds more than 2^20
// device intervals, calling abandoned for each (nil to ignore).
func (a *StepAccountant) Finish(emit func(StepTime), abandoned func(dev runtime.Device, rank int)) {
	a.FinishAfter(0, emit, abandoned)
}

// FinishAfter is Finish for a stream whose device ranges may arrive
// after their step range (device work the host did not wait for within
// the step): it accounts a step only once `later` later step ranges of
// the same device and rank have arrived, so the step's device ranges
// delivered meanwhile still count in its busy time. The steps it holds
// back stay in memory (at most `later` per rank) and Ready reports them;
// Finish, or FinishAfter(0, …), accounts them all.
func (a *StepAccountant) FinishAfter(later int, emit func(StepTime), abandoned func(dev runtime.Device, rank int)) {
	held := a.ready[:0]
	for _, s := range a.ready {
		ra := a.rank(s.key)
		if later > 0 && ra.stepRanges-s.arrived < uint64(later) {
			held = append(held, s)
			continue
		}
		emit(a.stepTime(s))
		a.retire(s)
		*ra.doneOf(s.key) = doneStep{step: s.key.step, ok: true, end: s.end}
	}
	clear(a.ready[len(held):])
	a.ready = held
	for _, k := range a.oversized {
		if s, ok := a.open[k]; ok && !s.haveStep && len(s.work) > maxStepWork {
			if abandoned != nil {
				abandoned(k.dev, int(k.rank))
			}
			a.retire(s)
		}
	}
	a.oversized = a.oversized[:0]
	if len(a.open) > maxOpenSteps {
		cut := a.seq - maxOpenSteps/2
		for k, s := range a.open {
			// A held step has its step range: it is not abandoned.
			if s.seq < cut && !s.haveStep {
				if abandoned != nil {
					abandoned(k.dev, int(k.rank))
				}
				a.retire(s)
			}
		}
	}
}

// Ready calls emit for each step that FinishAfter holds back, as it
// would be accounted now, without accounting it.
func (a *StepAccountant) Ready(emit func(StepTime)) {
	for _, s := range a.ready {
		emit(a.stepTime(s))
	}
}

func (a *StepAccountant) stepTime(s *openStep) StepTime {
	return StepTime{
		Rank: int(s.key.rank), Device: s.key.dev, Stage: int(s.stage), Step: int(s.key.step),
		Start: s.start, End: s.end, Busy: a.busy(s.work, s.start, s.end),
		Computed: computed(s.work), CutShort: s.cutShort,
	}
}

func (a *StepAccountant) retire(s *openStep) {
	if a.open[s.key] == s {
		delete(a.open, s.key)
	}
	if cap(s.work) > 4096 {
		s.work = nil // do not hold on to an outsized step
	}
	a.free = append(a.free, s)
}

// computed reports whether work holds a compute interval.
func computed(work []streamInterval) bool {
	for _, w := range work {
		if w.act == ActivityCompute {
			return true
		}
	}
	return false
}

// busy computes a step's busy time from its intervals (sorted in place):
// per stream, compute less transfers and waits; then the union across
// streams, clipped to [lo, hi].
func (a *StepAccountant) busy(work []streamInterval, lo, hi time.Duration) time.Duration {
	out := busyParts(a.out[:0], work, &a.scratch)
	busy := unionLength(out, lo, hi)
	a.out = out[:0]
	return busy
}

// busyScratch is working room for busy time, reused from call to call.
type busyScratch struct {
	work           []streamInterval
	parts          []interval
	compute, other []interval
}

// busyPool holds BusyIntervals' working room: the pipeline analysis calls
// it several times a step, and allocating its slices anew each time was a
// third of the analysis's allocated bytes.
var busyPool = sync.Pool{New: func() any { return new(busyScratch) }}

// busyParts appends to out, per stream, the parts of its compute
// intervals that no transfer or wait on the same stream covers: the
// pieces whose union is busy time. It sorts work in place.
func busyParts(out []interval, work []streamInterval, sc *busyScratch) []interval {
	slices.SortFunc(work, func(x, y streamInterval) int {
		if c := cmp.Compare(x.stream, y.stream); c != 0 {
			return c
		}
		return cmp.Compare(x.start, y.start)
	})
	for i := 0; i < len(work); {
		j := i
		for j < len(work) && work[j].stream == work[i].stream {
			j++
		}
		out = computeLessOther(out, work[i:j], sc)
		i = j
	}
	return out
}

// Interval is a span of time [Start, End) on the profiler's clock.
type Interval struct{ Start, End time.Duration }

// Len is End − Start, or 0 for an empty or inverted interval.
func (iv Interval) Len() time.Duration { return max(iv.End-iv.Start, 0) }

// StreamWork is one record's device interval on its stream, classified
// for busy time (Record.Activity): what BusyIntervals takes.
type StreamWork struct {
	Stream   uint64
	Activity Activity
	Interval
}

// Work returns r's device interval as busy time sees it, and false when
// r does not count in busy time (ActivityNone).
func (r *Record) Work() (StreamWork, bool) {
	act := r.Activity()
	if act == ActivityNone {
		return StreamWork{}, false
	}
	return StreamWork{Stream: r.Stream, Activity: act, Interval: Interval{r.DeviceStart, r.DeviceEnd}}, true
}

// BusyIntervals appends to dst the busy intervals of work by the one
// definition of busy time (see BusyDefinition): per stream, compute less
// the transfers and waits on that stream, then the union across streams.
// What it appends is sorted by start and disjoint, and its total length
// clipped to a step's host interval is that step's StepTime.Busy; work
// with ActivityNone entries is ignored. work is not modified.
func BusyIntervals(dst []Interval, work []StreamWork) []Interval {
	sc := busyPool.Get().(*busyScratch)
	defer busyPool.Put(sc)
	w := sc.work[:0]
	for _, x := range work {
		if x.Activity != ActivityNone {
			w = append(w, streamInterval{stream: x.Stream, act: x.Activity, interval: interval{x.Start, x.End}})
		}
	}
	sc.work = w
	parts := busyParts(sc.parts[:0], w, sc)
	sc.parts = parts
	slices.SortFunc(parts, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	n0 := len(dst)
	for _, x := range parts {
		if x.end <= x.start {
			continue
		}
		if n := len(dst); n > n0 && x.start <= dst[n-1].End {
			dst[n-1].End = max(dst[n-1].End, x.end)
			continue
		}
		dst = append(dst, Interval{x.start, x.end})
	}
	return dst
}

// computeLessOther appends to out the parts of one stream's compute
// intervals that no transfer or wait on that stream covers. work is
// sorted by start; sc lends the merged lists' room.
func computeLessOther(out []interval, work []streamInterval, sc *busyScratch) []interval {
	compute, other := sc.compute[:0], sc.other[:0]
	for _, w := range work {
		if w.act == ActivityCompute {
			compute = appendMerged(compute, w.interval)
		} else {
			other = appendMerged(other, w.interval)
		}
	}
	// Both lists are sorted and disjoint: walk them together.
	k := 0
	for _, c := range compute {
		s := c.start
		for k < len(other) && other[k].end <= s {
			k++
		}
		for m := k; m < len(other) && other[m].start < c.end; m++ {
			if other[m].start > s {
				out = append(out, interval{s, other[m].start})
			}
			s = max(s, other[m].end)
		}
		if s < c.end {
			out = append(out, interval{s, c.end})
		}
	}
	sc.compute, sc.other = compute[:0], other[:0]
	return out
}

// appendMerged appends x to a list of disjoint intervals sorted by start,
// given x starts no earlier than the last one, merging overlaps.
func appendMerged(list []interval, x interval) []interval {
	if x.end <= x.start {
		return list
	}
	if n := len(list); n > 0 && x.start <= list[n-1].end {
		list[n-1].end = max(list[n-1].end, x.end)
		return list
	}
	return append(list, x)
}

// unionLength is the length of the union of the intervals, each clipped
// to [lo, hi]. It sorts iv in place.
func unionLength(iv []interval, lo, hi time.Duration) time.Duration {
	slices.SortFunc(iv, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	var total, curS, curE time.Duration
	open := false
	for _, x := range iv {
		s, e := max(x.start, lo), min(x.end, hi)
		if e <= s {
			continue
		}
		switch {
		case !open:
			curS, curE, open = s, e, true
		case s > curE:
			total += curE - curS
			curS, curE = s, e
		default:
			curE = max(curE, e)
		}
	}
	if open {
		total += curE - curS
	}
	return total
}
