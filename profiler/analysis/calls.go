package analysis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// CallSink analyses collectives matched across ranks as they arrive,
// without steps: for records that carry none, such as a wrapped run's
// NCCL operations (NCCL knows no training steps). A collective is decided
// once every rank of its group has recorded it (matched by group and
// sequence number, as in a step); its skew, each member's wait for the
// last arrival and the transfer after it go into the run's totals, and the
// rank that arrived last is charged the others' waiting (Rank.Caused,
// without the step analysis's passing of blame along dependencies, which
// needs the pipeline's labels). Point-to-point operations and ranges are
// not matched: their waits are the pipeline's own.
//
// With WithClockAlignment, each rank's clock offset is estimated from the
// collectives decided so far (the median of its departure less each
// collective's median departure, over its latest 256) and applied to its
// later collectives: for ranks in different processes.
//
// WithMaxRecords bounds the records held for collectives not yet decided;
// beyond it the oldest is decided with the members it has, as an
// incomplete collective. Flush decides the rest. Summary's figures are
// the complete collectives'; the incomplete are counted and described in
// Summary.Problems.
//
// Consume and the accessors may be called from different goroutines.
type CallSink struct {
	mu    sync.Mutex
	cfg   config
	open  map[collKey][]item
	order []collKey // the open keys, oldest first (decided ones are skipped)
	held  int
	tot   *totals
	clock map[clockID]*departureRing // by clock (clockOf)
	// clockRanks are, per clock, the ranks seen on it.
	clockRanks map[clockID][]int
	off        Offsets               // what is applied (WithClockAlignment)
	est        map[int]time.Duration // the latest estimates
	stats      CallStats
	// groups counts, per group, the collectives decided incomplete and the
	// ranks seen in them: one problem line per group, not per call.
	groups map[string]*groupCalls
	// span is, per rank, its first arrival and last departure at a
	// matched collective: what the waiting it caused is weighed against.
	span map[int][2]time.Duration
}

// groupCalls is what a CallSink says of a group's incomplete collectives.
type groupCalls struct {
	incomplete int
	size       int
	ranks      map[int]bool // ranks that recorded any of the group's collectives (at most size)
	first      string       // the first incomplete one's problem
}

// CallStats counts what a CallSink decided.
type CallStats struct {
	Matched    int // collectives every rank of the group recorded once
	Incomplete int // decided without every rank: at the cap, at Flush, or inconsistent
}

// departureRing keeps a clock's latest departures less each collective's
// median departure, for its clock offset.
type departureRing struct {
	d    [256]time.Duration
	n    int // samples ever added
	next int
	// off and res are the latest estimate: the samples' median, and
	// their median distance from it.
	off, res time.Duration
}

func (r *departureRing) add(d time.Duration) {
	r.d[r.next] = d
	r.next = (r.next + 1) % len(r.d)
	r.n++
}

func (r *departureRing) samples() []time.Duration {
	return slices.Clone(r.d[:min(r.n, len(r.d))])
}

// MinClockSamples is how many collectives a rank's offset is estimated
// from before a CallSink applies it, and the fewest profile-run import
// aligns a file's clock through (WithMinClockSamples).
const MinClockSamples = 8

// NewCallSink returns an empty CallSink. It takes WithClockAlignment and
// WithMaxRecords; the step options do not apply.
func NewCallSink(opts ...Option) *CallSink {
	cfg := newConfig(opts)
	if !cfg.maxSet {
		// Collectives are decided as soon as their last rank's record
		// arrives; those held are the ones in flight, and those some rank
		// will never record (a communicator reaching beyond the wrapped
		// job): the cap bounds the latter to a few MiB.
		cfg.maxRecords = 1 << 16
	}
	s := &CallSink{cfg: cfg, open: map[collKey][]item{}, tot: newTotals(), clock: map[clockID]*departureRing{}, clockRanks: map[clockID][]int{}, est: map[int]time.Duration{},
		groups: map[string]*groupCalls{}}
	s.tot.s.Stepless = true
	s.off = Offsets{Reference: profiler.None, Offset: map[int]time.Duration{}, Residual: map[int]time.Duration{}, Samples: map[int]int{}}
	return s
}

// Consume adds a batch of records and decides the collectives it
// completes. It implements profiler.Sink.
func (s *CallSink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		if batch[i].Kind != profiler.KindCollective {
			continue
		}
		it, ok := keep(&batch[i])
		if !ok || it.coll == nil {
			continue
		}
		s.tot.rank(it.rank)
		s.noteRank(it.rank)
		s.sawRank(groupName(it.coll.group, it.coll.gid), int(it.coll.size), it.rank)
		k := collKey{it.coll.group, it.coll.gid, it.coll.seq}
		its, open := s.open[k]
		if !open {
			s.order = append(s.order, k)
		}
		its = append(its, it)
		s.held++
		if len(its) >= max(int(it.coll.size), 1) {
			delete(s.open, k)
			s.held -= len(its)
			s.decide(k, its)
		} else {
			s.open[k] = its
		}
		for s.held > s.cfg.maxRecords {
			s.decideOldest()
		}
	}
	s.compact()
}

// maxGroups bounds the groups a CallSink keeps apart for its problem
// lines; the incomplete collectives of others are counted all the same.
const maxGroups = 256

// sawRank notes that rank recorded a collective of group, of size ranks.
func (s *CallSink) sawRank(group string, size, rank int) {
	g := s.groups[group]
	if g == nil {
		if len(s.groups) >= maxGroups {
			return
		}
		g = &groupCalls{size: size, ranks: map[int]bool{}}
		s.groups[group] = g
	}
	if len(g.ranks) < max(g.size, 1) {
		g.ranks[rank] = true
	}
}

// decideOldest decides the oldest open collective with what it has.
func (s *CallSink) decideOldest() {
	for len(s.order) > 0 {
		k := s.order[0]
		s.order = s.order[1:]
		if its, ok := s.open[k]; ok {
			delete(s.open, k)
			s.held -= len(its)
			s.decide(k, its)
			return
		}
	}
}

// compact drops decided keys from the front of the order, and the rest
// of them once they are most of it: a collective some rank never records
// stays at the front until the cap decides it, and every key decided
// after it must not stay behind it for as long as the run lasts.
func (s *CallSink) compact() {
	for len(s.order) > 0 {
		if _, ok := s.open[s.order[0]]; ok {
			break
		}
		s.order = s.order[1:]
	}
	if len(s.order) > 1024 && len(s.order) > 4*len(s.open) || cap(s.order) > 1024 && len(s.order) < cap(s.order)/4 {
		// A key decided and opened again (a rank recording one sequence
		// number twice) is in the order more than once, every time as
		// open: it is kept once, where it was opened last.
		live := make([]collKey, 0, 2*len(s.open))
		kept := make(map[collKey]bool, len(s.open))
		for i := len(s.order) - 1; i >= 0; i-- {
			k := s.order[i]
			if _, ok := s.open[k]; ok && !kept[k] {
				kept[k] = true
				live = append(live, k)
			}
		}
		slices.Reverse(live)
		s.order = live
	}
}

// decide analyses one collective: its clock samples, then (shifted by the
// offsets so far, with alignment) its waits into the totals.
func (s *CallSink) decide(k collKey, its []item) {
	ptrs := make([]*item, len(its))
	for i := range its {
		ptrs[i] = &its[i]
	}
	if raw := collective(k, ptrs); raw.Complete && len(raw.Members) > 1 {
		s.sampleClock(raw.Members)
	}
	if s.cfg.align && s.cfg.applied == nil {
		for i := range its {
			s.off.shift(&its[i])
		}
	}
	c := collective(k, ptrs)
	if !c.Complete {
		s.stats.Incomplete++
		s.tot.s.Collectives.Incomplete++
		if g := s.groups[groupName(c.Group, c.GroupID)]; g != nil {
			if g.incomplete == 0 {
				g.first = fmt.Sprintf("#%d (%s): %s", c.Seq, c.Op, c.Problem)
			}
			g.incomplete++
		}
		return
	}
	s.stats.Matched++
	s.tot.addCollective(&c)
	if s.span == nil {
		s.span = map[int][2]time.Duration{}
	}
	for _, m := range c.Members {
		sp, ok := s.span[m.Rank]
		if !ok {
			sp = [2]time.Duration{m.Arrive, m.Leave}
		}
		s.span[m.Rank] = [2]time.Duration{min(sp[0], m.Arrive), max(sp[1], m.Leave)}
	}
	last := c.Members[len(c.Members)-1]
	var waited time.Duration
	for _, m := range c.Members {
		s.tot.rank(m.Rank).Waited += m.Wait
		waited += m.Wait
	}
	lr := s.tot.rank(last.Rank)
	lr.Caused += waited
	if len(c.Members) > 1 {
		lr.HeldUp += last.Arrive - c.Members[len(c.Members)-2].Arrive
	}
}

// sampleClock adds, for each clock among the members (a rank's own, or
// its domain's: WithClockDomains), its departure (its members' median)
// less the collective's median departure, and re-estimates the offset of
// those clocks' ranks.
func (s *CallSink) sampleClock(members []Member) {
	leave := make([]time.Duration, len(members))
	by := map[clockID][]time.Duration{}
	for i, m := range members {
		leave[i] = m.Leave
		c := clockOf(s.cfg.domains, m.Rank)
		by[c] = append(by[c], m.Leave)
	}
	if len(by) < 2 {
		return // the members share one clock: nothing to compare
	}
	mid := medianOf(leave)
	for c, v := range by {
		r := s.clock[c]
		if r == nil {
			r = &departureRing{}
			s.clock[c] = r
		}
		r.add(medianOf(v) - mid)
		// Re-estimated while there are few samples, then every 32nd:
		// two sorts of 256 per member per collective would cost more
		// than the rest of the analysis.
		if r.n > 64 && r.n%32 != 0 {
			for _, rank := range s.clockRanks[c] {
				s.off.Samples[rank] = r.n
			}
			continue
		}
		v := r.samples()
		off := medianOf(v)
		for i := range v {
			v[i] = (v[i] - off).Abs()
		}
		res := medianOf(v)
		r.off, r.res = off, res
		for _, rank := range s.clockRanks[c] {
			s.setClock(rank, r)
		}
	}
}

// setClock gives rank its clock's latest estimate.
func (s *CallSink) setClock(rank int, r *departureRing) {
	s.off.Samples[rank] = r.n
	if r.n == 0 {
		return
	}
	s.off.Residual[rank] = r.res
	s.est[rank] = r.off
	if s.cfg.align && r.n >= MinClockSamples {
		s.off.Offset[rank] = r.off
	}
}

// noteRank records which clock rank is on, and gives it that clock's
// estimate when the clock was sampled through other ranks first.
func (s *CallSink) noteRank(rank int) {
	c := clockOf(s.cfg.domains, rank)
	if slices.Contains(s.clockRanks[c], rank) {
		return
	}
	s.clockRanks[c] = append(s.clockRanks[c], rank)
	if r := s.clock[c]; r != nil {
		s.setClock(rank, r)
	}
}

// Flush decides every collective still open, with the members it has.
func (s *CallSink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.open) > 0 {
		s.decideOldest()
	}
	s.order = nil
}

// Shutdown flushes; Profiler.Close calls it after the last delivery.
func (s *CallSink) Shutdown(context.Context) error {
	s.Flush()
	return nil
}

// Summary returns the run's totals over the collectives decided so far:
// Summary.Stepless is set, and the step figures are zero.
func (s *CallSink) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.tot.summary()
	for _, name := range slices.Sorted(maps.Keys(s.groups)) {
		g := s.groups[name]
		if g.incomplete == 0 || len(sum.Problems) >= maxProblems {
			continue
		}
		line := fmt.Sprintf("group %s: %d collectives not recorded by every rank (first: %s)", name, g.incomplete, g.first)
		if len(g.ranks) < g.size {
			line += fmt.Sprintf("; only ranks %s of its %d recorded any of its collectives: are the others outside the wrapped job (another host)?", intList(slices.Sorted(maps.Keys(g.ranks))), g.size)
		}
		sum.Problems = append(sum.Problems, line)
	}
	switch a := s.cfg.applied; {
	case a != nil && a.Joined > 0:
		// Aligned before they came (WithAppliedOffsets): those offsets,
		// and the ranks they left unaligned.
		sum.Offsets = a.clone()
		sum.MaxClockResidual = sum.Offsets.MaxResidual()
		sum.Aligned = true
		for _, p := range a.problems() {
			if len(sum.Problems) < maxProblems {
				sum.Problems = append(sum.Problems, p)
			}
		}
	case len(s.off.Residual) > 0:
		// The departures sampled here: applied (WithClockAlignment) or,
		// where nothing was aligned, shown against each collective's
		// median.
		o := Offsets{Reference: profiler.None, Offset: maps.Clone(s.est), Residual: maps.Clone(s.off.Residual), Samples: maps.Clone(s.off.Samples)}
		sum.Offsets = &o
		sum.MaxClockResidual = o.MaxResidual()
		sum.Aligned = s.cfg.align && len(s.off.Offset) > 0
	}
	if s.cfg.align || s.cfg.applied != nil && s.cfg.applied.Joined == 0 {
		sum.AlignAfter = MinClockSamples
	}
	sum.OneClock = s.cfg.oneClock
	// Without steps, the waiting a straggler caused is weighed against
	// the time its collectives spanned.
	if sp, ok := s.span[sum.Straggler]; ok && sum.Straggler != profiler.None {
		for _, r := range sum.Ranks {
			if r.Rank == sum.Straggler && float64(r.Caused) < MinStragglerShare*float64(sp[1]-sp[0]) {
				sum.Straggler, sum.Minor, sum.MinorRank, sum.MinorSpan = profiler.None, true, r.Rank, sp[1]-sp[0]
			}
		}
	}
	return sum
}

// Stats returns the counts so far.
func (s *CallSink) Stats() CallStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
