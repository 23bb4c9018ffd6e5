package profiler

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// StepName is the name of the top-level range that brackets one training
// step; StepBreakdown accounts time per range of this name.
const StepName = "step"

// RankSteps is one rank's account of its steps: wall time, and the part of
// it the rank was busy computing (see Activity: device time of forward,
// backward and optimizer ranges, less transfers and input waits on the same
// stream). The rest is idle time — the pipeline bubble as this rank saw it,
// waits for communication, transfers nothing overlaps, host work.
type RankSteps struct {
	Rank  int
	Stage int // the stage label of its step ranges; None when they carried none or several
	Steps int
	Wall  time.Duration // sum of the steps' host wall time
	Busy  time.Duration // sum of the steps' busy time
	// Computed reports that some step had a device-timed compute range
	// (StepTime.Computed): without one, Busy is not measured.
	Computed bool
	// CutShort counts the steps whose step range was cut short
	// (Record.CutShort): they are not in Steps, Wall or Busy.
	CutShort int
	// First is the rank's first step (the lowest step label), counted in
	// Steps, Wall and Busy like the others. It is often a warm-up —
	// allocation, autotuning, communicator setup — many times longer
	// than the rest, which WriteStepBreakdown then sets apart (see
	// WarmUpRatio). Zero where the account was not made step by step.
	First StepTime
}

// addFirst keeps st as the rank's first step when it comes before the
// one kept (by step label; the first seen where labels are missing).
func (r *RankSteps) addFirst(st StepTime) {
	if r.Steps == 0 || st.Step != None && r.First.Step != None && st.Step < r.First.Step {
		r.First = st
	}
}

// Idle is Wall − Busy.
func (r RankSteps) Idle() time.Duration { return r.Wall - r.Busy }

// IdleFraction is Idle / Wall, 0 for no steps.
func (r RankSteps) IdleFraction() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(r.Idle()) / float64(r.Wall)
}

// BusyFraction is Busy / Wall, 0 for no steps.
func (r RankSteps) BusyFraction() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(r.Busy) / float64(r.Wall)
}

// MeanStep is the mean host wall time of a step.
func (r RankSteps) MeanStep() time.Duration {
	if r.Steps == 0 {
		return 0
	}
	return r.Wall / time.Duration(r.Steps)
}

// StepBreakdown accounts every rank's steps (top-level ranges named
// StepName, grouped with their work by rank and step label) with a
// StepAccountant, the same accounting the metrics use. Ranks come out in
// order.
func StepBreakdown(records []Record) []RankSteps {
	a := NewStepAccountant()
	for i := range records {
		a.Add(&records[i])
	}
	byRank := map[int]*RankSteps{}
	a.Finish(func(st StepTime) {
		rs, ok := byRank[st.Rank]
		if !ok {
			rs = &RankSteps{Rank: st.Rank, Stage: st.Stage}
			byRank[st.Rank] = rs
		}
		if st.CutShort {
			rs.CutShort++
			return
		}
		if rs.Stage != st.Stage {
			rs.Stage = None
		}
		rs.addFirst(st)
		rs.Steps++
		rs.Wall += st.Wall()
		rs.Busy += st.Busy
		rs.Computed = rs.Computed || st.Computed
	}, nil)
	out := make([]RankSteps, 0, len(byRank))
	for _, rs := range byRank {
		out = append(out, *rs)
	}
	slices.SortFunc(out, func(a, b RankSteps) int { return cmp.Compare(a.Rank, b.Rank) })
	return out
}

// median is the median of sorted values: the middle one, or the mean of
// the two middle ones.
func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// StandOut is how far above the median of the ranks' mean steps a rank's
// mean must be for WriteStepBreakdown to name it. In a synchronous
// pipeline every rank takes the step's time, whoever holds it up: the
// means differ only by where each rank's first and last steps begin and
// end, a few percent of a step on short runs (6% on a 1-step run of
// -pp 4), and naming the largest of them would point at noise. Who holds
// the others up is the straggler analysis's finding, not this one's.
const StandOut = 0.10

// WriteStepBreakdown writes one line per rank — steps, mean step time, busy
// and idle shares — then, with more than one rank, a line on how the
// ranks' mean steps compare with their median: the rank with the longest
// one when it is more than StandOut above the median, else how close they
// all are; and, when ideal is positive, the schedule's ideal bubble
// fraction to compare the idle shares with. WithRankRows keeps the lines
// of the ranks with the longest mean step.
func WriteStepBreakdown(w io.Writer, ranks []RankSteps, ideal float64, opts ...TableOption) error {
	if err := checkWriter("WriteStepBreakdown", w); err != nil {
		return err
	}
	if len(ranks) == 0 {
		return nil
	}
	rows := standingOut(w, len(ranks), tableOptions(opts).rows, func(i int) int64 {
		if ranks[i].Steps == 0 {
			return -1
		}
		return int64(ranks[i].MeanStep())
	}, "the longest mean step")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Rank\tStage\tSteps\tMean step(ms)\tBusy %\tIdle %\t")
	var uncomputed []int
	for _, i := range rows {
		r := ranks[i]
		stage := "-"
		if r.Stage != None {
			stage = fmt.Sprint(r.Stage)
		}
		if r.Steps == 0 {
			// Every step of the rank was cut short: no figure to give.
			fmt.Fprintf(tw, "%d\t%s\t0\t-\t-\t-\t\n", r.Rank, stage)
			continue
		}
		if !r.Computed {
			// No compute was timed: busy and idle are unknown, not 0 and 100.
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t-\t-\t\n", r.Rank, stage, r.Steps, float64(r.MeanStep())/float64(time.Millisecond))
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%.1f\t%.1f\t\n", r.Rank, stage, r.Steps,
			float64(r.MeanStep())/float64(time.Millisecond), 100*r.BusyFraction(), 100*r.IdleFraction())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range ranks { // every rank's, shown or not
		if r.Steps > 0 && !r.Computed {
			uncomputed = append(uncomputed, r.Rank)
		}
	}
	if len(uncomputed) > 0 {
		who := "ranks " + intsText(uncomputed)
		if len(uncomputed) == 1 {
			who = fmt.Sprintf("rank %d", uncomputed[0])
		}
		fmt.Fprintf(w, "busy: not measured on %s: no compute range was timed on the device in their steps (a wrapped command whose kernels were not traced: -kernels=false, or CUPTI unavailable; docs/wrap.md)\n", who)
	}
	var means []time.Duration
	var longest RankSteps
	for _, r := range ranks {
		if r.Steps == 0 {
			continue
		}
		means = append(means, r.MeanStep())
		if len(means) == 1 || r.MeanStep() > longest.MeanStep() {
			longest = r
		}
	}
	slices.Sort(means)
	// One rank has nothing to stand out against.
	if len(means) > 1 && median(means) > 0 {
		med := median(means)
		ms := float64(med) / float64(time.Millisecond)
		above := float64(longest.MeanStep())/float64(med) - 1
		if above > StandOut {
			fmt.Fprintf(w, "longest mean step: rank %d, %.3f ms, %.1f%% above the median (%.3f ms) (who holds the others up: the straggler analysis)\n",
				longest.Rank, float64(longest.MeanStep())/float64(time.Millisecond), 100*above, ms)
		} else {
			spread := max(above, 1-float64(means[0])/float64(med))
			fmt.Fprintf(w, "mean step: every rank within %.1f%% of the median (%.3f ms), none more than %.0f%% above it (who holds the others up: the straggler analysis)\n",
				100*spread, ms, 100*StandOut)
		}
	}
	if line := warmUpLine(ranks); line != "" {
		fmt.Fprintln(w, line)
	}
	if ideal > 0 {
		fmt.Fprintf(w, "ideal pipeline bubble for this schedule: %.1f%% of a step (idle above it is communication, optimizer and imbalance)\n", 100*ideal)
	}
	return nil
}

// WarmUpRatio is how many times the mean of a rank's other steps its first
// step must last, on every rank, for WriteStepBreakdown to set it apart as
// a warm-up and give the figures without it. Only runs of three steps or
// more on every rank are judged: with fewer, "the others" is one step.
const WarmUpRatio = 2.0

// valueRange is the least and greatest of some values.
type valueRange struct {
	lo, hi float64
	n      int
}

func (s *valueRange) add(v float64) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.n++
}

// text is "lo–hi" in format, or one value where both read the same.
func (s valueRange) text(format string) string {
	lo, hi := fmt.Sprintf(format, s.lo), fmt.Sprintf(format, s.hi)
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// warmUpLine says, when every rank's first step lasted WarmUpRatio times
// the mean of its others or more, how long it took and what the mean step
// and busy share are without it; "" otherwise.
func warmUpLine(ranks []RankSteps) string {
	var took, times, mean, busy valueRange
	step, sameStep := None, true
	for _, r := range ranks {
		if r.Steps == 0 {
			continue
		}
		first := r.First.Wall()
		if r.Steps < 3 || first <= 0 || r.Wall-first <= 0 {
			return ""
		}
		// In float: a mean truncated to whole nanoseconds may be 0.
		rest := float64(r.Wall-first) / float64(r.Steps-1)
		ratio := float64(first) / rest
		if ratio < WarmUpRatio {
			return ""
		}
		if took.n == 0 {
			step = r.First.Step
		} else if step != r.First.Step {
			sameStep = false
		}
		took.add(float64(first) / float64(time.Millisecond))
		times.add(ratio)
		mean.add(rest / float64(time.Millisecond))
		if r.Computed {
			busy.add(100 * float64(r.Busy-r.First.Busy) / float64(r.Wall-first))
		}
	}
	if took.n == 0 {
		return ""
	}
	which := "the first step"
	if sameStep && step != None {
		which = fmt.Sprintf("the first step (step %d)", step)
	}
	every := "on every rank"
	if took.n == 1 {
		every = "on the one rank"
	}
	line := fmt.Sprintf("warm-up: %s took %s ms, %s× the mean of the others %s; without it the mean step is %s ms",
		which, took.text("%.3f"), times.text("%.1f"), every, mean.text("%.3f"))
	if busy.n > 0 {
		line += fmt.Sprintf(" and busy %s%%", busy.text("%.1f"))
	}
	return line + " (the report's figures include it)"
}

// intsText is "0, 1, 2".
func intsText(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
