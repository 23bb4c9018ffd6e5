package analysis

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestSinkMinClockSamples: rank 1's clock runs 5 ms ahead. Step 0 has
// one all-reduce, step 1 two, step 2 one again, each all-reduce left by
// both ranks at once. Made WithMinClockSamples(2), a Sink aligns no clock
// on step 0's one departure, aligns step 1's, and carries step 1's
// offsets to step 2: as Analyze and EstimateOffsets do, it aligns a clock
// only through 2 collectives.
func TestSinkMinClockSamples(t *testing.T) {
	var b build
	calls := []int{1, 2, 1}
	seq := uint64(0)
	for step, n := range calls {
		o := float64(1000 * step)
		for r := range 2 {
			b.step(r, step, profiler.None, o, o+100)
		}
		for k := range n {
			at := o + 10 + 20*float64(k)
			b.coll(0, step, profiler.None, "AllReduce", "dp", 2, 0, -1, seq, 1, at, at+10)
			b.coll(1, step, profiler.None, "AllReduce", "dp", 2, 1, -1, seq, 1, at+2, at+10)
			seq++
		}
	}
	recs := shifted(b.recs, map[int]time.Duration{1: 5 * time.Millisecond})
	steps := sinkSteps(t, recs, WithClockAlignment(), WithMinClockSamples(2))
	if len(steps) != 3 {
		t.Fatalf("%d steps, want 3", len(steps))
	}
	c := steps[0].Clock
	if c == nil || !slices.Equal(c.Unaligned, []int{1}) || c.Joined != 0 {
		t.Fatalf("step 0 clock %+v: want rank 1 unaligned, on 1 collective", c)
	}
	if !strings.Contains(strings.Join(steps[0].Problems, "\n"), "rank 1 shares fewer than 2 complete collectives") {
		t.Errorf("step 0 problems %q: want rank 1 unaligned for too few collectives", steps[0].Problems)
	}
	if c := steps[1].Clock; c == nil || c.Carried || c.Offset[1]-c.Offset[0] != d(5) || c.Samples[1] != 2 {
		t.Errorf("step 1 clock %+v: want rank 1 5ms ahead, on 2 collectives", c)
	}
	if c := steps[2].Clock; c == nil || !c.Carried || c.CarriedFrom != 1 || c.Offset[1]-c.Offset[0] != d(5) || len(c.Unaligned) != 0 {
		t.Errorf("step 2 clock %+v: want step 1's offsets carried", c)
	}
	if !steps[1].Complete() || !steps[2].Complete() {
		t.Errorf("steps 1 and 2 problems %q, %q; want none", steps[1].Problems, steps[2].Problems)
	}
}
