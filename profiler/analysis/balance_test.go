package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestStageBalance: stages' computation per step is their span less
// their bubble over their rank-steps; the slowest, the next and the
// least are found among the stages that computed, work of no stage left
// out, and the slowest stands out only when it leads the next by 5% of
// its own computation or more.
func TestStageBalance(t *testing.T) {
	ms := time.Millisecond
	// stage: ranks×steps, and the span and bubble summed over them.
	stage := func(s, rankSteps int, span, bubble time.Duration) StageTotals {
		return StageTotals{Stage: s, RankSteps: rankSteps, Span: span, Bubble: bubble}
	}
	for _, c := range []struct {
		name                 string
		stages               []StageTotals
		ok                   bool
		slowest, next, least StageCompute
		mean, lead, excess   time.Duration
		standsOut            bool
	}{
		{name: "one stage", stages: []StageTotals{stage(0, 4, 400*ms, 100*ms)}},
		{name: "no stage label and one stage", stages: []StageTotals{stage(profiler.None, 2, 200*ms, 0), stage(3, 2, 200*ms, 20*ms)}},
		{name: "a stage without computation", stages: []StageTotals{stage(0, 2, 200*ms, 200*ms), stage(1, 2, 200*ms, 40*ms)}},
		{
			// Two replicas of each stage over 10 steps: 20 rank-steps,
			// spans of 100 ms. Stage 0 idles 30 ms a step (computes 70),
			// stage 1 10 ms (90), stage 2 20 ms (80), stage 3 40 ms (60).
			name: "four stages",
			stages: []StageTotals{
				stage(0, 20, 2000*ms, 600*ms), stage(1, 20, 2000*ms, 200*ms),
				stage(2, 20, 2000*ms, 400*ms), stage(3, 20, 2000*ms, 800*ms),
			},
			ok:      true,
			slowest: StageCompute{1, 90 * ms}, next: StageCompute{2, 80 * ms}, least: StageCompute{3, 60 * ms},
			mean: 75 * ms, lead: 10 * ms, excess: 15 * ms, standsOut: true,
		},
		{
			// 100 and 96 ms: a lead of 4%, under 5%. Listed slowest
			// last, and with a stage of no label that computed more.
			name: "within 5%",
			stages: []StageTotals{
				stage(profiler.None, 1, 500*ms, 0),
				stage(0, 1, 120*ms, 24*ms), stage(1, 1, 120*ms, 20*ms),
			},
			ok:      true,
			slowest: StageCompute{1, 100 * ms}, next: StageCompute{0, 96 * ms}, least: StageCompute{0, 96 * ms},
			mean: 98 * ms, lead: 4 * ms, excess: 2 * ms,
		},
		{
			// Equals: the lowest numbered is the slowest, another the
			// least.
			name:    "equal stages",
			stages:  []StageTotals{stage(0, 1, 50*ms, 10*ms), stage(1, 1, 50*ms, 10*ms)},
			ok:      true,
			slowest: StageCompute{0, 40 * ms}, next: StageCompute{1, 40 * ms}, least: StageCompute{1, 40 * ms},
			mean: 40 * ms,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, ok := Summary{Stages: c.stages}.Balance()
			if ok != c.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, c.ok, b)
			}
			if !ok {
				return
			}
			if b.Slowest != c.slowest || b.Next != c.next || b.Least != c.least || b.Mean != c.mean {
				t.Errorf("slowest %+v next %+v least %+v mean %v; want %+v %+v %+v %v", b.Slowest, b.Next, b.Least, b.Mean, c.slowest, c.next, c.least, c.mean)
			}
			if b.Lead() != c.lead || b.Excess() != c.excess || b.StandsOut() != c.standsOut {
				t.Errorf("lead %v excess %v stands out %v; want %v %v %v", b.Lead(), b.Excess(), b.StandsOut(), c.lead, c.excess, c.standsOut)
			}
		})
	}
}

// TestStageBalanceReport: four stages name the next and the least apart,
// and a lead under 5% says no stage holds the others back, in the
// balance line and in the straggler line of a job without collectives.
func TestStageBalanceReport(t *testing.T) {
	ms := time.Millisecond
	var w strings.Builder
	writeBalance(&w, StageBalance{Slowest: StageCompute{1, 90 * ms}, Next: StageCompute{2, 80 * ms}, Least: StageCompute{3, 60 * ms}, Mean: 75 * ms}, "")
	if want := "stage balance (computation per step within the span): stage 1 the most, 90.000 ms; the next, stage 2, 80.000 ms (11.1% less); the least, stage 3, 60.000 ms; the mean 75.000 ms — a pipeline goes at its slowest stage's pace: the others wait for stage 1, and spreading the work evenly over the stages would save about 15.000 ms a step (the most less the mean)\n"; w.String() != want {
		t.Errorf("got  %q\nwant %q", w.String(), want)
	}

	s := Summary{Steps: 1, Complete: 1, Straggler: profiler.None,
		Stages: []StageTotals{{Stage: 0, RankSteps: 1, Span: 120 * ms, Bubble: 24 * ms}, {Stage: 1, RankSteps: 1, Span: 120 * ms, Bubble: 20 * ms}},
		Ranks:  []RankTotals{{Rank: 0, Stage: 0, Steps: 1}, {Rank: 1, Stage: 1, Steps: 1}},
	}
	w.Reset()
	if err := WriteReport(&w, s); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"stage balance (computation per step within the span): stage 1 the most, 100.000 ms; the next and least, stage 0, 96.000 ms (4.0% less); the mean 98.000 ms — within 5%: no stage holds the others back\n",
		"straggler: not measured: stragglers are found by the waiting at collectives, and these steps have none; nor are the pipeline's stages uneven (stage balance, above)\n",
	} {
		if !strings.Contains(w.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, w.String())
		}
	}
	// Ranks that shared a device: the line says what that does to the
	// figures.
	w.Reset()
	if err := WriteReport(&w, s, WithSharedDevices("2 ranks sharing 1 device")); err != nil {
		t.Fatal(err)
	}
	if want := "— within 5%: no stage holds the others back; but with 2 ranks sharing 1 device, a stage's computation includes the time its kernels waited for the other ranks' (docs/analysis.md, Limits)\n"; !strings.Contains(w.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, w.String())
	}
}

// TestStepBalance: a step's stages are compared by the span less their
// ranks' mean bubble: over a 100 ms span, stage 0's ranks idle 30 ms
// (compute 70), stage 1's 10 ms (90), and work of no stage is left out.
func TestStepBalance(t *testing.T) {
	ms := time.Millisecond
	st := Step{Span: profiler.Interval{Start: 50 * ms, End: 150 * ms}, Stages: []Stage{
		{Stage: profiler.None, Ranks: 1, Bubble: 0},
		{Stage: 0, Ranks: 2, Bubble: 30 * ms},
		{Stage: 1, Ranks: 2, Bubble: 10 * ms},
	}}
	b, ok := st.Balance()
	if !ok || b.Slowest != (StageCompute{1, 90 * ms}) || b.Next != (StageCompute{0, 70 * ms}) || b.Lead() != 20*ms || !b.StandsOut() {
		t.Errorf("balance %+v (ok %v), want stage 1 at 90 ms leading stage 0 by 20 ms", b, ok)
	}
	if _, ok := (&Step{Span: st.Span, Stages: st.Stages[:2]}).Balance(); ok {
		t.Error("one stage with work of no stage: compared")
	}
}
