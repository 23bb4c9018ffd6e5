package profiler

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// StepName is the name of the top-level range that brackets one training
// step; StepBreakdown accounts time per range of this name.
const StepName = "step"

// RankSteps is one rank's account of its steps: wall time, and the part of
// it the rank's device was busy with forward and backward work. The rest is
// idle time — the pipeline bubble as this rank saw it, plus waits for
// communication and the optimizer.
type RankSteps struct {
	Rank  int
	Stage int // the stage its forward and backward ranges carried; None when they carried none or several
	Steps int
	Wall  time.Duration // sum of the steps' host wall time
	Busy  time.Duration // union of the device intervals of forward and backward ranges directly inside each step, clipped to it
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

// MeanStep is the mean host wall time of a step.
func (r RankSteps) MeanStep() time.Duration {
	if r.Steps == 0 {
		return 0
	}
	return r.Wall / time.Duration(r.Steps)
}

// StepBreakdown accounts every rank's step ranges (top-level ranges named
// StepName): wall time, and busy time as the union of the device intervals
// of the Forward and Backward ranges directly inside each step (their host
// intervals where they have no device time), clipped to the step. Ranks
// come out in order.
func StepBreakdown(records []Record) []RankSteps {
	type key struct {
		rank int
		id   uint64
	}
	type step struct {
		start, end time.Duration
		work       [][2]time.Duration
	}
	steps := map[key]*step{}
	for i := range records {
		r := &records[i]
		if r.Depth == 0 && r.Name == StepName {
			steps[key{r.Rank, r.ID}] = &step{start: r.HostStart, end: r.HostEnd}
		}
	}
	stages := map[int]int{}
	for i := range records {
		r := &records[i]
		if r.Phase != Forward && r.Phase != Backward {
			continue
		}
		s, ok := steps[key{r.Rank, r.Parent}]
		if !ok {
			continue
		}
		iv := [2]time.Duration{r.HostStart, r.HostEnd}
		if r.HasDevice {
			iv = [2]time.Duration{r.DeviceStart, r.DeviceEnd}
		}
		s.work = append(s.work, iv)
		switch st, seen := stages[r.Rank]; {
		case !seen:
			stages[r.Rank] = int(r.Stage)
		case st != int(r.Stage):
			stages[r.Rank] = None
		}
	}
	byRank := map[int]*RankSteps{}
	for k, s := range steps {
		rs, ok := byRank[k.rank]
		if !ok {
			st, seen := stages[k.rank]
			if !seen {
				st = None
			}
			rs = &RankSteps{Rank: k.rank, Stage: st}
			byRank[k.rank] = rs
		}
		rs.Steps++
		rs.Wall += s.end - s.start
		rs.Busy += union(s.work, s.start, s.end)
	}
	out := make([]RankSteps, 0, len(byRank))
	for _, rs := range byRank {
		out = append(out, *rs)
	}
	slices.SortFunc(out, func(a, b RankSteps) int { return cmp.Compare(a.Rank, b.Rank) })
	return out
}

// union is the length of the union of the intervals, each clipped to
// [lo, hi].
func union(iv [][2]time.Duration, lo, hi time.Duration) time.Duration {
	clipped := make([][2]time.Duration, 0, len(iv))
	for _, x := range iv {
		s, e := max(x[0], lo), min(x[1], hi)
		if e > s {
			clipped = append(clipped, [2]time.Duration{s, e})
		}
	}
	slices.SortFunc(clipped, func(a, b [2]time.Duration) int { return cmp.Compare(a[0], b[0]) })
	var total, curS, curE time.Duration
	for i, x := range clipped {
		if i == 0 || x[0] > curE {
			total += curE - curS
			curS, curE = x[0], x[1]
			continue
		}
		curE = max(curE, x[1])
	}
	return total + curE - curS
}

// WriteStepBreakdown writes one line per rank — steps, mean step time, busy
// and idle shares — then names the slowest rank against the median, and,
// when ideal is positive, the schedule's ideal bubble fraction to compare
// the idle shares with.
func WriteStepBreakdown(w io.Writer, ranks []RankSteps, ideal float64) error {
	if len(ranks) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Rank\tStage\tSteps\tMean step(ms)\tBusy %\tIdle %\t")
	for _, r := range ranks {
		stage := "-"
		if r.Stage != None {
			stage = fmt.Sprint(r.Stage)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%.1f\t%.1f\t\n", r.Rank, stage, r.Steps,
			float64(r.MeanStep())/float64(time.Millisecond), 100*(1-r.IdleFraction()), 100*r.IdleFraction())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	means := make([]time.Duration, len(ranks))
	slowest := ranks[0]
	for i, r := range ranks {
		means[i] = r.MeanStep()
		if r.MeanStep() > slowest.MeanStep() {
			slowest = r
		}
	}
	slices.Sort(means)
	median := means[(len(means)-1)/2] // the lower median: with two ranks, the faster one
	if median > 0 {
		fmt.Fprintf(w, "slowest rank: %d, mean step %.3f ms, %+.1f%% against the median\n", slowest.Rank,
			float64(slowest.MeanStep())/float64(time.Millisecond), 100*(float64(slowest.MeanStep())/float64(median)-1))
	}
	if ideal > 0 {
		fmt.Fprintf(w, "ideal pipeline bubble for this schedule: %.1f%% of a step (idle above it is communication, optimizer and imbalance)\n", 100*ideal)
	}
	return nil
}
