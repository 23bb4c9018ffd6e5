package analysis

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/trainscope/trainscope/internal/quantile"
	"github.com/trainscope/trainscope/profiler"
)

// Summary is a run's analysis over its steps. Its figures cover the
// complete steps only (Step.Complete); the others are counted and their
// problems listed.
type Summary struct {
	Steps    int // steps analysed
	Complete int // steps without problems: the figures cover these
	// Pipeline is the shape of the complete steps; its Ideal is NaN when
	// they differ or carry no pipeline labels.
	Pipeline    Pipeline
	Ranks       []RankTotals  // in rank order
	Stages      []StageTotals // in stage order
	Collectives CollectiveTotals
	// Straggler is the rank that caused at least half of all the waiting
	// at collectives over the complete steps (Rank.Caused), and twice any
	// other rank, when that waiting is at least MinStragglerShare of its
	// mean step; profiler.None when none stands out.
	Straggler int
	// Minor reports that rank MinorRank stood out by its share of the
	// waiting but caused less than MinStragglerShare of its mean step: a
	// straggler of microseconds is noise, not a finding.
	Minor     bool
	MinorRank int
	// MinorSpan is, without steps (Stepless), the time the minor rank's
	// collectives spanned, which its waiting was weighed against.
	MinorSpan time.Duration
	// Problems are the distinct problems found (at most maxProblems, each
	// with the first step it was found in); ProblemSteps counts the steps
	// that had any.
	Problems     []string
	ProblemSteps int
	// MaxClockResidual is the largest residual of the clock alignment
	// (Offsets.Residual) over the steps, when clocks were aligned.
	MaxClockResidual time.Duration
	Aligned          bool
	// OneClock says every rank was on one clock (WithOneClock): nothing
	// was aligned, nor needed to be.
	OneClock bool
	// Lost, LostLate and LostUnlabelled are a Sink's Stats of the same
	// names: ranges dropped while recording.
	Lost, LostLate, LostUnlabelled uint64
	// Late counts records that came after their step was analysed (a
	// Sink's Stats.Late, with LateKinds and FirstLate): in no figure.
	Late      uint64
	LateKinds [int(profiler.KindKernel) + 2]uint64
	FirstLate string
	// AlignedOnP2P are the ranks some step aligned on their sends and
	// receives, no collective joining their clock to the others'
	// (Offsets.P2P).
	AlignedOnP2P []int
	// Critical sums the complete steps' critical paths.
	Critical CriticalTotals
	// Stepless marks a CallSink's summary: collectives matched without
	// steps, so Ranks carry only Calls, Waited, Caused, HeldUp and Score,
	// and the step, stage and critical-path figures are zero.
	Stepless bool
	// AlignAfter is, for a CallSink made WithClockAlignment, how many
	// collectives matched across ranks a rank must be in before its clock
	// offset is applied (0 otherwise): with fewer, the report says why the
	// clocks were not aligned.
	AlignAfter int
	// Offsets is a CallSink's latest clock estimate per rank: Offset is
	// how far a rank's departures from collectives lie from each
	// collective's median departure (the median over its latest 256), and
	// Residual the spread about it. Aligned says whether the estimates
	// were applied (WithClockAlignment). Nil for a step analysis.
	Offsets *Offsets
}

// CriticalTotals sums critical paths (see CriticalPath) over steps.
type CriticalTotals struct {
	Steps                  int
	Compute, Transfer, Gap time.Duration
	// ByRank is the path's time on each rank, in rank order.
	ByRank []RankPath
}

// RankPath is one rank's share of critical paths.
type RankPath struct {
	Rank                   int
	Compute, Transfer, Gap time.Duration
}

// Total is the paths' whole length.
func (c CriticalTotals) Total() time.Duration { return c.Compute + c.Transfer + c.Gap }

// RankTotals sums one rank's figures (see Rank) over the complete steps.
type RankTotals struct {
	Rank, Stage, Steps        int
	Calls                     int // complete collectives the rank took part in
	Wall, Busy, Comm, Overlap time.Duration
	Bubble, Span              time.Duration
	Waited, Caused, HeldUp    time.Duration
	Score                     float64 // Caused over every rank's waiting
	// Computed: some step had device-timed compute (Rank.Computed), so
	// Busy and Overlap are measured.
	Computed bool
}

// StageTotals sums one stage's ranks' bubbles over the complete steps.
type StageTotals struct {
	Stage     int
	RankSteps int // ranks × steps summed
	Bubble    time.Duration
	Span      time.Duration // the steps' spans, once per rank-step
	Drain     time.Duration
	Chunks    []time.Duration
}

// Compute is the stage's forward and backward computation per rank and
// step: its Span less its Bubble, the work the schedule spreads over the
// step's span; 0 without a rank-step.
func (s StageTotals) Compute() time.Duration {
	if s.RankSteps <= 0 {
		return 0
	}
	return (s.Span - s.Bubble) / time.Duration(s.RankSteps)
}

// Fraction is Bubble / Span.
func (s StageTotals) Fraction() float64 {
	if s.Span <= 0 {
		return 0
	}
	return float64(s.Bubble) / float64(s.Span)
}

// CollectiveTotals sums the complete steps' complete collectives.
type CollectiveTotals struct {
	Matched int
	// Transfers counts the sends matched with their receives in the
	// complete steps (Step.P2P): a pipeline without data parallelism has
	// them and no collective.
	Transfers                 int
	Incomplete                int           // a CallSink's collectives decided without every rank (a step's make the step incomplete instead)
	Skew, Wait, Transfer      time.Duration // sums (Wait over members)
	MaxSkew                   time.Duration
	P50Skew, P90Skew, P99Skew time.Duration // within 1%
}

const maxProblems = 16

// totals accumulates steps into a Summary in bounded memory.
type totals struct {
	s        Summary
	onPath   map[int]*RankPath
	ranks    map[int]*RankTotals
	stages   map[int]*StageTotals
	skew     *ddsketch.DDSketch
	seen     map[string]bool
	shape    Pipeline
	shapeSet bool
}

func newTotals() *totals {
	sk, err := ddsketch.LogCollapsingLowestDenseDDSketch(0.01, 2048)
	if err != nil {
		panic(err) // valid constants
	}
	return &totals{onPath: map[int]*RankPath{}, ranks: map[int]*RankTotals{}, stages: map[int]*StageTotals{}, skew: sk, seen: map[string]bool{},
		s: Summary{Straggler: profiler.None}}
}

func (t *totals) add(st *Step) {
	t.s.Steps++
	if st.Clock != nil && len(st.Clock.Offset) > 1 {
		// Aligned only where two ranks or more were put on one clock.
		t.s.Aligned = true
		t.s.MaxClockResidual = max(t.s.MaxClockResidual, st.Clock.MaxResidual())
		for _, r := range st.Clock.P2P {
			if !slices.Contains(t.s.AlignedOnP2P, r) {
				t.s.AlignedOnP2P = append(t.s.AlignedOnP2P, r)
			}
		}
	}
	if !st.Complete() {
		t.s.ProblemSteps++
		for _, p := range st.Problems {
			t.problem(st.Step, p)
		}
		return
	}
	t.s.Complete++
	if !t.shapeSet {
		t.shape, t.shapeSet = st.Pipeline, true
	} else if t.shape.Stages != st.Pipeline.Stages || t.shape.Chunks != st.Pipeline.Chunks || t.shape.Microbatches != st.Pipeline.Microbatches {
		t.shape.Ideal = math.NaN()
	}
	for i := range st.Ranks {
		r := &st.Ranks[i]
		rt, ok := t.ranks[r.Rank]
		if !ok {
			rt = &RankTotals{Rank: r.Rank, Stage: r.Stage}
			t.ranks[r.Rank] = rt
		}
		if rt.Stage != r.Stage {
			rt.Stage = profiler.None
		}
		rt.Steps++
		rt.Wall += r.Wall.Len()
		rt.Busy += r.Busy
		rt.Computed = rt.Computed || r.Computed
		rt.Comm += r.Comm
		rt.Overlap += r.Overlap
		rt.Waited += r.Waited
		rt.Caused += r.Caused
		rt.HeldUp += r.HeldUp
		if st.Span.Len() > 0 {
			rt.Bubble += r.Bubble
			rt.Span += st.Span.Len()
		}
	}
	for _, s := range st.Stages {
		stt, ok := t.stages[s.Stage]
		if !ok {
			stt = &StageTotals{Stage: s.Stage}
			t.stages[s.Stage] = stt
		}
		n := time.Duration(s.Ranks)
		stt.RankSteps += s.Ranks
		stt.Bubble += s.Bubble * n
		stt.Drain += s.Drain * n
		stt.Span += st.Span.Len() * n
		for len(stt.Chunks) < len(s.Chunks) {
			stt.Chunks = append(stt.Chunks, 0)
		}
		for c, d := range s.Chunks {
			stt.Chunks[c] += d * n
		}
	}
	if cp := st.Critical; cp != nil {
		t.s.Critical.Steps++
		t.s.Critical.Compute += cp.Compute
		t.s.Critical.Transfer += cp.Transfer
		t.s.Critical.Gap += cp.Gap
		for _, seg := range cp.Segments {
			rp, ok := t.onPath[seg.Rank]
			if !ok {
				rp = &RankPath{Rank: seg.Rank}
				t.onPath[seg.Rank] = rp
			}
			switch seg.Kind {
			case SegmentCompute:
				rp.Compute += seg.Len()
			case SegmentTransfer:
				rp.Transfer += seg.Len()
			default:
				rp.Gap += seg.Len()
			}
		}
	}
	for i := range st.Collectives {
		if c := &st.Collectives[i]; c.Complete {
			t.addCollective(c)
		}
	}
	t.s.Collectives.Transfers += st.P2P.Matched
}

// problem lists p once, with the first step it was found in, up to
// maxProblems distinct ones: a problem that recurs in every step must not
// crowd out the others.
func (t *totals) problem(step int, p string) {
	if !t.seen[p] && len(t.seen) < maxProblems {
		t.seen[p] = true
		t.s.Problems = append(t.s.Problems, fmt.Sprintf("step %d: %s", step, p))
	}
}

// rank returns the totals of rank r, added if new.
func (t *totals) rank(r int) *RankTotals {
	rt, ok := t.ranks[r]
	if !ok {
		rt = &RankTotals{Rank: r, Stage: profiler.None}
		t.ranks[r] = rt
	}
	return rt
}

// addCollective adds a complete collective to the collective totals and
// its members' call counts.
func (t *totals) addCollective(c *Collective) {
	ct := &t.s.Collectives
	ct.Matched++
	ct.Skew += c.Skew
	ct.MaxSkew = max(ct.MaxSkew, c.Skew)
	ct.Transfer += c.Transfer
	for _, m := range c.Members {
		ct.Wait += m.Wait
		t.rank(m.Rank).Calls++
	}
	_ = t.skew.Add(float64(c.Skew))
}

// summary returns a copy of the totals as a Summary.
func (t *totals) summary() Summary {
	s := t.s
	s.Problems = slices.Clone(s.Problems)
	s.AlignedOnP2P = slices.Sorted(slices.Values(s.AlignedOnP2P))
	s.Pipeline = t.shape
	if !t.shapeSet {
		s.Pipeline.Ideal = math.NaN()
	}
	var total time.Duration
	for _, k := range sortedKeys(t.ranks) {
		total += t.ranks[k].Caused
	}
	for _, k := range sortedKeys(t.ranks) {
		r := *t.ranks[k]
		if total > 0 {
			r.Score = float64(r.Caused) / float64(total)
		}
		s.Ranks = append(s.Ranks, r)
	}
	for _, k := range sortedKeys(t.stages) {
		st := *t.stages[k]
		st.Chunks = slices.Clone(st.Chunks)
		s.Stages = append(s.Stages, st)
	}
	s.Critical.ByRank = nil
	for _, k := range sortedKeys(t.onPath) {
		s.Critical.ByRank = append(s.Critical.ByRank, *t.onPath[k])
	}
	if total > 0 {
		s.Straggler = standsOut(len(s.Ranks), func(i int) (int, float64) { return s.Ranks[i].Rank, s.Ranks[i].Score })
		for _, r := range s.Ranks {
			if r.Rank == s.Straggler && float64(r.Caused) < MinStragglerShare*float64(r.Wall) {
				s.Straggler, s.Minor, s.MinorRank = profiler.None, true, r.Rank
			}
		}
	}
	if s.Collectives.Matched > 0 {
		q := func(p float64) time.Duration {
			v, err := quantile.NearestRank(t.skew, p)
			if err != nil {
				return 0
			}
			return min(time.Duration(math.Round(v)), s.Collectives.MaxSkew)
		}
		s.Collectives.P50Skew, s.Collectives.P90Skew, s.Collectives.P99Skew = q(0.5), q(0.9), q(0.99)
	}
	return s
}

// Summarize sums steps into a Summary.
func Summarize(steps []Step) Summary {
	t := newTotals()
	for i := range steps {
		t.add(&steps[i])
	}
	return t.summary()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(num, den time.Duration) string {
	if den <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100*float64(num)/float64(den))
}

// WriteReport writes the summary as the text report's pipeline section.
// What the records could not tell — missing ranks, incomplete
// collectives, steps cut short — is said after the figures, which leave
// those steps out. WithRankRows keeps the per-rank lines of the ranks
// that caused the most waiting.
func WriteReport(w io.Writer, s Summary, opts ...ReportOption) error {
	var c reportConfig
	for _, o := range opts {
		if o != nil {
			o.applyReport(&c)
		}
	}
	if s.Stepless {
		return writeCalls(w, s, c)
	}
	noun := "steps"
	if s.Steps == 1 {
		noun = "step"
	}
	fmt.Fprintf(w, "%d of %d %s complete", s.Complete, s.Steps, noun)
	if s.Complete < s.Steps {
		fmt.Fprintf(w, "; the figures cover the complete ones")
	}
	if s.Complete > 0 && s.Complete < fewSteps {
		fmt.Fprintf(w, " (few: a first step carries warm-up work, first launches and allocations, and one step's figures are not a run's; more steps give steadier ones)")
	}
	fmt.Fprintln(w)
	if s.Lost > 0 {
		fmt.Fprintf(w, "%s dropped while recording (the recorders' buffers were full: the profiler's collector fell behind the ranks); the steps that lost some are left out of the figures", counted(int(min(s.Lost, math.MaxInt)), "range"))
		if n := s.LostLate + s.LostUnlabelled; n > 0 {
			fmt.Fprintf(w, ", but %d of them belonged to steps already analysed or to no step the profiler could name, and the figures may lack them", n)
		}
		fmt.Fprintln(w)
	}
	if s.Complete > 0 {
		if err := writeFigures(w, s, c); err != nil {
			return err
		}
	}
	switch {
	case s.Aligned && s.Offsets != nil:
		// One estimate over the whole run (WithAppliedOffsets).
		writeOffsets(w, "clocks aligned on the run's collective departures; offsets by rank:", s.Offsets)
	case s.Aligned:
		fmt.Fprintf(w, "clocks aligned on collective departures; largest residual %.3f ms%s\n", ms(s.MaxClockResidual), p2pNote(s.AlignedOnP2P))
	case s.OneClock:
		fmt.Fprintln(w, oneClockLine)
	}
	if s.ProblemSteps > 0 {
		fmt.Fprintf(w, "problems in %d steps (left out of the figures):\n", s.ProblemSteps)
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if len(s.Problems) == maxProblems {
			fmt.Fprintf(w, "  (only the first %d distinct problems are listed)\n", maxProblems)
		}
	}
	if s.Late > 0 {
		fmt.Fprintf(w, "%d records came after their step was analysed and are in no figure above (%s; the first: %s)\n", s.Late, lateKinds(s.LateKinds), s.FirstLate)
	}
	return nil
}

// lateKinds says what kinds of record came late: "412 kernel, 107 device".
func lateKinds(n [int(profiler.KindKernel) + 2]uint64) string {
	var parts []string
	for k, c := range n {
		if c == 0 {
			continue
		}
		name := "other"
		if k < len(n)-1 {
			name = profiler.Kind(k).String()
		}
		parts = append(parts, fmt.Sprintf("%d %s", c, name))
	}
	return strings.Join(parts, ", ")
}

// fewSteps is the number of complete steps below which the report says
// its figures rest on few.
const fewSteps = 3

// counted is n and the noun, plural unless n is 1 ("1 chunk", "8
// microbatches").
func counted(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "h"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func writeFigures(w io.Writer, s Summary, rc reportConfig) error {
	p := s.Pipeline
	if len(s.Stages) > 0 {
		chunks := 0
		for _, st := range s.Stages {
			chunks = max(chunks, len(st.Chunks))
		}
		switch {
		case !math.IsNaN(p.Ideal) && p.Given:
			fmt.Fprintf(w, "pipeline: %s × %s × %s (chunks and microbatches as given: the work carries stages only); ideal bubble (p−1)/(v·m+p−1) = %.1f%% of the span (a step's first to last kernel, the optimizer's included)\n",
				counted(p.Stages, "stage"), counted(p.Chunks, "chunk"), counted(p.Microbatches, "microbatch"), 100*p.Ideal)
		case !math.IsNaN(p.Ideal):
			span := "a step's first to last forward/backward"
			if p.Traced {
				span = "a step's first to last kernel, the optimizer's included; chunks and microbatches from the ranges (NVTX, or record_function in a torch.profiler trace) the kernels were launched in"
			}
			fmt.Fprintf(w, "pipeline: %s × %s × %s; ideal bubble (p−1)/(v·m+p−1) = %.1f%% of the span (%s)\n",
				counted(p.Stages, "stage"), counted(p.Chunks, "chunk"), counted(p.Microbatches, "microbatch"), 100*p.Ideal, span)
		case p.Stages > 0 && p.Chunks == 0 && p.Microbatches == 0:
			fmt.Fprintf(w, "pipeline: %d stages; the work carries no chunk or microbatch (traced kernels outside any range named as forward or backward work), so there is no ideal bubble to compare with unless the schedule is given (-pipeline-schedule); the span is a step's first to last kernel, the optimizer's included\n", p.Stages)
		default:
			fmt.Fprintln(w, "pipeline: shape unknown or not the same in every step; no ideal bubble to compare with")
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		rows := rc.stageRows(w, s.Stages)
		fmt.Fprint(tw, "Stage\tRanks×steps\tCompute/step(ms)\tBubble/step(ms)\tBubble %\t")
		for c := range chunks {
			fmt.Fprintf(tw, "chunk %d(ms)\t", c)
		}
		if chunks > 0 {
			fmt.Fprint(tw, "drain(ms)\t")
		}
		fmt.Fprintln(tw)
		for _, st := range rows {
			n := time.Duration(max(st.RankSteps, 1))
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%s\t", st.label, st.RankSteps, ms(st.Compute()), ms(st.Bubble/n), pct(st.Bubble, st.Span))
			for c := range chunks {
				if c < len(st.Chunks) {
					fmt.Fprintf(tw, "%.3f\t", ms(st.Chunks[c]/n))
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
			if chunks > 0 {
				fmt.Fprintf(tw, "%.3f\t", ms(st.Drain/n))
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "(bubble: the span's time with no forward or backward computation, transfers and the optimizer included; a pprof profile's [idle: bubble] frame is the part of it with nothing running)")
		if b, ok := s.Balance(); ok {
			writeBalance(w, b, rc.shared)
		}
	} else if len(s.Ranks) > 0 {
		staged := 0
		for _, r := range s.Ranks {
			if r.Stage != profiler.None {
				staged++
			}
		}
		if staged > 0 {
			// A wrapped pipeline's kernels not traced: stages, no compute.
			fmt.Fprintf(w, "pipeline: %d of %d ranks staged, but no forward or backward computation was timed on the device, so no bubble is counted\n", staged, len(s.Ranks))
		} else {
			fmt.Fprintln(w, "pipeline: none (no rank's forward or backward work carries a stage label), so no bubble is counted; a rank's idle time is its step less its busy time")
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rows := rc.rankRows(w, s.Ranks)
	fmt.Fprintln(tw, "Rank\tStage\tSteps\tBusy %\tComm/step(ms)\tOverlap %\tWaited/step(ms)\tCaused/step(ms)\tStraggler score\t")
	for _, r := range rows {
		n := time.Duration(max(r.Steps, 1))
		stage := "-"
		if r.Stage != profiler.None {
			stage = fmt.Sprint(r.Stage)
		}
		busy, overlap := pct(r.Busy, r.Wall), pct(r.Overlap, r.Comm)
		if !r.Computed {
			busy, overlap = "-", "-" // nothing computed was timed: unknown, not 0
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.3f\t%s\t%.3f\t%.3f\t%.2f\t\n", r.Rank, stage, r.Steps, busy,
			ms(r.Comm/n), overlap, ms(r.Waited/n), ms(r.Caused/n), r.Score)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c := s.Collectives
	switch {
	case c.Matched == 0 && s.Complete > 0 && c.Transfers > 0:
		fmt.Fprintf(w, "collectives: none in the complete steps, whose communication is point to point (%d sends matched with their receives)\n", c.Transfers)
	case c.Matched == 0 && s.Complete > 0:
		fmt.Fprintln(w, "collectives: none in the complete steps")
	case c.Matched == 0:
		fmt.Fprintln(w, "collectives: none matched across ranks")
	default:
		n := time.Duration(c.Matched)
		fmt.Fprintf(w, "collectives: %d matched across ranks; arrival skew p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; mean per call: waiting %.3f ms (all ranks), transfer %.3f ms\n",
			c.Matched, ms(c.P50Skew), ms(c.P90Skew), ms(c.P99Skew), ms(c.MaxSkew), ms(c.Wait/n), ms(c.Transfer/n))
	}
	if cp := s.Critical; cp.Steps > 0 && cp.Total() > 0 {
		n := time.Duration(cp.Steps)
		fmt.Fprintf(w, "critical path: %.3f ms per step (the chain of computations and transfers across ranks that set the step's time): compute %s%%, transfers %s%%, gaps %s%%; by rank:",
			ms(cp.Total()/n), pct(cp.Compute, cp.Total()), pct(cp.Transfer, cp.Total()), pct(cp.Gap, cp.Total()))
		by := cp.ByRank
		if rc.rows > 0 && len(by) > rc.rows {
			// The ranks the path spends most time on.
			by = slices.Clone(by)
			slices.SortStableFunc(by, func(a, b RankPath) int {
				return cmp.Compare(b.Compute+b.Transfer+b.Gap, a.Compute+a.Transfer+a.Gap)
			})
			by = by[:rc.rows]
		}
		for _, r := range by {
			fmt.Fprintf(w, " %d %s%%", r.Rank, pct(r.Compute+r.Transfer+r.Gap, cp.Total()))
		}
		if len(by) < len(cp.ByRank) {
			fmt.Fprintf(w, " (the %d of %d ranks it spends most on)", len(by), len(cp.ByRank))
		}
		fmt.Fprintln(w)
	}
	switch {
	case s.Straggler != profiler.None:
		for _, r := range s.Ranks {
			if r.Rank == s.Straggler {
				n := time.Duration(max(r.Steps, 1))
				fmt.Fprintf(w, "straggler: rank %d caused %.0f%% of the waiting at collectives (%.3f ms per step; it held the collectives up %.3f ms per step: their last arrival less the next-latest)\n",
					r.Rank, 100*r.Score, ms(r.Caused/n), ms(r.HeldUp/n))
			}
		}
	case s.Minor:
		for _, r := range s.Ranks {
			if r.Rank == s.MinorRank {
				n := time.Duration(max(r.Steps, 1))
				fmt.Fprintf(w, "straggler: none that matters: rank %d caused %.0f%% of the waiting at collectives, but %.3f ms per step, under %.0f%% of its mean step (%.3f ms)\n",
					r.Rank, 100*r.Score, ms(r.Caused/n), 100*MinStragglerShare, ms(r.Wall/n))
			}
		}
	case c.Matched > 0:
		fmt.Fprintln(w, "straggler: no rank stands out (none caused half the waiting at collectives and twice any other)")
	case s.Complete > 0:
		// A pipeline without data parallelism: a receive's wait is the
		// pipeline's own (the bubble), so no rank is charged with it.
		line := "straggler: not measured: stragglers are found by the waiting at collectives, and these steps have none"
		if b, ok := s.Balance(); ok {
			if b.StandsOut() {
				line += fmt.Sprintf("; but the pipeline's stages are uneven: the others wait for stage %d (%s), which computes %.3f ms a step more than the next (stage balance, above)",
					b.Slowest.Stage, ranksOfStage(s.Ranks, b.Slowest.Stage), ms(b.Lead()))
			} else {
				line += "; nor are the pipeline's stages uneven (stage balance, above)"
			}
		} else if cp := s.Critical; cp.Steps > 0 && cp.Total() > 0 {
			line += " (the critical path's share by rank, above, says which ranks set the step)"
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// MinStragglerShare is the least waiting, as a share of its mean step, a
// rank must cause at collectives to be named the run's straggler.
const MinStragglerShare = 0.01

// writeCalls writes a CallSink's summary: the collectives matched across
// ranks, each rank's waiting, the straggler, the clocks.
func writeCalls(w io.Writer, s Summary, rc reportConfig) error {
	c := s.Collectives
	fmt.Fprintf(w, "collectives: %d matched across ranks", c.Matched)
	if c.Incomplete > 0 {
		fmt.Fprintf(w, ", %d not recorded by every rank of their group (left out of the figures)", c.Incomplete)
	}
	if c.Matched == 0 {
		fmt.Fprintln(w)
	} else {
		n := time.Duration(c.Matched)
		fmt.Fprintf(w, "; arrival skew p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; mean per call: waiting %.3f ms (all ranks), transfer %.3f ms\n",
			ms(c.P50Skew), ms(c.P90Skew), ms(c.P99Skew), ms(c.MaxSkew), ms(c.Wait/n), ms(c.Transfer/n))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		rows := rc.rankRows(w, s.Ranks)
		fmt.Fprintln(tw, "Rank\tCalls\tWaited(ms)\tWaited/call(ms)\tCaused(ms)\tHeld up(ms)\tStraggler score\t")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t\n", r.Rank, r.Calls, ms(r.Waited), ms(r.Waited/time.Duration(max(r.Calls, 1))), ms(r.Caused), ms(r.HeldUp), r.Score)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		switch {
		case s.Straggler != profiler.None:
			for _, r := range s.Ranks {
				if r.Rank == s.Straggler {
					fmt.Fprintf(w, "straggler: rank %d caused %.0f%% of the waiting at collectives (%.3f ms; it held them up %.3f ms: their last arrival less the next-latest)\n",
						r.Rank, 100*r.Score, ms(r.Caused), ms(r.HeldUp))
				}
			}
		case s.Minor:
			for _, r := range s.Ranks {
				if r.Rank == s.MinorRank {
					fmt.Fprintf(w, "straggler: none that matters: rank %d caused %.0f%% of the waiting at collectives, but %.3f ms in all, under %.0f%% of the %.3f s its collectives spanned\n",
						r.Rank, 100*r.Score, ms(r.Caused), 100*MinStragglerShare, s.MinorSpan.Seconds())
				}
			}
		default:
			fmt.Fprintln(w, "straggler: no rank stands out (none caused half the waiting at collectives and twice any other)")
		}
	}
	if o := s.Offsets; o != nil && len(o.Residual) > 0 {
		most := 0
		for _, n := range o.Samples {
			most = max(most, n)
		}
		switch {
		case s.OneClock:
			fmt.Fprint(w, oneClockLine+"; departures from collectives against their median, by rank:")
		case s.Aligned:
			fmt.Fprint(w, "clocks aligned on collective departures; offsets by rank:")
		case s.AlignAfter > 0 && most < s.AlignAfter:
			fmt.Fprintf(w, "clocks not aligned: only %d collectives matched across ranks, and alignment needs a rank in at least %d; departures from collectives against their median, by rank:", most, s.AlignAfter)
		default:
			fmt.Fprint(w, "clocks not aligned; departures from collectives against their median, by rank:")
		}
		writeOffsets(w, "", o)
	}
	if len(s.Problems) > 0 {
		fmt.Fprintln(w, "problems (left out of the figures):")
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if len(s.Problems) == maxProblems {
			fmt.Fprintf(w, "  (only the first %d distinct problems are listed)\n", maxProblems)
		}
	}
	return nil
}

// oneClockLine says the ranks shared one clock (WithOneClock).
const oneClockLine = "clocks: every rank on one clock (one host's processes, or records aligned before), none shifted"

// writeOffsets writes head, then each rank's offset and the largest
// residual, as one line.
func writeOffsets(w io.Writer, head string, o *Offsets) {
	fmt.Fprint(w, head)
	for _, r := range sortedKeys(o.Residual) {
		fmt.Fprintf(w, " %d %+.3f ms", r, ms(o.Offset[r]))
	}
	fmt.Fprintf(w, "; largest residual %.3f ms%s\n", ms(o.MaxResidual()), p2pNote(o.P2P))
}

// p2pNote names the ranks aligned on sends and receives, if any.
func p2pNote(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	their := "their clocks"
	if len(ranks) == 1 {
		their = "its clock"
	}
	return fmt.Sprintf("; %s on sends and receives, no collective joining %s to the others' (coarser: a send may be done before its receive)", ranksList(ranks), their)
}

// ReportOption adjusts what WriteReport writes.
type ReportOption interface{ applyReport(*reportConfig) }

type reportConfig struct {
	rows   int
	shared string // WithSharedDevices
}

type reportOptionFunc func(*reportConfig)

func (f reportOptionFunc) applyReport(c *reportConfig) { f(c) }

// WithRankRows(n) keeps n lines of the per-rank table where there are
// more ranks: those of the ranks that caused the most waiting, then
// waited the most, in that order (where no rank waited at a collective,
// those that communicated the most per step), under a line saying so;
// the critical path's share by rank likewise names the n ranks it spends
// most time on; and the per-stage table of more than n stages sums bands of
// consecutive stages into at most n lines, naming the stages with the
// most and the least bubble. The figures and findings around them still
// cover every rank and stage. It is for a screen, where a thousand lines
// would bury them; n < 1 keeps every line.
func WithRankRows(n int) ReportOption {
	return reportOptionFunc(func(c *reportConfig) { c.rows = n })
}

// WithSharedDevices says that the ranks shared their devices (how, in
// words: "2 ranks sharing 1 device"), as a trainer placing several ranks
// on one device does: the stage balance line then says that a stage's
// computation includes the time its kernels waited for the others'. An
// empty how says nothing.
func WithSharedDevices(how string) ReportOption {
	return reportOptionFunc(func(c *reportConfig) { c.shared = how })
}

// rankRows returns the ranks whose lines the table holds: all of them,
// or c.rows of them, those that caused the most waiting (then waited the
// most, then the lowest rank) first, or where none waited those with the
// most communication per step, after a line that says so.
func (c reportConfig) rankRows(w io.Writer, ranks []RankTotals) []RankTotals {
	if c.rows < 1 || len(ranks) <= c.rows {
		return ranks
	}
	rows := slices.Clone(ranks)
	if !slices.ContainsFunc(rows, func(r RankTotals) bool { return r.Caused > 0 || r.Waited > 0 }) {
		// Nobody waited at a collective (a pipeline without data
		// parallelism): rank 0 to 15 would say nothing. The ranks that
		// spent the most time communicating, waiting for their peers'
		// transfers among it, stand out instead.
		perStep := func(r RankTotals) time.Duration { return r.Comm / time.Duration(max(r.Steps, 1)) }
		slices.SortStableFunc(rows, func(a, b RankTotals) int { return cmp.Compare(perStep(b), perStep(a)) })
		fmt.Fprintf(w, "no rank waited at a collective; the %d of %d ranks with the most communication per step (the others left out here):\n", c.rows, len(ranks))
		return rows[:c.rows]
	}
	slices.SortStableFunc(rows, func(a, b RankTotals) int {
		if a.Caused != b.Caused {
			return cmp.Compare(b.Caused, a.Caused)
		}
		return cmp.Compare(b.Waited, a.Waited)
	})
	fmt.Fprintf(w, "the %d of %d ranks that caused the most waiting, then waited the most (the others left out here):\n", c.rows, len(ranks))
	return rows[:c.rows]
}

// stageRow is a line of the per-stage table: one stage's totals, or a
// band of consecutive stages' summed.
type stageRow struct {
	StageTotals
	label string
}

// stageRows returns the lines of the per-stage table: one per stage, or,
// with more than c.rows stages, at most c.rows bands of as many
// consecutive stages each (the last band may hold fewer), their totals
// summed so that a band's bubble per step is its stages' mean, after a
// line naming the stages with the most and the least bubble per step,
// which a band's mean would hide. Work of no stage keeps its own line.
func (c reportConfig) stageRows(w io.Writer, stages []StageTotals) []stageRow {
	var rows []stageRow
	var staged []StageTotals
	for _, st := range stages {
		if st.Stage == profiler.None {
			rows = append(rows, stageRow{st, "-"})
			continue
		}
		staged = append(staged, st)
	}
	if c.rows < 1 || len(staged) <= c.rows {
		for _, st := range staged {
			rows = append(rows, stageRow{st, fmt.Sprint(st.Stage)})
		}
		return rows
	}
	perStep := func(st StageTotals) time.Duration { return st.Bubble / time.Duration(max(st.RankSteps, 1)) }
	most := slices.MaxFunc(staged, func(a, b StageTotals) int { return cmp.Compare(perStep(a), perStep(b)) })
	least := slices.MinFunc(staged, func(a, b StageTotals) int { return cmp.Compare(perStep(a), perStep(b)) })
	size := (len(staged) + c.rows - 1) / c.rows
	fmt.Fprintf(w, "%d stages, summed in bands of %d consecutive (the stages' own lines left out here); the most bubble: stage %d (%.3f ms per step), the least: stage %d (%.3f ms)\n",
		len(staged), size, most.Stage, ms(perStep(most)), least.Stage, ms(perStep(least)))
	for band := range slices.Chunk(staged, size) {
		sum := StageTotals{Stage: band[0].Stage}
		for _, st := range band {
			sum.RankSteps += st.RankSteps
			sum.Bubble += st.Bubble
			sum.Span += st.Span
			sum.Drain += st.Drain
			for i, d := range st.Chunks {
				if i == len(sum.Chunks) {
					sum.Chunks = append(sum.Chunks, 0)
				}
				sum.Chunks[i] += d
			}
		}
		label := fmt.Sprint(band[0].Stage)
		if last := band[len(band)-1].Stage; last != band[0].Stage {
			label += "–" + fmt.Sprint(last)
		}
		rows = append(rows, stageRow{sum, label})
	}
	return rows
}
