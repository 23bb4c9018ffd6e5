package analysis

import (
	"slices"
	"testing"

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
