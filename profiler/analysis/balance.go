package analysis

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// StageBalance compares a pipeline's stages by their forward and backward
// computation per step (StageTotals.Compute). A pipeline goes at the pace
// of its slowest stage: in every microbatch the stages after it wait for
// its activations and those before it for its gradients, which shows on
// their side as bubble beyond the ideal. Without data parallelism there
// is no collective to find a straggler by (Summary.Straggler); this is
// where such a job's answer to "which rank holds the others back" is.
type StageBalance struct {
	// Slowest is the stage computing the most per step (the lowest
	// numbered of equals); Next and Least are, of the other stages, the
	// one computing the most and the one computing the least (the lowest
	// numbered of equals).
	Slowest, Next, Least StageCompute
	// Mean is the stages' mean computation per step.
	Mean time.Duration
}

// StageCompute is one stage's forward and backward computation per rank
// and step.
type StageCompute struct {
	Stage   int
	Compute time.Duration
}

// MinStageLead is the least share of its own computation by which the
// slowest stage must lead the next for StageBalance.StandsOut: below it,
// a lead is within what the work's own variation and the stages' unequal
// extras (the last stage's loss) make.
const MinStageLead = 0.05

// Lead is what the slowest stage computes per step beyond the next: the
// time it alone adds to the step, which the next stage spends waiting.
func (b StageBalance) Lead() time.Duration { return b.Slowest.Compute - b.Next.Compute }

// Excess is what the slowest stage computes per step beyond the mean:
// about what spreading the work evenly over the stages would save.
func (b StageBalance) Excess() time.Duration { return b.Slowest.Compute - b.Mean }

// StandsOut reports that the slowest stage leads the next by at least
// MinStageLead of its own computation.
func (b StageBalance) StandsOut() bool {
	return b.Slowest.Compute > 0 && float64(b.Lead()) >= MinStageLead*float64(b.Slowest.Compute)
}

// Balance compares the stages of the complete steps; ok is false with
// fewer than two stages that computed (work of no stage, a job without a
// pipeline and stages without forward or backward computation are left
// out).
func (s Summary) Balance() (b StageBalance, ok bool) {
	var all []StageCompute
	for _, st := range s.Stages {
		if c := st.Compute(); st.Stage != profiler.None && st.RankSteps > 0 && c > 0 {
			all = append(all, StageCompute{st.Stage, c})
		}
	}
	return balanceOf(all)
}

// Balance compares the step's stages by their computation within its
// span (the span less the mean bubble of their ranks), as Summary.Balance
// does over the run.
func (s *Step) Balance() (b StageBalance, ok bool) {
	span := s.Span.Len()
	var all []StageCompute
	for _, st := range s.Stages {
		if c := span - st.Bubble; st.Stage != profiler.None && st.Ranks > 0 && c > 0 {
			all = append(all, StageCompute{st.Stage, c})
		}
	}
	return balanceOf(all)
}

// balanceOf compares the stages of all (in stage order).
func balanceOf(all []StageCompute) (b StageBalance, ok bool) {
	if len(all) < 2 {
		return StageBalance{}, false
	}
	var sum time.Duration
	slowest := 0
	for i, sc := range all {
		sum += sc.Compute
		if sc.Compute > all[slowest].Compute {
			slowest = i
		}
	}
	b.Slowest, b.Mean = all[slowest], sum/time.Duration(len(all))
	// The next and the least among the others: with stages of equal
	// computation, the least is never the slowest itself.
	others := slices.Delete(all, slowest, slowest+1)
	b.Next, b.Least = others[0], others[0]
	for _, sc := range others[1:] {
		if sc.Compute > b.Next.Compute {
			b.Next = sc
		}
		if sc.Compute < b.Least.Compute {
			b.Least = sc
		}
	}
	return b, true
}

// writeBalance writes the report's stage balance line; shared, where
// not empty, says how the ranks shared their devices.
func writeBalance(w io.Writer, b StageBalance, shared string) {
	fmt.Fprintf(w, "stage balance (computation per step within the span): stage %d the most, %.3f ms; ", b.Slowest.Stage, ms(b.Slowest.Compute))
	lead := pct(b.Lead(), b.Slowest.Compute)
	if b.Next == b.Least {
		fmt.Fprintf(w, "the next and least, stage %d, %.3f ms (%s%% less); the mean %.3f ms", b.Next.Stage, ms(b.Next.Compute), lead, ms(b.Mean))
	} else {
		fmt.Fprintf(w, "the next, stage %d, %.3f ms (%s%% less); the least, stage %d, %.3f ms; the mean %.3f ms",
			b.Next.Stage, ms(b.Next.Compute), lead, b.Least.Stage, ms(b.Least.Compute), ms(b.Mean))
	}
	if !b.StandsOut() {
		fmt.Fprintf(w, " — within %.0f%%: no stage holds the others back", 100*MinStageLead)
	} else {
		fmt.Fprintf(w, " — a pipeline goes at its slowest stage's pace: the others wait for stage %d, and spreading the work evenly over the stages would save about %.3f ms a step (the most less the mean)",
			b.Slowest.Stage, ms(b.Excess()))
	}
	if shared != "" {
		fmt.Fprintf(w, "; but with %s, a stage's computation includes the time its kernels waited for the other ranks' (docs/analysis.md, Limits)", shared)
	}
	fmt.Fprintln(w)
}

// ranksOfStage is "rank 3" or "ranks 1, 5": the ranks of stage among
// ranks.
func ranksOfStage(ranks []RankTotals, stage int) string {
	var in []int
	for _, r := range ranks {
		if r.Stage == stage {
			in = append(in, r.Rank)
		}
	}
	if len(in) == 0 {
		return "no rank labelled with it"
	}
	return ranksList(in)
}
