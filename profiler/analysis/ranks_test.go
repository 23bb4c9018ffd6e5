package analysis

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestProblemLinesOfManyRanks: step 0 has 20,000 ranks, step 1 rank 0
// alone, and one all-reduce of all 20,000 lacks rank 10,000. The lines
// that say so name the ranks as ranges, in a line of a few dozen
// characters, not one number after another (a line of 120 kB, built in
// time quadratic in the ranks).
func TestProblemLinesOfManyRanks(t *testing.T) {
	const n = 20000
	var b build
	for r := range n {
		b.step(r, 0, profiler.None, 0, 100)
		if r != n/2 {
			b.coll(r, 0, profiler.None, "AllReduce", "world", n, r, -1, 0, 1, 10, 20)
		}
	}
	b.step(0, 1, profiler.None, 100, 200)
	steps := Analyze(b.recs)
	if len(steps) != 2 {
		t.Fatalf("%d steps, want 2", len(steps))
	}
	want0 := "collective world #0 (AllReduce): 19999 of 20000 ranks recorded it (ranks 0–9999, 10001–19999); its skew and waits are unknown"
	if !slices.Equal(steps[0].Problems, []string{want0}) {
		t.Errorf("step 0 problems %.300q, want %q", steps[0].Problems, want0)
	}
	want1 := "no records of ranks 1–19999 in this step"
	if !slices.Equal(steps[1].Problems, []string{want1}) {
		t.Errorf("step 1 problems %.300q, want %q", steps[1].Problems, want1)
	}
}

func TestIntList(t *testing.T) {
	var alternate []int
	for r := range 40 {
		alternate = append(alternate, 2*r)
	}
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1}, "0, 1"},
		{[]int{0, 1, 2}, "0–2"},
		{[]int{0, 2, 3, 4, 5, 9, 10}, "0, 2–5, 9, 10"},
		{alternate, "0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 and 24 more"},
	} {
		if got := intList(c.in); got != c.want {
			t.Errorf("intList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := ranksList([]int{4, 5, 6, 8}); got != "ranks 4–6, 8" {
		t.Errorf("ranksList = %q", got)
	}
}

// TestStageBands: five stages with 10…50 ms of bubble in one step each
// (and work of no stage), written with WithRankRows(2), make two bands
// of three and two stages whose figures are their stages' means (their
// computation per step the 100 ms span less the bubble), worked by hand, under a line naming stage 4 as the most bubble and stage 0
// as the least; WithRankRows(5) keeps a line per stage.
func TestStageBands(t *testing.T) {
	ms := time.Millisecond
	s := Summary{Steps: 1, Complete: 1, Pipeline: Pipeline{Ideal: math.NaN()}}
	s.Stages = append(s.Stages, StageTotals{Stage: profiler.None, RankSteps: 1, Bubble: 7 * ms, Span: 100 * ms, Drain: 0, Chunks: []time.Duration{7 * ms, 0}})
	for st := range 5 {
		b := time.Duration(10*(st+1)) * ms
		s.Stages = append(s.Stages, StageTotals{Stage: st, RankSteps: 1, Bubble: b, Span: 100 * ms, Drain: time.Duration(st+1) * ms, Chunks: []time.Duration{b / 2, b / 2}})
	}
	var out strings.Builder
	if err := WriteReport(&out, s, WithRankRows(2)); err != nil {
		t.Fatal(err)
	}
	intro := "\n5 stages, summed in bands of 3 consecutive (the stages' own lines left out here); the most bubble: stage 4 (50.000 ms per step), the least: stage 0 (10.000 ms)\n"
	if !strings.Contains(out.String(), intro) {
		t.Errorf("no line %q in\n%s", intro, out.String())
	}
	want := []string{
		"-  1  93.000  7.000  7.0  7.000  0.000  0.000",
		"0–2  3  80.000  20.000  20.0  10.000  10.000  2.000",
		"3–4  2  55.000  45.000  45.0  22.500  22.500  4.500",
	}
	got := squeezed(out.String())
	for _, line := range want {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("no line %q in\n%s", line, out.String())
		}
	}
	if strings.Contains(got, "\n2  1  ") {
		t.Errorf("stage 2 has its own line in bands:\n%s", out.String())
	}
	out.Reset()
	if err := WriteReport(&out, s, WithRankRows(5)); err != nil {
		t.Fatal(err)
	}
	got = squeezed(out.String())
	for st := range 5 {
		line := fmt.Sprintf("\n%d  1  %d.000  %d.000  %d.0  ", st, 100-10*(st+1), 10*(st+1), 10*(st+1))
		if !strings.Contains(got, line) {
			t.Errorf("WithRankRows(5): no line starting %q in\n%s", line[1:], out.String())
		}
	}
	if strings.Contains(got, "bands") {
		t.Errorf("WithRankRows(5) banded five stages:\n%s", out.String())
	}
}

// squeezed is text with each line's leading spaces cut and every run
// of spaces between fields made two.
func squeezed(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		b.WriteString("\n" + strings.Join(strings.Fields(line), "  "))
	}
	return b.String() + "\n"
}

// TestRankRowsWithoutWaiting: where no rank waited at a collective,
// WithRankRows(2) keeps the two ranks with the most communication per
// step — rank 2 (30 ms in one step) and rank 0 (40 ms in two steps, 20
// per step), not rank 1 (50 ms in five steps, 10 per step) — under a line
// saying why; with a rank that waited, the rule is the waiting again.
func TestRankRowsWithoutWaiting(t *testing.T) {
	ms := time.Millisecond
	s := Summary{Steps: 5, Complete: 5, Pipeline: Pipeline{Ideal: math.NaN()}, Ranks: []RankTotals{
		{Rank: 0, Stage: profiler.None, Steps: 2, Comm: 40 * ms},
		{Rank: 1, Stage: profiler.None, Steps: 5, Comm: 50 * ms},
		{Rank: 2, Stage: profiler.None, Steps: 1, Comm: 30 * ms},
	}}
	var out strings.Builder
	if err := WriteReport(&out, s, WithRankRows(2)); err != nil {
		t.Fatal(err)
	}
	got := squeezed(out.String())
	if !strings.Contains(out.String(), "\nno rank waited at a collective; the 2 of 3 ranks with the most communication per step (the others left out here):\n") ||
		!strings.Contains(got, "\n2  -  1  -  30.000  ") || !strings.Contains(got, "\n0  -  2  -  20.000  ") || strings.Contains(got, "\n1  -  5  ") ||
		strings.Index(got, "\n2  -  1  ") > strings.Index(got, "\n0  -  2  ") {
		t.Errorf("want ranks 2 then 0, by communication per step:\n%s", out.String())
	}
	s.Ranks[1].Waited = 5 * ms
	out.Reset()
	if err := WriteReport(&out, s, WithRankRows(2)); err != nil {
		t.Fatal(err)
	}
	if got := squeezed(out.String()); !strings.Contains(out.String(), "the 2 of 3 ranks that caused the most waiting, then waited the most") || !strings.Contains(got, "\n1  -  5  ") {
		t.Errorf("rank 1 waited, so the table should lead with it:\n%s", out.String())
	}
}
