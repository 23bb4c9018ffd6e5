package otel

import (
	"math"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Environment variables of the tail policy (Config.KeepFirst,
// Config.KeepSlowest, Config.KeepSlowestMin); "0" turns a part off.
const (
	EnvKeepFirst      = "TRAINSCOPE_TRACES_KEEP_FIRST"
	EnvKeepSlowest    = "TRAINSCOPE_TRACES_KEEP_SLOWEST"
	EnvKeepSlowestMin = "TRAINSCOPE_TRACES_KEEP_SLOWEST_MIN"
)

// Bounds of what the tail policy holds.
const (
	// tailMaxOpen is the most steps awaiting their decision; beyond it the
	// oldest is decided with what has arrived (Stats.Forced).
	tailMaxOpen = 64
	// tailMemory is how many recent decisions are remembered for records
	// that arrive after their step was decided (device ranges end late).
	tailMemory = 4096
)

// tailPolicy is the state of the tail policy: the steps whose decision
// waits for their end on every rank, the decisions taken, and the
// distribution of step durations so far. The Exporter's mutex guards it.
type tailPolicy struct {
	first   int     // the first steps opened are kept
	share   float64 // the slowest share of steps is kept...
	atLeast int     // ...and at least this many of the slowest so far
	maxHeld int     // spans held at once (Config.QueueSize)

	ranks   map[int]int32 // every rank seen: the highest step of its records
	open    map[int32]*openStep
	opened  int // steps opened so far
	decided map[int32]bool
	recent  []int32 // the remembered decisions, a ring
	next    int     // where the ring's next entry goes
	upTo    int32   // the highest step decided, once any is
	any     bool
	durs    durations
	held    int // spans held by open steps
}

// openStep is a step awaiting its decision.
type openStep struct {
	head   bool // the ratio sampler keeps it
	first  bool // among the first steps
	pinned bool // found slow before it ended (StepTrace): kept
	// recs and analysis are held until the decision; spans counts them.
	recs     []profiler.Record
	analysis []analysisSpan
	spans    int
	ended    map[int]bool // ranks whose step range arrived
	lo, hi   time.Duration
	timed    bool // lo and hi are from step ranges
	seen     bool // lo and hi are set
}

// kept says the step is kept whatever its duration: its records need not
// wait.
func (o *openStep) kept() bool { return o.head || o.first || o.pinned }

func (o *openStep) duration() time.Duration {
	if !o.seen {
		return 0
	}
	return o.hi - o.lo
}

// note widens the step's time span by r: from its step ranges once one
// has arrived, else from any of its records.
func (o *openStep) note(r *profiler.Record) {
	isStep := r.Depth == 0 && r.Name == profiler.StepName
	if isStep {
		o.ended[r.Rank] = true
	}
	switch {
	case isStep && !o.timed:
		o.lo, o.hi, o.timed, o.seen = r.HostStart, r.HostEnd, true, true
	case isStep || (!o.timed && o.seen):
		o.lo, o.hi = min(o.lo, r.HostStart), max(o.hi, r.HostEnd)
	case !o.timed:
		o.lo, o.hi, o.seen = r.HostStart, r.HostEnd, true
	}
}

// newTailPolicy applies the Config and the environment; nil when the
// sampler keeps every step or none, or every part is off.
func newTailPolicy(cfg Config, s stepSampler) (*tailPolicy, error) {
	t := &tailPolicy{first: cfg.KeepFirst, share: cfg.KeepSlowest, atLeast: cfg.KeepSlowestMin, maxHeld: cfg.QueueSize}
	ints := []struct {
		field, env string
		v          *int
		def        int
	}{
		{"KeepFirst", EnvKeepFirst, &t.first, DefaultKeepFirst},
		{"KeepSlowestMin", EnvKeepSlowestMin, &t.atLeast, DefaultKeepSlowestMin},
	}
	for _, f := range ints {
		if *f.v != 0 {
			continue
		}
		*f.v = f.def
		if v, ok := os.LookupEnv(f.env); ok && strings.TrimSpace(v) != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return nil, invalid("%s=%q: want a count of steps, 0 or more", f.env, v)
			}
			*f.v = n
		}
	}
	if t.share == 0 {
		t.share = DefaultKeepSlowest
		if v, ok := os.LookupEnv(EnvKeepSlowest); ok && strings.TrimSpace(v) != "" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return nil, invalid("%s=%q: want a share of steps from 0 to 1", EnvKeepSlowest, v)
			}
			t.share = f
		}
	}
	if t.share > 1 || math.IsNaN(t.share) {
		return nil, invalid("KeepSlowest=%v: want a share of steps from 0 to 1", t.share)
	}
	t.first, t.atLeast, t.share = max(t.first, 0), max(t.atLeast, 0), max(t.share, 0)
	if s.ratio <= 0 || s.ratio >= 1 || (t.first == 0 && t.atLeast == 0 && t.share == 0) {
		return nil, nil
	}
	t.ranks, t.open, t.decided = map[int]int32{}, map[int32]*openStep{}, map[int32]bool{}
	t.durs.keep = t.atLeast
	return t, nil
}

// slow says whether a step of duration d, ending now, is among the
// slowest steps so far: fewer than atLeast of the steps ended before it
// lasted as long or longer (exact), or fewer than ⌈share·(n+1)⌉ of the n
// did, counting those within d's bucket (about 1.1 % wide) as long as d,
// so the share errs towards leaving a step out. Steps of equal duration
// rank in the order they ended: a run of identical steps keeps the
// first atLeast and no more.
func (t *tailPolicy) slow(d time.Duration) bool {
	if t.atLeast > 0 && t.durs.longestAtLeast(d) < t.atLeast {
		return true
	}
	if t.share > 0 {
		return t.durs.atOrAbove(d) < uint64(math.Ceil(t.share*float64(t.durs.n+1)))
	}
	return false
}

// openFor returns the open step, opening it if it is new; nil for a step
// already decided (or older than one, so forgotten), whose records follow
// the ratio sampler.
func (t *tailPolicy) openFor(step int32, head func() bool) *openStep {
	if o := t.open[step]; o != nil {
		return o
	}
	if t.any && step <= t.upTo {
		return nil
	}
	o := &openStep{head: head(), first: t.opened < t.first, ended: map[int]bool{}}
	t.opened++
	t.open[step] = o
	return o
}

// ready says whether every rank seen has ended the step, or gone on past
// it.
func (t *tailPolicy) ready(step int32, o *openStep) bool {
	for r, last := range t.ranks {
		if !o.ended[r] && last <= step {
			return false
		}
	}
	return true
}

// remember keeps the decision for records that arrive later, forgetting
// the oldest beyond tailMemory.
func (t *tailPolicy) remember(step int32, keep bool) {
	t.decided[step] = keep
	if len(t.recent) < tailMemory {
		t.recent = append(t.recent, step)
	} else {
		delete(t.decided, t.recent[t.next])
		t.recent[t.next] = step
		t.next = (t.next + 1) % tailMemory
	}
	if !t.any || step > t.upTo {
		t.upTo, t.any = step, true
	}
}

// oldest is the open step with the lowest number.
func (t *tailPolicy) oldest() int32 {
	var step int32
	first := true
	for s := range t.open {
		if first || s < step {
			step, first = s, false
		}
	}
	return step
}

// durations is the running distribution of step durations: counts in
// logarithmic buckets, 64 per doubling (each about 1.1 % wide) from 1 ns
// to 2^48 ns (78 hours), in a Fenwick tree, where adding one and counting
// those at or above a bucket take O(log buckets), in 24 KiB whatever the
// run's length; and the longest few exactly.
type durations struct {
	tree [durationBuckets + 1]uint64
	n    uint64
	// longest are the longest durations so far, longest first: as many
	// as the policy's atLeast.
	longest []time.Duration
	keep    int
}

const durationBuckets = 64 * 48

func durationBucket(d time.Duration) int {
	if d <= 1 {
		return 0
	}
	ns := uint64(d)
	e := bits.Len64(ns) - 1 // 2^e ≤ ns < 2^(e+1)
	// The fraction above 2^e, in 64ths of a doubling, from the mantissa.
	frac := math.Log2(float64(ns) / float64(uint64(1)<<e))
	return min(e*64+min(int(frac*64), 63), durationBuckets-1)
}

func (c *durations) add(d time.Duration) {
	for i := durationBucket(d) + 1; i <= durationBuckets; i += i & -i {
		c.tree[i]++
	}
	c.n++
	if c.keep == 0 {
		return
	}
	i := len(c.longest)
	for i > 0 && c.longest[i-1] < d {
		i--
	}
	if i == c.keep {
		return
	}
	if len(c.longest) < c.keep {
		c.longest = append(c.longest, 0)
	}
	copy(c.longest[i+1:], c.longest[i:])
	c.longest[i] = d
}

// atOrAbove counts the durations in d's bucket and higher ones.
func (c *durations) atOrAbove(d time.Duration) uint64 {
	var below uint64
	for i := durationBucket(d); i > 0; i -= i & -i {
		below += c.tree[i]
	}
	return c.n - below
}

// longestAtLeast counts the durations of at least d, up to c.keep.
func (c *durations) longestAtLeast(d time.Duration) int {
	n := 0
	for n < len(c.longest) && c.longest[n] >= d {
		n++
	}
	return n
}

// consumeTail is Consume under the tail policy: records of steps decided
// or kept whatever their duration are queued now, the others are held
// until their step's decision.
func (e *Exporter) consumeTail(batch []profiler.Record) {
	e.mu.Lock()
	e.stats.Records += uint64(len(batch))
	var now []profiler.Record
	for i := range batch {
		r := &batch[i]
		n := spansOf(r)
		e.stats.Spans += uint64(n)
		switch e.routeTail(r, n) {
		case routeQueue:
			now = append(now, *r)
		case routeLeaveOut:
			e.stats.Unsampled += uint64(n)
		}
	}
	wake := e.enqueueLocked(now)
	if !e.finished && e.advanceTail(false) {
		wake = true
	}
	e.mu.Unlock()
	if wake {
		e.wakeUp()
	}
}

type route int

const (
	routeQueue    route = iota // the step is kept: queue now
	routeLeaveOut              // the step is left out
	routeHeld                  // held until the step's decision
)

// routeTail says what becomes of a record of n spans, holding it in its
// open step when its decision waits.
func (e *Exporter) routeTail(r *profiler.Record, n int) route {
	t := e.tail
	head := func() bool { return e.sampler.sampled(e.build.ids.traceID(r.Step)) }
	verdict := func(keep bool) route {
		if keep {
			return routeQueue
		}
		return routeLeaveOut
	}
	key, ok := tailKey(r.Step)
	if !ok { // the run-level trace
		return verdict(head())
	}
	if k, ok := t.decided[key]; ok {
		return verdict(k)
	}
	if e.finished {
		// Nothing is held once the exporter has stopped: the ratio
		// sampler decides (and a kept record is dropped, counted).
		return verdict(head())
	}
	o := t.openFor(key, head)
	if o == nil {
		return verdict(head())
	}
	if last, ok := t.ranks[r.Rank]; !ok || key > last {
		t.ranks[r.Rank] = key
	}
	o.note(r)
	if o.kept() {
		return routeQueue
	}
	o.recs = append(o.recs, *r)
	o.spans += n
	t.held += n
	return routeHeld
}

// tailKey is what the tail policy knows a step by: the step, or a
// cycle's number (Config.Cycles: a job that marks no steps has only
// cycles, and its cycles are decided as steps are, the slowest kept);
// false for the run-level trace.
func tailKey(step int32) (int32, bool) {
	if k, ok := cycleOf(step); ok {
		return int32(k), true // cycleStep keeps k within int32
	}
	return step, step >= 0
}

// tailCycleLocked routes the span of a rank's cycle (queueCycle) under
// the tail policy: it says the cycle has ended on that rank, and its
// start and end time the cycle, as a step range does a step. It reports
// whether to queue the span now (false: held with the cycle, or left
// out and counted). Under e.mu.
func (e *Exporter) tailCycleLocked(a analysisSpan) bool {
	t := e.tail
	head := func() bool { return e.sampler.sampled(e.build.ids.traceID(a.step)) }
	key, _ := tailKey(a.step)
	keep, decided := t.decided[key]
	var o *openStep
	if !decided && !e.finished {
		o = t.openFor(key, head)
	}
	if o == nil {
		if !decided {
			keep = head()
		}
		if !keep {
			e.stats.Unsampled++
		}
		return keep
	}
	if last, ok := t.ranks[a.rank]; !ok || key > last {
		t.ranks[a.rank] = key
	}
	o.ended[a.rank] = true
	if !o.timed {
		o.lo, o.hi, o.timed, o.seen = a.start, a.end, true, true
	} else {
		o.lo, o.hi = min(o.lo, a.start), max(o.hi, a.end)
	}
	if o.kept() {
		return true
	}
	o.analysis = append(o.analysis, a)
	o.spans++
	t.held++
	return false
}

// advanceTail decides the open steps that are ready, oldest first, and
// those beyond the bounds on what is held; with all, every open step. It
// reports whether anything was queued.
func (e *Exporter) advanceTail(all bool) bool {
	t := e.tail
	queued := false
	for len(t.open) > 0 {
		step := t.oldest()
		o := t.open[step]
		ready := all || t.ready(step, o)
		forced := !ready && (t.held > t.maxHeld || len(t.open) > tailMaxOpen)
		if !ready && !forced {
			break
		}
		delete(t.open, step)
		d := o.duration()
		slow := o.pinned || t.slow(d)
		t.durs.add(d)
		keep := o.head || o.first || slow
		switch {
		case o.head:
		case o.first:
			e.stats.KeptFirst++
		case slow:
			e.stats.KeptSlow++
		}
		if forced || (all && !t.ready(step, o)) {
			e.stats.Forced++
		}
		t.remember(step, keep)
		t.held -= o.spans
		if !keep {
			e.stats.Unsampled += uint64(o.spans)
			continue
		}
		if e.enqueueLocked(o.recs) {
			queued = true
		}
		if e.enqueueStepsLocked(o.analysis) {
			queued = true
		}
	}
	return queued
}

// stepTraceTail is StepTrace's decision under the tail policy for a step
// the ratio sampler leaves out. A rank's step time of d, if it is already
// among the slowest, pins the step as kept: the exemplar that carries its
// trace id then always resolves.
func (e *Exporter) stepTraceTail(step int32, d time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.tail
	if k, ok := t.decided[step]; ok {
		return k
	}
	if e.finished {
		return false
	}
	o := t.openFor(step, func() bool { return false })
	switch {
	case o == nil:
		return false
	case o.kept():
		return true
	case d <= 0:
		return false
	}
	if t.slow(max(d, o.duration())) {
		o.pinned = true
	}
	return o.pinned
}
