package analysis

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// pathOf is a path's segments as (kind, rank, from, to) in milliseconds.
func pathOf(cp *CriticalPath) [][4]float64 {
	var out [][4]float64
	for _, s := range cp.Segments {
		out = append(out, [4]float64{float64(s.Kind), float64(s.Rank), float64(s.Start) / float64(ms_), float64(s.End) / float64(ms_)})
	}
	return out
}

func TestCriticalPathAcrossAPipeline(t *testing.T) {
	// One microbatch through two stages and back. Rank 0 posts its
	// receive of the gradient at 15 and waits until rank 1 sends it at 40;
	// rank 1 stalls 3 ms between its forward and its backward. Worked out
	// by hand: forward on 0, the activation's transfer to 1, forward and
	// backward on 1 with the stall between, the gradient's transfer back,
	// backward on 0.
	var b build
	b.step(0, 0, 0, 0, 60)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 10)
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 0, 2, 10, 12)
	b.coll(0, 0, 0, "Recv", "pp", 2, 0, 1, 1, 2, 15, 45)
	b.dev(0, 0, 0, 0, 0, profiler.Backward, 1, 45, 55)
	b.step(1, 0, 1, 0, 60)
	b.coll(1, 0, 1, "Recv", "pp", 2, 1, 0, 0, 4, 5, 12)
	b.dev(1, 0, 1, 0, 0, profiler.Forward, 3, 12, 22)
	b.dev(1, 0, 1, 0, 0, profiler.Backward, 3, 25, 40)
	b.coll(1, 0, 1, "Send", "pp", 2, 1, 0, 1, 4, 40, 44)
	steps := Analyze(b.recs)
	if len(steps) != 1 || steps[0].Critical == nil {
		t.Fatalf("steps %+v", steps)
	}
	cp := steps[0].Critical
	c, x, g := float64(SegmentCompute), float64(SegmentTransfer), float64(SegmentGap)
	want := [][4]float64{{c, 0, 0, 10}, {x, 1, 10, 12}, {c, 1, 12, 22}, {g, 1, 22, 25}, {c, 1, 25, 40}, {x, 0, 40, 45}, {c, 0, 45, 55}}
	got := pathOf(cp)
	if len(got) != len(want) {
		t.Fatalf("path %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("segment %d: %v, want %v", i, got[i], want[i])
		}
	}
	if cp.Compute != d(10+10+15+10) || cp.Transfer != d(2+5) || cp.Gap != d(3) || cp.Span.Len() != d(55) {
		t.Errorf("compute %v transfer %v gap %v span %v; want 45ms 7ms 3ms over 55ms", cp.Compute, cp.Transfer, cp.Gap, cp.Span.Len())
	}
	if s := cp.Segments[2]; s.Phase != profiler.Forward || s.Stage != 1 || s.Chunk != 0 || s.Microbatch != 0 {
		t.Errorf("segment 2 labels %+v", s)
	}
	if s := cp.Segments[1]; s.Op != "Recv" {
		t.Errorf("segment 1 op %q, want the receive that waited", s.Op)
	}
}

func TestCriticalPathThroughTheLastArrival(t *testing.T) {
	// Data parallel: rank 1 computes 15 ms longer, so the all-reduce waits
	// for it; the path is rank 1's computation, then the transfer.
	var b build
	for r, compute := range []float64{10, 25} {
		b.step(r, 0, 0, 0, 40)
		b.dev(r, 0, 0, 0, 0, profiler.Backward, uint64(2*r+1), 0, compute)
		b.coll(r, 0, 0, "AllReduce", "dp", 2, r, -1, 3, uint64(2*r+2), compute, 30)
	}
	st := Analyze(b.recs)[0]
	cp := st.Critical
	c, x := float64(SegmentCompute), float64(SegmentTransfer)
	got := pathOf(cp)
	// The path ends in either rank's all-reduce (both leave at 30).
	if len(got) != 2 || got[0] != [4]float64{c, 1, 0, 25} || got[1][0] != x || got[1][2] != 25 || got[1][3] != 30 {
		t.Fatalf("path %v, want rank 1's compute [0,25) then the all-reduce [25,30)", got)
	}
	s := Summarize([]Step{st})
	if s.Critical.Steps != 1 || s.Critical.Compute != d(25) || s.Critical.Transfer != d(5) || s.Critical.Gap != 0 {
		t.Errorf("critical totals %+v", s.Critical)
	}
	var w bytes.Buffer
	if err := WriteReport(&w, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.String(), "critical path: 30.000 ms per step") || !strings.Contains(w.String(), "compute 83.3%, transfers 16.7%, gaps 0.0%") {
		t.Errorf("report lacks the critical path line:\n%s", w.String())
	}
}

func TestCriticalPathOfNothing(t *testing.T) {
	var b build
	b.step(0, 0, 0, 0, 10)
	if cp := Analyze(b.recs)[0].Critical; cp != nil {
		t.Errorf("a step without activity has a critical path: %+v", cp)
	}
}

// A send that did not wait, started just after a receive that did not
// either and ending within criticalTolerance of the receive's start, is
// not what came before the receive: the walk back from the later compute
// goes on through the receive to the compute before it. Taking the send
// (it ends "by" the receive's start, within the tolerance) looped back to
// an activity already passed, and the path stopped there: it missed the
// first 10 ms, and in the straggler scores the time of the ranks behind.
func TestCriticalPathPastShortTransfers(t *testing.T) {
	var b build
	for r := range 2 {
		b.step(r, 0, r, 0, 30)
	}
	// Rank 0: compute, then a receive and a send of well under a
	// microsecond each, the send starting 0.4 µs after the receive and
	// ending 0.9 µs after it began, then compute again.
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 10)
	b.coll(0, 0, 0, "Recv", "pp", 2, 0, 1, 0, 2, 10, 10.0003)
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 0, 2, 10.0004, 10.0009)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 10.001, 20)
	// Rank 1 sent long before rank 0 received, and receives after rank 0
	// sent: no wait either way.
	b.coll(1, 0, 1, "Send", "pp", 2, 1, 0, 0, 3, 1, 2)
	b.coll(1, 0, 1, "Recv", "pp", 2, 1, 0, 0, 3, 11, 12)
	st := Analyze(b.recs)[0]
	cp := st.Critical
	if cp == nil {
		t.Fatalf("no critical path: %q", st.Problems)
	}
	got := pathOf(cp)
	c := float64(SegmentCompute)
	if len(got) == 0 || got[0] != [4]float64{c, 0, 0, 10} || cp.Span.Start != 0 || cp.Span.End != d(20) {
		t.Fatalf("path %v over %v, want it to start with rank 0's compute [0,10) and span 0–20 ms", got, cp.Span)
	}
	if cp.Compute < d(19.99) {
		t.Errorf("compute on the path %v, want both computations (about 19.999 ms)", cp.Compute)
	}
}

// A chunk label that is no VPP chunk index (20,000) leaves the bubble
// unsplit rather than splitting it into 20,001 chunks; the bubble itself
// is measured as ever.
func TestLargeChunkLabelLeavesBubbleUnsplit(t *testing.T) {
	for _, chunk := range []int{1, MaxChunkLabel, 20000} {
		var b build
		b.step(0, 0, 0, 0, 40)
		b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 10)
		b.dev(0, 0, 0, chunk, 0, profiler.Forward, 1, 20, 30)
		st := Analyze(b.recs)[0]
		var rk *Rank
		for i := range st.Ranks {
			if st.Ranks[i].Rank == 0 {
				rk = &st.Ranks[i]
			}
		}
		if rk == nil {
			t.Fatalf("chunk %d: no rank 0 in %+v", chunk, st)
		}
		if rk.Bubble != d(10) {
			t.Errorf("chunk %d: bubble %v, want 10ms (the gap between the forwards)", chunk, rk.Bubble)
		}
		switch {
		case chunk < MaxChunkLabel && (len(rk.Chunks) != chunk+1 || rk.Chunks[chunk] != d(10)):
			t.Errorf("chunk %d: split %v, want the 10ms gap on chunk %d", chunk, rk.Chunks, chunk)
		case chunk >= MaxChunkLabel && len(rk.Chunks) != 0:
			t.Errorf("chunk %d: split into %d chunks, want none", chunk, len(rk.Chunks))
		}
	}
}

// TestCriticalPathReceivePostedLate: rank 0's send is done at 11 ms
// (buffered), but rank 1, idle since 5 ms, posts its receive only at
// 15 ms: the receive waited for nobody, so the path stays on rank 1 —
// its computation to 5, its gap to 15, the receive, the forward — and its
// segments add up to its span. Worked out by hand.
func TestCriticalPathReceivePostedLate(t *testing.T) {
	var b build
	b.step(0, 0, 0, 0, 30)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 10)
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 0, 2, 10, 11)
	b.step(1, 0, 1, 0, 30)
	b.dev(1, 0, 1, 0, 1, profiler.Backward, 3, 0, 5)
	b.coll(1, 0, 1, "Recv", "pp", 2, 1, 0, 0, 4, 15, 16)
	b.dev(1, 0, 1, 0, 0, profiler.Forward, 3, 16, 26)
	cp := Analyze(b.recs)[0].Critical
	if cp == nil {
		t.Fatal("no critical path")
	}
	c, x, g := float64(SegmentCompute), float64(SegmentTransfer), float64(SegmentGap)
	want := [][4]float64{{c, 1, 0, 5}, {g, 1, 5, 15}, {x, 1, 15, 16}, {c, 1, 16, 26}}
	if got := pathOf(cp); !slices.Equal(got, want) {
		t.Errorf("path %v, want %v", got, want)
	}
	if cp.Compute != d(15) || cp.Transfer != d(1) || cp.Gap != d(10) || cp.Span.Len() != d(26) {
		t.Errorf("compute %v transfer %v gap %v span %v; want 15ms 1ms 10ms over 26ms", cp.Compute, cp.Transfer, cp.Gap, cp.Span.Len())
	}
}
