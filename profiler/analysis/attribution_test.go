package analysis

import (
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

func TestAttributionOfAConstructedStep(t *testing.T) {
	var b build
	twoRanks(0, &b)
	st := Analyze(b.recs)[0]
	r0 := st.Ranks[0]
	// Worked out by hand from twoRanks, rank 0 over its step [0,100) with
	// the span [10,70): idle [0,10); forward [10,20); the send [20,21);
	// bubble [21,45); bubble while its wait for the gradient ran [45,55)
	// (the backward's first 5 ms are that wait, on its stream, so not
	// busy); backward [55,70); idle [70,80); the all-reduce [80,85),
	// waiting for rank 1, which arrives at 85; the optimizer [85,95) over
	// the rest of the all-reduce; idle [95,100).
	type key struct {
		use     Use
		phase   profiler.Phase
		chunk   int
		op      string
		waiting bool
	}
	want := map[key]time.Duration{
		{UseCompute, profiler.Forward, 0, "", false}:                        d(10),
		{UseCompute, profiler.Backward, 1, "", false}:                       d(15),
		{UseCompute, profiler.Optimizer, profiler.None, "", false}:          d(10),
		{UseTransfer, profiler.PhaseNone, profiler.None, "Send", false}:     d(1),
		{UseTransfer, profiler.PhaseNone, profiler.None, "AllReduce", true}: d(5),
		{UseBubble, profiler.PhaseNone, profiler.None, "", false}:           d(24),
		{UseBubble, profiler.PhaseNone, profiler.None, "", true}:            d(10),
		{UseIdle, profiler.PhaseNone, profiler.None, "", false}:             d(25),
	}
	got := map[key]time.Duration{}
	var sum time.Duration
	for _, s := range r0.Time {
		got[key{s.Use, s.Phase, s.Chunk, s.Op, s.Waiting}] += s.Time
		sum += s.Time
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v %v chunk %d %q waiting=%v: %v, want %v", k.use, k.phase, k.chunk, k.op, k.waiting, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("slices %v, want %v", got, want)
	}
	if sum != r0.Wall.Len() {
		t.Errorf("slices add up to %v, the step took %v", sum, r0.Wall.Len())
	}
	// Busy time is the compute slices, by the same definition.
	var compute time.Duration
	for _, s := range r0.Time {
		if s.Use == UseCompute {
			compute += s.Time
		}
	}
	if compute != r0.Busy {
		t.Errorf("compute slices %v, busy %v", compute, r0.Busy)
	}
}

// checkAttribution checks, on any analysed steps, that every rank's
// slices add up to its step and their compute to its busy time, and that
// the idle bubble is part of the bubble.
func checkAttribution(t *testing.T, steps []Step) {
	t.Helper()
	for _, st := range steps {
		for _, r := range st.Ranks {
			var sum, compute, bubble time.Duration
			for _, s := range r.Time {
				sum += s.Time
				switch s.Use {
				case UseCompute:
					compute += s.Time
				case UseBubble:
					bubble += s.Time
				}
			}
			if sum != r.Wall.Len() || compute != r.Busy {
				t.Errorf("step %d rank %d: slices %v (compute %v) over a step of %v (busy %v)", st.Step, r.Rank, sum, compute, r.Wall.Len(), r.Busy)
			}
			if bubble > r.Bubble {
				t.Errorf("step %d rank %d: idle bubble %v more than the bubble %v", st.Step, r.Rank, bubble, r.Bubble)
			}
		}
	}
}

// TestAttributionBeforeTheEpoch: records before the profiler's epoch (an
// imported file whose clock alignment moved it back) are attributed as the
// same records after it. A collective with no network transfer end once
// counted as occupying its rank up to time 0, for it compared its
// transfer end, 0 for none, with a negative device end.
func TestAttributionBeforeTheEpoch(t *testing.T) {
	var b build
	twoRanks(0, &b)
	want := Analyze(b.recs)[0]
	shift := -time.Second
	moved := slices.Clone(b.recs)
	for i := range moved {
		r := &moved[i]
		r.HostStart += shift
		r.HostEnd += shift
		if r.HasDevice {
			r.DeviceStart += shift
			r.DeviceEnd += shift
		}
	}
	got := Analyze(moved)[0]
	for rank := range want.Ranks {
		w, g := want.Ranks[rank], got.Ranks[rank]
		if !slices.Equal(w.Time, g.Time) {
			t.Errorf("rank %d: slices %+v a second before the epoch, %+v after it", rank, g.Time, w.Time)
		}
		if w.Busy != g.Busy || w.Bubble != g.Bubble || w.Comm != g.Comm || w.Overlap != g.Overlap {
			t.Errorf("rank %d: busy %v bubble %v comm %v overlap %v a second before the epoch; %v %v %v %v after it",
				rank, g.Busy, g.Bubble, g.Comm, g.Overlap, w.Busy, w.Bubble, w.Comm, w.Overlap)
		}
	}
}
