package profiler

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/trainscope/trainscope/internal/quantile"
	"github.com/trainscope/trainscope/runtime"
)

// StepQuantileAccuracy is the relative accuracy of StepStats' quantiles:
// each is within this fraction of the exact quantile, however many steps
// there were.
const StepQuantileAccuracy = 0.01

// stepSketchBins bounds a rank's quantile sketch. At 1% accuracy 2048 bins
// span a ratio of about 10^17 between the shortest and the longest step,
// so the bound never costs accuracy; it bounds memory (16 KiB per rank).
const stepSketchBins = 2048

// StepStats is one rank's steps: the account StepBreakdown gives
// (RankSteps) and the distribution of its step times.
type StepStats struct {
	RankSteps
	Min, Max time.Duration // exact
	// Quantiles of the step's host wall time, by nearest rank: the
	// ⌈q·n⌉-th of the n step times in ascending order (at least a share
	// q of the steps took at most that long; the p99 of fewer than 100
	// steps is the longest), within StepQuantileAccuracy of it.
	P50, P90, P99 time.Duration
}

// StepSummary accounts steps as records arrive: a Sink giving, per rank,
// what StepBreakdown gives over every record (steps, wall and busy sums,
// through the same StepAccountant) and the step times' minimum, maximum,
// mean and quantiles. Register it with Profiler.AddSink before the run.
//
// Its memory does not grow with the steps: per rank, a few sums and a
// quantile sketch of at most 2048 bins; and the records of the steps not
// yet accounted, which the StepAccountant keeps (a step is accounted once
// WithStepDelay later step ranges of its rank have arrived, so its device
// ranges may arrive after its step range).
//
// Consume and the accessors may be called from different goroutines.
type StepSummary struct {
	mu        sync.Mutex
	acct      *StepAccountant
	delay     int
	ranks     map[int]*rankStepStats
	late      uint64
	abandoned uint64
	emit      func(StepTime)
	onAbandon func(dev runtime.Device, rank int)
}

type rankStepStats struct {
	RankSteps
	min, max time.Duration
	sketch   *ddsketch.DDSketch
}

// StepSummaryOption configures NewStepSummary.
type StepSummaryOption interface{ applyStepSummary(*StepSummary) }

type stepSummaryOptionFunc func(*StepSummary)

func (f stepSummaryOptionFunc) applyStepSummary(s *StepSummary) { f(s) }

// WithStepDelay accounts a step once n later step ranges of its rank have
// arrived (default 2), so that device ranges the collector resolves after
// the step range still count in its busy time; one that arrives later
// than that is left out and counted (StepSummaryStats.Late). 0 accounts a
// step in the batch that brings its step range, as the metrics do.
func WithStepDelay(n int) StepSummaryOption {
	return stepSummaryOptionFunc(func(s *StepSummary) { s.delay = max(n, 0) })
}

// NewStepSummary returns an empty step summary.
func NewStepSummary(opts ...StepSummaryOption) *StepSummary {
	s := &StepSummary{acct: NewStepAccountant(), delay: 2, ranks: make(map[int]*rankStepStats)}
	for _, o := range opts {
		if o != nil {
			o.applyStepSummary(s)
		}
	}
	s.emit = func(st StepTime) { s.add(st) }
	s.onAbandon = func(runtime.Device, int) { s.abandoned++ }
	return s
}

// Consume adds a batch of records. It implements Sink and keeps only the
// device intervals of steps not yet accounted.
func (s *StepSummary) Consume(batch []Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		if s.acct.Add(&batch[i]) {
			s.late++
		}
	}
	s.acct.FinishAfter(s.delay, s.emit, s.onAbandon)
}

func newRankStepStats(rank, stage int) *rankStepStats {
	// The arguments are valid constants: the error cannot happen.
	sk, err := ddsketch.LogCollapsingLowestDenseDDSketch(StepQuantileAccuracy, stepSketchBins)
	if err != nil {
		panic(err)
	}
	return &rankStepStats{RankSteps: RankSteps{Rank: rank, Stage: stage}, sketch: sk}
}

// add accounts one step into its rank's figures, as StepBreakdown does.
func (s *StepSummary) add(st StepTime) {
	rs, ok := s.ranks[st.Rank]
	if !ok {
		rs = newRankStepStats(st.Rank, st.Stage)
		s.ranks[st.Rank] = rs
	}
	rs.addStep(st)
}

func (rs *rankStepStats) addStep(st StepTime) {
	if st.CutShort {
		rs.CutShort++
		return
	}
	if rs.Stage != st.Stage {
		rs.Stage = None
	}
	w := st.Wall()
	if rs.Steps == 0 || w < rs.min {
		rs.min = w
	}
	if rs.Steps == 0 || w > rs.max {
		rs.max = w
	}
	rs.addFirst(st)
	rs.Steps++
	rs.Wall += w
	rs.Busy += st.Busy
	rs.Computed = rs.Computed || st.Computed
	// Add fails only for values the mapping cannot index: a negative
	// wall time, which a step range never has; 0 goes to its own bin.
	_ = rs.sketch.Add(float64(max(w, 0)))
}

// Ranks returns every rank's step statistics, ranks in order. Steps held
// back for WithStepDelay are included as they stand now (and accounted
// for good later).
func (s *StepSummary) Ranks() []StepStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A copy of the figures, to add the held steps to.
	ranks := make(map[int]*rankStepStats, len(s.ranks))
	for r, rs := range s.ranks {
		c := *rs
		ranks[r] = &c
	}
	copied := map[int]bool{}
	s.acct.Ready(func(st StepTime) {
		rs, ok := ranks[st.Rank]
		if !ok {
			rs = newRankStepStats(st.Rank, st.Stage)
			ranks[st.Rank] = rs
			copied[st.Rank] = true
		}
		if !copied[st.Rank] {
			rs.sketch = rs.sketch.Copy()
			copied[st.Rank] = true
		}
		rs.addStep(st)
	})
	out := make([]StepStats, 0, len(ranks))
	for _, rs := range ranks {
		out = append(out, rs.stats())
	}
	slices.SortFunc(out, func(a, b StepStats) int { return cmp.Compare(a.Rank, b.Rank) })
	return out
}

func (rs *rankStepStats) stats() StepStats {
	st := StepStats{RankSteps: rs.RankSteps, Min: rs.min, Max: rs.max}
	if rs.Steps == 0 {
		return st
	}
	q := func(p float64) time.Duration { return quantile.Duration(rs.sketch, p, rs.min, rs.max) }
	st.P50, st.P90, st.P99 = q(0.5), q(0.9), q(0.99)
	return st
}

// Breakdown returns the ranks' accounts as StepBreakdown does, for
// WriteStepBreakdown.
func (s *StepSummary) Breakdown() []RankSteps {
	stats := s.Ranks()
	out := make([]RankSteps, len(stats))
	for i, st := range stats {
		out[i] = st.RankSteps
	}
	return out
}

// StepSummaryStats counts what a StepSummary could not account.
type StepSummaryStats struct {
	// Late counts device ranges that arrived after their step was
	// accounted (beyond WithStepDelay): their time is not in Busy.
	Late uint64
	// Abandoned counts steps given up because their step range never
	// came while too many others waited.
	Abandoned uint64
}

// Stats returns the counts so far.
func (s *StepSummary) Stats() StepSummaryStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StepSummaryStats{Late: s.late, Abandoned: s.abandoned}
}

// WriteStepTimes writes one line per rank: steps, mean, minimum, the
// quantiles and the maximum of its step times in milliseconds.
// WithRankRows keeps the lines of the ranks with the highest p99.
func WriteStepTimes(w io.Writer, ranks []StepStats, opts ...TableOption) error {
	if err := checkWriter("WriteStepTimes", w); err != nil {
		return err
	}
	if len(ranks) == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rows := standingOut(w, len(ranks), tableOptions(opts).rows, func(i int) int64 {
		if ranks[i].Steps == 0 {
			return -1
		}
		return int64(ranks[i].P99)
	}, "the highest p99")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Rank\tSteps\tMean(ms)\tMin(ms)\tp50(ms)\tp90(ms)\tp99(ms)\tMax(ms)\t")
	for _, i := range rows {
		r := ranks[i]
		if r.Steps == 0 {
			fmt.Fprintf(tw, "%d\t0\t-\t-\t-\t-\t-\t-\t\n", r.Rank)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", r.Rank, r.Steps,
			ms(r.MeanStep()), ms(r.Min), ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeCutShort(w, ranks)
}

// writeCutShort says which ranks had steps cut short, which the tables
// leave out; nothing when none had.
func writeCutShort(w io.Writer, ranks []StepStats) error {
	var parts []string
	for _, r := range ranks {
		if r.CutShort > 0 {
			parts = append(parts, fmt.Sprintf("rank %d: %d", r.Rank, r.CutShort))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "steps cut short (failed or interrupted), left out of the figures above: %s\n", strings.Join(parts, ", "))
	return err
}
