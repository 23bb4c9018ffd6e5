package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
)

// Step is one training step across its ranks.
type Step struct {
	Step  int
	Ranks []Rank // in rank order
	// Stages pools the ranks of each pipeline stage (data-parallel
	// replicas of it), in stage order; empty when no rank's work carries a
	// stage label (a data-parallel job: no pipeline, no bubble).
	Stages []Stage
	// Span runs from the step's first forward or backward computation to
	// its last, over every rank: the interval whose idle part is the
	// pipeline bubble.
	Span     profiler.Interval
	Pipeline Pipeline
	// Collectives are the step's collectives matched across ranks by
	// group and sequence number, in (group, sequence) order; those
	// missing a participant are listed with Complete false.
	Collectives []Collective
	P2P         P2P
	// Straggler is the rank named as holding the others back in this step
	// (see Rank.Score), or profiler.None when none stands out.
	Straggler int
	// Critical is the chain of computations and transfers across ranks
	// that set the step's time; nil without any activity.
	Critical *CriticalPath
	// Clock holds the offsets applied to put the ranks on one clock, when
	// the analysis aligned clocks; nil otherwise.
	Clock *Offsets
	// Problems says what is missing or inconsistent in the step's
	// records. A step with problems is not counted in a Summary's figures.
	Problems []string
}

// Complete reports that the step had no problems.
func (s *Step) Complete() bool { return len(s.Problems) == 0 }

// Pipeline is the step's pipeline shape as its labels show it, and the
// ideal bubble fraction of that shape.
type Pipeline struct {
	Stages, Chunks, Microbatches int
	// Ideal is (p−1)/(v·m+p−1) (schedule.IdealBubbleFraction): the share
	// of the span each stage idles when communication is free and every
	// chunk costs the same, under interleaved 1F1B, and under GPipe where
	// v = 1 or m ≥ p (GPipe with v > 1 and m < p idles more: see
	// schedule.Schedule.BubbleFraction). NaN without pipeline labels.
	Ideal float64
	// Given: Chunks and Microbatches came from WithSchedule, the work
	// carrying stages only (a wrapped job's kernels).
	Given bool
	// Traced: the computation is traced kernels (a wrapped job's), whose
	// span runs from a step's first kernel to its last, those without a
	// phase (the optimizer's) included.
	Traced bool
}

// withSchedule is p with the chunks and microbatches WithSchedule gave,
// where the work carried stages only.
func (p Pipeline) withSchedule(chunks, microbatches int) Pipeline {
	if p.Stages == 0 || p.Chunks != 0 || p.Microbatches != 0 || chunks < 1 || microbatches < 1 {
		return p
	}
	p.Chunks, p.Microbatches, p.Given = chunks, microbatches, true
	p.Ideal = schedule.IdealBubbleFraction(p.Stages, p.Chunks, p.Microbatches)
	return p
}

// Rank is one rank's step.
type Rank struct {
	Rank  int
	Stage int // the step range's stage label; profiler.None without one
	// Wall is the step range's host interval. Without a step range, or
	// with one that ends before it starts (Problems says so), it is zero,
	// and so are Busy and Idle.
	Wall profiler.Interval
	// StepRange is the step range's record ID (0 without one): what a
	// span exporter parents the rank's analysis on.
	StepRange uint64
	// Busy is the profiler's busy time (profiler.BusyDefinition) within
	// Wall: the same figure as the report's step breakdown.
	Busy time.Duration
	// Computed reports that a compute range was timed on the device in
	// the step, so that Busy and Overlap are measured; a wrapped command's
	// steps have none (its kernels are not timed, only its NCCL
	// operations), and their Busy and Overlap are 0 for want of a measure.
	Computed bool
	// Streams is each device stream's own account, in stream order.
	Streams []Stream
	// Comm is the union of the rank's transfer intervals (collectives and
	// point-to-point) within Wall, Overlap the part of it during which
	// the rank was busy. A p2p whose data NCCL's proxy was still moving
	// after its kernel stopped (profiler.Collective.TransferEnd) counts
	// to the transfer's end; busy time and Streams keep its kernel's
	// interval, since the stream was free to compute.
	Comm, Overlap time.Duration
	// Compute is the interval from the rank's first forward or backward
	// computation in the step to its last; zero without any.
	Compute profiler.Interval
	// Bubble is the time within the step's Span that the rank did no
	// forward or backward computation; 0 when no rank's work in the step
	// carries a stage label (Pipeline.Stages 0: no pipeline). Chunks splits it by the VPP chunk
	// of the action each idle gap ended at (a wait for that chunk's
	// input), indexed by chunk; Drain is the gap after the rank's last
	// computation, which no action ends. Where the rank's computation
	// carries no chunk labels (a wrapped job's kernels), or it has none,
	// or a label of MaxChunkLabel or more, the bubble is not split:
	// Chunks is empty and Drain zero.
	Bubble time.Duration
	Chunks []time.Duration
	Drain  time.Duration
	// Time splits Wall by what used it, instant by instant (see Use):
	// the slices add up to Wall's length exactly.
	Time []Slice
	// Waited is the rank's waiting for the last rank in the step's
	// complete collectives. Caused is the others' waiting there that this
	// rank caused: where it arrived last, or where the last arrival was
	// late because it had been waiting on this rank (a receive from it, a
	// collective it arrived last at), the wait passed back along the
	// dependencies the critical path follows (see blame in blame.go and
	// docs/analysis.md). HeldUp is, of each collective's last arrival less
	// its next-latest one (the time the lateness cost the collective), the
	// part this rank caused, by the same rule.
	Waited, Caused, HeldUp time.Duration
	// Score is Caused over all ranks' waiting in the step: the share of
	// the waiting this rank caused; 0 when nobody waited.
	Score float64
}

// Idle is Wall − Busy.
func (r *Rank) Idle() time.Duration { return r.Wall.Len() - r.Busy }

// OverlapRatio is Overlap / Comm: the share of communication hidden
// behind computation; ok is false without communication.
func (r *Rank) OverlapRatio() (ratio float64, ok bool) {
	if r.Comm <= 0 {
		return 0, false
	}
	return float64(r.Overlap) / float64(r.Comm), true
}

// Stream is one device stream of a rank in a step: its compute by the
// busy definition (compute less transfers and waits on this stream), its
// transfers and its waits, each a union within the step's wall time.
type Stream struct {
	Stream                  uint64
	Compute, Transfer, Wait time.Duration
}

// Idle is the part of wall during which the stream did nothing profiled.
func (s Stream) Idle(wall time.Duration) time.Duration {
	return max(wall-s.Compute-s.Transfer-s.Wait, 0)
}

// Stage pools the ranks of one pipeline stage in a step.
type Stage struct {
	Stage int
	Ranks int
	// Bubble, Chunks and Drain are the means of its ranks' (see Rank).
	Bubble time.Duration
	Chunks []time.Duration
	Drain  time.Duration
	// Fraction is Bubble over the step's Span.
	Fraction float64
}

// P2P counts the step's point-to-point transfers: sends matched with
// their receives (the k-th send from a to b in the step with the k-th
// receive at b from a, as NCCL pairs them), and those left without their
// other side. Their waits are the pipeline's own (a receive is posted
// before its data exists), so they count in no straggler score
// themselves; but a rank late at a collective because it waited for a
// receive passes the blame for that lateness to the sender (Rank.Caused).
type P2P struct {
	Matched, Unmatched int
}

// Analyze analyses every step of records, offline. Records without a step
// label are ignored; steps come out in step order. With
// WithClockAlignment, clock offsets are estimated from all the records'
// collectives and applied to a copy first.
func Analyze(records []profiler.Record, opts ...Option) []Step {
	cfg := newConfig(opts)
	var off *Offsets
	if cfg.align {
		o := EstimateOffsets(records, WithClockDomains(cfg.domains), WithMinClockSamples(cfg.minSamples))
		off = &o
	}
	bySteps := map[int32][]item{}
	ranks := map[int]bool{}
	for i := range records {
		it, ok := keep(&records[i])
		if !ok || it.step == profiler.None {
			continue
		}
		if off != nil {
			off.shift(&it)
		}
		bySteps[it.step] = append(bySteps[it.step], it)
		ranks[it.rank] = true
	}
	expected := sortedKeys(ranks)
	steps := sortedKeys(bySteps)
	out := make([]Step, 0, len(steps))
	var sc scratch
	for _, s := range steps {
		st := analyzeStep(int(s), bySteps[s], expected, &sc)
		st.Pipeline = st.Pipeline.withSchedule(cfg.chunks, cfg.microbatches)
		if off != nil {
			st.Clock = off
			st.Problems = append(st.Problems, off.problems()...)
		}
		out = append(out, st)
	}
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// analyzeStep analyses one step's items; expected are the ranks the run
// has (a rank among them without items is missing).
func analyzeStep(step int, items []item, expected []int, sc *scratch) Step {
	st := Step{Step: step, Straggler: profiler.None}
	// Each rank's items, in their order of arrival, in one allocation.
	count := map[int]int{}
	for i := range items {
		count[items[i].rank]++
	}
	backing := slices.Grow(sc.backing[:0], len(items))
	sc.backing = backing
	defer clear(backing[:len(items)]) // let go of what the items point to
	byRank := make(map[int][]item, len(count))
	for _, r := range sortedKeys(count) {
		start := len(backing)
		backing = backing[:start+count[r]]
		byRank[r] = backing[start : start : start+count[r]]
	}
	for i := range items {
		r := items[i].rank
		byRank[r] = append(byRank[r], items[i])
	}
	var missing []int
	for _, r := range expected {
		if _, ok := byRank[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("no records of %s in this step", ranksList(missing)))
	}
	ranks := sortedKeys(byRank)
	st.Ranks = make([]Rank, len(ranks))
	first := true
	for i, r := range ranks {
		rk := &st.Ranks[i]
		st.Problems = rankAccount(rk, r, byRank[r], st.Problems, sc)
		if rk.Compute.Len() > 0 {
			if first {
				st.Span, first = rk.Compute, false
			} else {
				st.Span.Start = min(st.Span.Start, rk.Compute.Start)
				st.Span.End = max(st.Span.End, rk.Compute.End)
			}
		}
	}
	st.Pipeline = pipelineShape(items)
	if st.Span.Len() > 0 && st.Pipeline.Stages > 0 {
		// Without a stage label on any rank's work the job is not
		// pipelined (data parallel only): its idle compute is no bubble,
		// and Busy already says how much of the step it is.
		for i, r := range ranks {
			bubble(&st.Ranks[i], byRank[r], st.Span, sc)
		}
		st.Stages = stages(st.Ranks, st.Span)
	}
	st.Collectives, st.P2P = match(items)
	// A complete collective's members wait for its last arrival.
	lastArrival := map[collKey]time.Duration{}
	for _, c := range st.Collectives {
		if c.Complete && len(c.Members) > 0 {
			lastArrival[collKey{c.Group, c.GroupID, c.Seq}] = c.Members[len(c.Members)-1].Arrive
		}
	}
	// Idle time within the span is the bubble only in a pipeline, as
	// Rank.Bubble is.
	var bubbleSpan profiler.Interval
	if st.Pipeline.Stages > 0 {
		bubbleSpan = st.Span
	}
	for i, r := range ranks {
		attribute(&st.Ranks[i], byRank[r], bubbleSpan, lastArrival, sc)
	}
	for _, c := range st.Collectives {
		if !c.Complete {
			st.Problems = append(st.Problems, fmt.Sprintf("collective %s #%d (%s): %s", groupName(c.Group, c.GroupID), c.Seq, c.Op, c.Problem))
		}
	}
	if st.P2P.Unmatched > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("%d point-to-point transfers without their other side", st.P2P.Unmatched))
	}
	g := newGraph(items)
	st.Straggler = blame(st.Ranks, st.Collectives, g)
	st.Critical = g.critical()
	return st
}

// rankAccount fills the rank's busy, stream and communication figures
// from its items and returns problems with any found.
func rankAccount(rk *Rank, rank int, items []item, problems []string, sc *scratch) []string {
	rk.Rank, rk.Stage = rank, profiler.None
	work := sc.work[:0]
	defer func() { sc.work = work }()
	haveStep, cutShort := false, false
	for i := range items {
		it := &items[i]
		if it.isStep && it.cutShort {
			cutShort = true
			continue
		}
		if it.isStep {
			if haveStep {
				problems = append(problems, fmt.Sprintf("rank %d: more than one step range", rank))
				continue
			}
			haveStep = true
			rk.Wall, rk.Stage, rk.StepRange = it.host, int(it.stage), it.id
			continue
		}
		if it.work.Activity != profiler.ActivityNone {
			work = append(work, it.work)
		}
		if it.work.Activity == profiler.ActivityCompute {
			rk.Computed = true
		}
	}
	for i := range items {
		// Work of no device time (or inverted) computed nothing: it ends
		// no Compute, whatever the order the records came in.
		if it := &items[i]; it.pipelineCompute() && it.work.Len() > 0 {
			if rk.Compute.Len() == 0 {
				rk.Compute = it.work.Interval
			} else {
				rk.Compute.Start = min(rk.Compute.Start, it.work.Start)
				rk.Compute.End = max(rk.Compute.End, it.work.End)
			}
		}
	}
	if !haveStep && cutShort {
		// The step's work failed or was interrupted: its wall time is
		// not a step's, and the work it did not do is not idle time.
		return append(problems, fmt.Sprintf("rank %d: the step was cut short (its work failed or was interrupted); its busy and idle time are left out", rank))
	}
	if !haveStep {
		// Without the step range there is no wall time to account busy
		// time in: the step was cut short, or its end not delivered.
		return append(problems, fmt.Sprintf("rank %d: no step range (the step was cut short, its end never arrived, or it was dropped while recording); its busy and idle time are left out", rank))
	}
	if rk.Wall.End < rk.Wall.Start {
		// A malformed step range: no wall time to account busy time in,
		// and a step of negative time would lower the rank's mean step.
		// One that ends where it starts is a step shorter than a coarse
		// clock's tick, and is kept.
		rk.Wall = profiler.Interval{}
		return append(problems, fmt.Sprintf("rank %d: its step range ends before it starts; its busy and idle time are left out", rank))
	}
	wall := rk.Wall
	busy := profiler.BusyIntervals(nil, work)
	rk.Busy = clippedLen(busy, wall)
	transfers := sc.intervals[:0]
	for i := range items {
		if it := &items[i]; !it.isStep && it.work.Activity == profiler.ActivityTransfer {
			transfers = append(transfers, it.occupied())
		}
	}
	sc.intervals = transfers
	comm := union(transfers)
	rk.Comm = clippedLen(comm, wall)
	rk.Overlap = clippedLen(intersect(busy, comm), wall)
	// Per stream: the busy definition applied to that stream alone.
	slices.SortStableFunc(work, func(a, b profiler.StreamWork) int { return cmp.Compare(a.Stream, b.Stream) })
	for i := 0; i < len(work); {
		j := i
		for j < len(work) && work[j].Stream == work[i].Stream {
			j++
		}
		s := Stream{Stream: work[i].Stream}
		s.Compute = clippedLen(profiler.BusyIntervals(nil, work[i:j]), wall)
		var tr, wt []profiler.Interval
		for _, w := range work[i:j] {
			switch w.Activity {
			case profiler.ActivityTransfer:
				tr = append(tr, w.Interval)
			case profiler.ActivityWait:
				wt = append(wt, w.Interval)
			}
		}
		tu := union(tr)
		s.Transfer = clippedLen(tu, wall)
		s.Wait = clippedLen(subtract(union(wt), tu), wall)
		rk.Streams = append(rk.Streams, s)
		i = j
	}
	return problems
}

// bubble fills the rank's bubble within the step's span: the busy
// definition applied to its forward and backward computation (less the
// transfers and waits on the same streams), and the gaps between.
func bubble(rk *Rank, items []item, span profiler.Interval, sc *scratch) {
	work, acts := sc.work[:0], sc.acts[:0]
	defer func() {
		clear(acts)
		sc.work, sc.acts = work, acts
	}()
	maxChunk := -1
	for i := range items {
		it := &items[i]
		switch {
		case it.pipelineCompute():
			work = append(work, it.work)
			acts = append(acts, it)
			maxChunk = max(maxChunk, int(it.chunk))
		case it.work.Activity == profiler.ActivityTransfer || it.work.Activity == profiler.ActivityWait:
			work = append(work, it.work)
		}
	}
	busy := profiler.BusyIntervals(nil, work)
	rk.Bubble = span.Len() - clippedLen(busy, span)
	if maxChunk < 0 || maxChunk >= MaxChunkLabel {
		// No chunk labels (a wrapped job's kernels), or labels that are
		// no VPP chunk indices (a split would be as long as the largest):
		// no split of the bubble by chunk, and no tail told from it.
		return
	}
	rk.Chunks = make([]time.Duration, maxChunk+1)
	sw := chunkSweep{acts: acts, byStart: sc.byStart[:0], started: sc.started[:0]}
	defer func() { sc.byStart, sc.started = sw.byStart, sw.started }()
	at := span.Start
	for _, b := range busy {
		s, e := max(b.Start, span.Start), min(b.End, span.End)
		if e <= s {
			continue
		}
		if s > at {
			if c := sw.at(s); c >= 0 && c < len(rk.Chunks) {
				rk.Chunks[c] += s - at
			} else {
				rk.Drain += s - at // a gap no action ends: counted with the tail
			}
		}
		at = e
	}
	if at < span.End {
		rk.Drain += span.End - at
	}
}

// chunkSweep finds the chunk of the action running at each of a series of
// instants: of the actions running at t (start ≤ t < end), the lowest
// chunk (that of an action of no chunk only where no other runs), or −1
// without one. bubble asks at the end of each gap, where
// every action running began at that instant: actions of two chunks
// starting together (timestamps of a microsecond, as a Kineto trace's,
// make such ties common) give the gap to the lower chunk whatever order
// their records came in. With the actions sorted by start once and those
// started by t in a heap by chunk, each action goes in and out of the
// heap once, where a scan of every action at every gap was quadratic in
// the actions of a rank's step (a step of 10⁵ actions took a minute).
type chunkSweep struct {
	acts    []*item
	byStart []actStart // the nonempty actions by start, once asked
	sorted  bool
	next    int     // byStart[next:] had not started at the last instant asked
	started []int32 // indices of the actions started by then, a min-heap by chunk, then index
	last    time.Duration
}

// actStart is an action's start and its index in chunkSweep.acts.
type actStart struct {
	start time.Duration
	i     int32
}

func (c *chunkSweep) sort() {
	c.sorted = true
	for i, a := range c.acts {
		if a.work.Start < a.work.End { // an empty action runs at no instant
			c.byStart = append(c.byStart, actStart{a.work.Start, int32(i)})
		}
	}
	byStart := func(a, b actStart) int {
		if a.start != b.start {
			return cmp.Compare(a.start, b.start)
		}
		return cmp.Compare(a.i, b.i)
	}
	if !slices.IsSortedFunc(c.byStart, byStart) { // a rank's records mostly come in order
		slices.SortFunc(c.byStart, byStart)
	}
	c.next, c.started, c.last = 0, c.started[:0], math.MinInt64
}

// at is the chunk of the action running at t, or −1. An instant earlier
// than the last one asked starts the sweep over.
func (c *chunkSweep) at(t time.Duration) int {
	if !c.sorted {
		c.sort()
	}
	if t < c.last {
		c.next, c.started = 0, c.started[:0]
	}
	c.last = t
	for ; c.next < len(c.byStart) && c.byStart[c.next].start <= t; c.next++ {
		c.push(c.byStart[c.next].i)
	}
	// An action that ended by t ended by every later instant too: it
	// leaves the heap when it comes to the top.
	for len(c.started) > 0 && c.acts[c.started[0]].work.End <= t {
		c.pop()
	}
	if len(c.started) == 0 {
		return -1
	}
	return int(c.acts[c.started[0]].chunk)
}

// before orders the heap: the lower chunk, one of no chunk after every
// other, then the earlier in acts.
func (c *chunkSweep) before(i, j int32) bool {
	if a, b := uint16(c.acts[i].chunk), uint16(c.acts[j].chunk); a != b {
		return a < b // None (−1) is the largest
	}
	return i < j
}

func (c *chunkSweep) push(i int32) {
	h := append(c.started, i)
	for k := len(h) - 1; k > 0; {
		p := (k - 1) / 2
		if !c.before(h[k], h[p]) {
			break
		}
		h[p], h[k] = h[k], h[p]
		k = p
	}
	c.started = h
}

func (c *chunkSweep) pop() {
	h := c.started
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for k := 0; ; {
		m, l, r := k, 2*k+1, 2*k+2
		if l < n && c.before(h[l], h[m]) {
			m = l
		}
		if r < n && c.before(h[r], h[m]) {
			m = r
		}
		if m == k {
			break
		}
		h[k], h[m] = h[m], h[k]
		k = m
	}
	c.started = h
}

// stages pools the ranks by their stage label.
func stages(ranks []Rank, span profiler.Interval) []Stage {
	by := map[int]*Stage{}
	for i := range ranks {
		r := &ranks[i]
		if r.Compute.Len() == 0 && r.Bubble == 0 {
			continue
		}
		s, ok := by[r.Stage]
		if !ok {
			s = &Stage{Stage: r.Stage}
			by[r.Stage] = s
		}
		s.Ranks++
		s.Bubble += r.Bubble
		s.Drain += r.Drain
		for len(s.Chunks) < len(r.Chunks) {
			s.Chunks = append(s.Chunks, 0)
		}
		for c, d := range r.Chunks {
			s.Chunks[c] += d
		}
	}
	out := make([]Stage, 0, len(by))
	for _, k := range sortedKeys(by) {
		s := by[k]
		n := time.Duration(s.Ranks)
		s.Bubble /= n
		s.Drain /= n
		for c := range s.Chunks {
			s.Chunks[c] /= n
		}
		s.Fraction = float64(s.Bubble) / float64(span.Len())
		out = append(out, *s)
	}
	return out
}

// MaxChunkLabel bounds the chunk labels the bubble is split by (Rank.Chunks
// is indexed by chunk): VPP has a handful of chunks a stage, and a larger
// label — a job numbering its work some other way — would make the split,
// and every table and page drawn from it, as long as the label is large.
const MaxChunkLabel = 64

// pipelineShape counts the distinct stage, chunk and microbatch labels of
// the step's forward and backward computation.
func pipelineShape(items []item) Pipeline {
	st, ch, mb := map[int16]bool{}, map[int16]bool{}, map[int32]bool{}
	traced := false
	for i := range items {
		it := &items[i]
		if !it.pipelineCompute() {
			continue
		}
		traced = traced || it.kind == profiler.KindKernel
		if it.stage != profiler.None {
			st[it.stage] = true
		}
		if it.chunk != profiler.None {
			ch[it.chunk] = true
		}
		if it.mb != profiler.None {
			mb[it.mb] = true
		}
	}
	p := Pipeline{Stages: len(st), Chunks: len(ch), Microbatches: len(mb), Ideal: math.NaN(), Traced: traced}
	if p.Stages > 0 && p.Chunks > 0 && p.Microbatches > 0 {
		p.Ideal = schedule.IdealBubbleFraction(p.Stages, p.Chunks, p.Microbatches)
	}
	return p
}

// intList is v as a problem line names it: "0, 2, 5–9". Runs of three
// or more consecutive numbers are written as a range, and after
// maxListed entries the rest are counted, not listed: a run of 10⁵ ranks
// of which all but one are missing from a step is one short line, where
// the list written out took seconds a step (each number appended copied
// the whole line again) and made a line of 700 kB.
func intList(v []int) string {
	var b strings.Builder
	for i, n := 0, 0; i < len(v); n++ {
		if n == maxListed {
			fmt.Fprintf(&b, " and %d more", len(v)-i)
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if j-i >= 2 {
			fmt.Fprintf(&b, "%d–%d", v[i], v[j])
			i = j + 1
			continue
		}
		b.WriteString(strconv.Itoa(v[i]))
		i++
	}
	return b.String()
}

// maxListed is how many entries (numbers or ranges) intList writes.
const maxListed = 16

// scratch is working room reused from one analysed step to the next: a
// Sink analyses a step at a time for as long as a run lasts, and the
// slices each step's analysis built and dropped were half of what it
// allocated. Nothing a Step keeps points into it.
type scratch struct {
	backing   []item                // analyzeStep: the items by rank
	work      []profiler.StreamWork // rankAccount, bubble, attribute, one after another
	intervals []profiler.Interval   // rankAccount's transfers
	acts      []*item               // bubble's actions
	byStart   []actStart            // bubble's chunkSweep: the actions by start
	started   []int32               // and the heap of those started
	ev        []useEvent            // attribute's boundaries
	cuts      []time.Duration       // attribute's cuts
	slicesBy  map[Slice]time.Duration
}
