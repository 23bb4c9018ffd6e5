package analysis

import (
	"slices"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// TestInvertedCollectiveIsNoSample: rank 1's clock runs 5 ms ahead of
// rank 0's. Of its two all-reduces, #1 is well formed (rank 0 in it
// [30, 40), rank 1 [37, 45) on its clock) and #0 malformed: rank 1's
// record of it ends before it starts ([50, 12)). #0 tells neither the
// skew nor the clock: it is incomplete, and rank 1's offset is #1's
// alone, 45 − 40 = 5 ms, where the median with #0's 12 − 20 = −8 ms made
// it −1.5 ms.
func TestInvertedCollectiveIsNoSample(t *testing.T) {
	var b build
	for r := range 2 {
		b.step(r, 0, profiler.None, 0, 100)
	}
	b.coll(0, 0, profiler.None, "AllReduce", "dp", 2, 0, -1, 0, 1, 10, 20)
	b.coll(1, 0, profiler.None, "AllReduce", "dp", 2, 1, -1, 0, 1, 50, 12)
	b.coll(0, 0, profiler.None, "AllReduce", "dp", 2, 0, -1, 1, 1, 30, 40)
	b.coll(1, 0, profiler.None, "AllReduce", "dp", 2, 1, -1, 1, 1, 37, 45)

	steps := Analyze(b.recs)
	if len(steps) != 1 || len(steps[0].Collectives) != 2 {
		t.Fatalf("%+v: want one step of two collectives", steps)
	}
	c := steps[0].Collectives[0]
	if c.Complete || c.Skew != 0 || c.Problem != "rank 1's record of it ends before it starts" {
		t.Errorf("collective #0 %+v: want it incomplete, its record ending before it starts", c)
	}
	if want := "collective dp #0 (AllReduce): rank 1's record of it ends before it starts"; !slices.Contains(steps[0].Problems, want) {
		t.Errorf("problems %q, want %q among them", steps[0].Problems, want)
	}
	if r := steps[0].Ranks[0]; r.Waited != d(7) {
		t.Errorf("rank 0 waited %v, want 7ms (at #1 only)", r.Waited)
	}

	o := EstimateOffsets(b.recs)
	if o.Offset[1]-o.Offset[0] != d(5) || o.Samples[1] != 1 || o.Residual[1] != 0 {
		t.Errorf("offsets %+v: want rank 1 5ms ahead, from 1 collective", o)
	}
	for _, st := range [][]Step{Analyze(b.recs, WithClockAlignment()), sinkSteps(t, b.recs, WithClockAlignment())} {
		if c := st[0].Clock; c == nil || c.Offset[1]-c.Offset[0] != d(5) {
			t.Errorf("step clock %+v: want rank 1 5ms ahead", c)
		}
	}
}

// TestInvertedTransferIsNoSample: a send matched with a receive whose
// record ends before it starts ([30, 5)) times no departure. The other
// pair, send [40, 50) on rank 0 and receive [50, 55) on rank 1, whose
// clock runs 5 ms ahead, alone puts rank 1 at 5 ms; with the malformed
// pair's 5 − 20 = −15 ms it was put at −5 ms.
func TestInvertedTransferIsNoSample(t *testing.T) {
	var b build
	for r := range 2 {
		b.step(r, 0, 0, 0, 100)
	}
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 0, 1, 10, 20)
	b.coll(1, 0, 0, "Recv", "pp", 2, 1, 0, 0, 1, 30, 5)
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 1, 1, 40, 50)
	b.coll(1, 0, 0, "Recv", "pp", 2, 1, 0, 1, 1, 50, 55)
	o := EstimateOffsets(b.recs)
	if o.Offset[1]-o.Offset[0] != d(5) || o.Samples[1] != 1 || !slices.Equal(o.P2P, []int{1}) {
		t.Errorf("offsets %+v: want rank 1 5ms ahead, from 1 send", o)
	}
}

// TestInvertedStepRange: rank 0's step range of the two-rank step
// worked out in TestConstructedStep is malformed, ending 5 ms, or 1 µs,
// before it starts. It has no wall time to account busy time in: the
// step says so and is left out of the totals, where it counted as a
// complete step of negative time. One that ends where it starts (a step
// within a coarse clock's tick) stays a step.
func TestInvertedStepRange(t *testing.T) {
	for _, c := range []struct {
		end  float64
		want string
	}{
		{-5, "rank 0: its step range ends before it starts; its busy and idle time are left out"},
		{-0.001, "rank 0: its step range ends before it starts; its busy and idle time are left out"},
	} {
		var b build
		twoRanks(0, &b)
		twoRanks(1, &b)
		if b.recs[0].Name != profiler.StepName || b.recs[0].Rank != 0 {
			t.Fatalf("first record %+v, want rank 0's step range", b.recs[0])
		}
		b.recs[0].HostEnd = b.recs[0].HostStart + d(c.end)
		steps := Analyze(b.recs)
		if len(steps) != 2 {
			t.Fatalf("%d steps, want 2", len(steps))
		}
		st := steps[0]
		if !slices.Equal(st.Problems, []string{c.want}) {
			t.Errorf("end %v: problems %q, want %q", c.end, st.Problems, c.want)
		}
		if r := st.Ranks[0]; r.Wall != (profiler.Interval{}) || r.Busy != 0 || r.Idle() != 0 {
			t.Errorf("end %v: rank 0 wall %v, busy %v, idle %v; want all zero", c.end, r.Wall, r.Busy, r.Idle())
		}
		sum := Summarize(steps)
		if sum.Complete != 1 || sum.Ranks[0].Steps != 1 || sum.Ranks[0].Wall != d(100) || sum.Ranks[0].Busy != d(35) {
			t.Errorf("end %v: summary %d complete, rank 0 %+v; want step 1 alone: 100ms, 35ms busy", c.end, sum.Complete, sum.Ranks[0])
		}
	}
}
