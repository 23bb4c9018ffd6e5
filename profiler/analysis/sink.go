package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/trainscope/trainscope/profiler"
)

// Sink analyses steps as their records arrive: a profiler.Sink that keeps
// only the records of steps not yet analysed (within WithMaxRecords), the
// latest WithKeepSteps steps whole, and the run's totals. A step is
// analysed once every rank seen so far has delivered the step range of a
// step WithStepDelay later, or when too many steps are open, or at Flush
// (and so at Profiler.Close, through Shutdown).
//
// Consume and the accessors may be called from different goroutines.
type Sink struct {
	mu     sync.Mutex
	cfg    config
	open   map[int32]*pending
	latest map[int]int32 // per rank, the highest step whose step range arrived
	expect int           // ranks the run has (ExpectRanks), 0 unknown
	// clock is the latest step's offsets that aligned every one of its
	// ranks, and clockStep that step: what a step without a complete
	// collective of its own is aligned with.
	clock     *Offsets
	clockStep int32
	ranks     map[int]bool // every rank seen
	held      int
	stepSize  int // items of the latest step analysed
	analysed  bool
	upTo      int32 // the highest step analysed, once analysed is set
	recent    []Step
	tot       *totals
	stats     Stats
	// spare is room for items from steps analysed, for the next steps
	// opened: allocating each step's anew was the largest of the sink's
	// allocations.
	spare [][]item
	sc    scratch // the analysis's working room, from step to step
}

type pending struct {
	items   []item
	dropped int
	// lost counts, by rank, the step's ranges its recorder dropped while
	// recording (ConsumeLost).
	lost map[int]uint64
}

// Stats counts what a Sink could not analyse.
type Stats struct {
	Steps int // steps analysed
	// Dropped counts records not kept because WithMaxRecords were held;
	// their steps say so.
	Dropped uint64
	// Late counts records of steps already analysed: they are in no
	// figure. LateKinds splits it by the records' kind (indexed by
	// profiler.Kind; the last entry holds any other), and FirstLate
	// describes the first of them.
	Late      uint64
	LateKinds [int(profiler.KindKernel) + 2]uint64
	FirstLate string
	// Unlabelled counts records without a step label, which belong to no
	// step.
	Unlabelled uint64
	// Forced counts steps analysed before every rank's records arrived,
	// because more than WithMaxOpenSteps were open.
	Forced int
	// Lost counts the ranges the profiler's recorders dropped while
	// recording (ConsumeLost): those of steps not yet analysed leave
	// their steps out of the figures; LostLate those of steps already
	// analysed, and LostUnlabelled those of no known step, which may be
	// missing from any figure.
	Lost, LostLate, LostUnlabelled uint64
}

// NewSink returns an empty analysis sink.
func NewSink(opts ...Option) *Sink {
	return &Sink{cfg: newConfig(opts), open: map[int32]*pending{}, latest: map[int]int32{}, ranks: map[int]bool{}, tot: newTotals()}
}

// Consume adds a batch of records and analyses the steps it completes. It
// implements profiler.Sink.
func (s *Sink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		it, ok := keep(&batch[i])
		if !ok {
			continue
		}
		if it.step == profiler.None {
			s.stats.Unlabelled++
			continue
		}
		s.ranks[it.rank] = true
		if s.analysed && it.step <= s.upTo {
			s.late(&batch[i])
			continue
		}
		if it.isStep {
			if l, ok := s.latest[it.rank]; !ok || it.step > l {
				s.latest[it.rank] = it.step
			}
		}
		p := s.open[it.step]
		if p == nil {
			p = &pending{items: s.room()}
			s.open[it.step] = p
		}
		if s.held >= s.cfg.maxRecords {
			p.dropped++
			s.stats.Dropped++
			continue
		}
		p.items = append(p.items, it)
		s.held++
	}
	s.advance(false)
}

// ConsumeLost takes the ranges the profiler's recorders dropped while
// recording: a step that lost any is analysed with what came, and left
// out of the figures as a step with a problem. It implements
// profiler.LostSink.
func (s *Sink) ConsumeLost(lost []profiler.Lost) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range lost {
		s.stats.Lost += l.Ranges
		switch {
		case l.Step == profiler.None:
			s.stats.LostUnlabelled += l.Ranges
			continue
		case s.analysed && l.Step <= s.upTo:
			s.stats.LostLate += l.Ranges
			continue
		}
		s.ranks[l.Rank] = true
		p := s.open[l.Step]
		if p == nil {
			p = &pending{items: s.room()}
			s.open[l.Step] = p
		}
		if p.lost == nil {
			p.lost = map[int]uint64{}
		}
		p.lost[l.Rank] += l.Ranges
	}
}

// late counts r, a record of a step already analysed.
func (s *Sink) late(r *profiler.Record) {
	s.stats.Late++
	s.stats.LateKinds[min(int(r.Kind), len(s.stats.LateKinds)-1)]++
	if s.stats.FirstLate == "" {
		s.stats.FirstLate = fmt.Sprintf("rank %d's %s %q of step %d, after steps up to %d were analysed", r.Rank, r.Kind, r.Name, r.Step, s.upTo)
	}
}

// ExpectRanks tells the sink that the run has n ranks, for a caller that
// learns it as the run goes (a wrapped job's launcher): until n ranks
// have delivered records, a step is analysed only once the ranks seen
// are expectSlack steps past it (or at Flush), so that a rank whose first
// records come late is not left out of the first steps, and a rank that
// never comes holds nothing up for long. A smaller n than before changes
// nothing.
func (s *Sink) ExpectRanks(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expect = max(s.expect, n)
}

// Flush analyses every step still open, with what it has.
func (s *Sink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(true)
}

// Shutdown flushes; Profiler.Close calls it after the last delivery.
func (s *Sink) Shutdown(context.Context) error {
	s.Flush()
	return nil
}

// advance analyses the open steps that are ready, oldest first.
func (s *Sink) advance(flush bool) {
	for len(s.open) > 0 {
		step := slices.Min(sortedKeys(s.open))
		ready := flush
		if !ready {
			// Every rank seen has delivered a step delay later; and either
			// every rank expected has been seen, or the ranks seen are
			// expectSlack steps further on — a rank expected but not seen
			// by then is not coming with this step's records (it never
			// connects, or marks no steps).
			ready = true
			least := int64(math.MaxInt64)
			for r := range s.ranks {
				l, ok := s.latest[r]
				if !ok {
					ready = false
					break
				}
				least = min(least, int64(l))
			}
			// In int64: step numbers near 2^31 must not wrap.
			due := int64(step) + int64(s.cfg.delay)
			ready = ready && least >= due && (len(s.ranks) >= s.expect || least >= due+expectSlack)
		}
		forced := !ready && len(s.open) > s.cfg.maxOpen
		if !ready && !forced {
			return
		}
		p := s.open[step]
		delete(s.open, step)
		s.held -= len(p.items)
		s.analyse(step, p, forced)
		if cap(p.items) > 0 && len(s.spare) < maxSpare {
			clear(p.items) // the collectives' details go
			s.spare = append(s.spare, p.items[:0])
		}
	}
}

// maxSpare bounds the steps' room a Sink keeps for later steps.
const maxSpare = 4

// room is where a new step's items go: a spare one, else room for as many
// items as the last step analysed had (steps are alike), within what
// WithMaxRecords leaves: many steps open at once (a rank far behind the
// others) must not each take a whole step's room beyond the bound.
func (s *Sink) room() []item {
	if n := len(s.spare); n > 0 {
		r := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return r
	}
	return make([]item, 0, min(s.stepSize, max(s.cfg.maxRecords-s.held, 0)))
}

func (s *Sink) analyse(step int32, p *pending, forced bool) {
	var off *Offsets
	switch {
	case s.cfg.applied != nil:
		// Aligned before they came: reported, not applied again.
		off = s.cfg.applied.restrictedTo(itemRanks(p.items))
	case s.cfg.align:
		o := estimate(p.items, s.cfg.domains, s.cfg.minSamples)
		switch {
		case o.Reference != profiler.None && len(o.Unaligned) == 0 && o.collectives && len(o.P2P) == 0:
			// Every rank on collectives: a step that aligned some on
			// sends and receives only has offsets no finer than those
			// of a step of sends and receives, and carried they would
			// no longer say so (Offsets.P2P).
			s.clock, s.clockStep = &o, step
		case !o.collectives && s.clock != nil:
			// No complete collective joins the step's clocks (a pipeline
			// step of sends and receives only, or of fewer collectives
			// than WithMinClockSamples asks): clocks drift slowly, so
			// the latest step's offsets from collectives hold; they are
			// finer than the step's sends and receives give.
			o = s.clock.carriedTo(itemRanks(p.items), s.clockStep)
		}
		off = &o
		for i := range p.items {
			off.shift(&p.items[i])
		}
	}
	s.stepSize = len(p.items)
	st := analyzeStep(int(step), p.items, sortedKeys(s.ranks), &s.sc)
	st.Pipeline = st.Pipeline.withSchedule(s.cfg.chunks, s.cfg.microbatches)
	if off != nil {
		st.Clock = off
		st.Problems = append(st.Problems, off.problems()...)
	}
	if p.dropped > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("%d records dropped at the cap of %d held records", p.dropped, s.cfg.maxRecords))
	}
	for _, rank := range sortedKeys(p.lost) {
		// No count in the text: a problem that recurs is listed once.
		st.Problems = append(st.Problems, fmt.Sprintf("rank %d: ranges of this step were dropped while recording (its recorder's buffer was full: the profiler's collector fell behind)", rank))
	}
	if forced {
		s.stats.Forced++
		st.Problems = append(st.Problems, fmt.Sprintf("analysed before every rank's later steps arrived (more than %d steps open)", s.cfg.maxOpen))
	}
	if s.cfg.onStep != nil {
		s.cfg.onStep(&st)
	}
	s.analysed, s.upTo = true, max(s.upTo, step)
	s.stats.Steps++
	s.tot.add(&st)
	if s.cfg.keep > 0 {
		if len(s.recent) == s.cfg.keep {
			s.recent = slices.Delete(s.recent, 0, 1)
		}
		s.recent = append(s.recent, st)
	}
}

// Steps returns the latest analysed steps (WithKeepSteps of them), oldest
// first.
func (s *Sink) Steps() []Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recent)
}

// Summary returns the run's totals over every step analysed so far.
func (s *Sink) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.tot.summary()
	sum.Late, sum.LateKinds, sum.FirstLate = s.stats.Late, s.stats.LateKinds, s.stats.FirstLate
	sum.Lost, sum.LostLate, sum.LostUnlabelled = s.stats.Lost, s.stats.LostLate, s.stats.LostUnlabelled
	sum.OneClock = s.cfg.oneClock
	if a := s.cfg.applied; a != nil && len(a.Residual) > 0 {
		sum.Offsets = a.clone()
	}
	return sum
}

// Stats returns the counts so far.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// expectSlack is how many steps further than WithStepDelay the ranks
// seen must be before a step is analysed without a rank ExpectRanks
// expects.
const expectSlack = 8

// itemRanks are the ranks of items, in order.
func itemRanks(items []item) []int {
	seen := map[int]bool{}
	for i := range items {
		seen[items[i].rank] = true
	}
	return sortedKeys(seen)
}
