package analysis

import (
	"math"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestBlamePassesAlongAReceive: rank A (stage 0) computes for 50 ms, then
// sends to rank B (stage 1), which has posted its receive at 5 ms; B
// computes on what it received and arrives last at an all-reduce with
// rank C, B's data-parallel peer in stage 1, which computed 10 ms and
// arrived at 12 ms. B arrived last, but was late because it waited for A.
//
// Worked out by hand, walking back from each arrival. B's path: its
// compute, the receive's transfer [50, 52) (its sender started at 50,
// after B was ready), then A's compute [0, 50). C's path: a 2 ms gap
// before its all-reduce, its compute [0, 10). B's own time on its path,
// 10 + 2 ms, matches C's on its own; A's 50 ms on stage 0 have no
// counterpart on C's path, so C's whole wait goes to A. When B also
// computes 20 ms longer than C, B's own time is 32 ms against C's 12: C's
// wait of 70 ms is split 50 : 20 between A and B.
func TestBlamePassesAlongAReceive(t *testing.T) {
	const a, b, c = 0, 1, 2
	for _, tc := range []struct {
		name               string
		bCompute           float64 // B's compute after the receive, ms
		wait, caused, byB  float64 // C's wait; caused by A and by B, ms
		straggler          int
		scoreA, scoreB     float64
		heldUpA, heldUpByB float64
	}{
		{name: "B only waited", bCompute: 10, wait: 50, caused: 50, byB: 0, straggler: a, scoreA: 1, scoreB: 0, heldUpA: 50},
		{name: "B slow too", bCompute: 30, wait: 70, caused: 50, byB: 20, straggler: a, scoreA: 50.0 / 70, scoreB: 20.0 / 70, heldUpA: 50, heldUpByB: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bd build
			bd.step(a, 0, 0, 0, 200)
			bd.dev(a, 0, 0, 0, 0, profiler.Forward, 1, 0, 50)
			bd.coll(a, 0, 0, "Send", "pp", 2, 0, 1, 0, 2, 50, 52)
			bd.step(b, 0, 1, 0, 200)
			bd.coll(b, 0, 1, "Recv", "pp", 2, 1, 0, 0, 4, 5, 52)
			arrive := 52 + tc.bCompute
			bd.dev(b, 0, 1, 0, 0, profiler.Forward, 3, 52, arrive)
			bd.coll(b, 0, 1, "AllReduce", "dp1", 2, 0, -1, 0, 4, arrive, arrive+2)
			bd.step(c, 0, 1, 0, 200)
			bd.dev(c, 0, 1, 0, 0, profiler.Forward, 5, 0, 10)
			bd.coll(c, 0, 1, "AllReduce", "dp1", 2, 1, -1, 0, 6, 12, arrive+2)
			st := Analyze(bd.recs)[0]
			if !st.Complete() {
				t.Fatalf("problems: %q", st.Problems)
			}
			if coll := st.Collectives[0]; coll.Last != b || coll.Skew != d(tc.wait) {
				t.Fatalf("collective %+v: want rank %d last, %v ms late", coll, b, tc.wait)
			}
			ra, rb, rc := st.Ranks[a], st.Ranks[b], st.Ranks[c]
			for _, w := range []struct {
				name      string
				got, want time.Duration
			}{
				{"C waited", rc.Waited, d(tc.wait)},
				{"A caused", ra.Caused, d(tc.caused)},
				{"B caused", rb.Caused, d(tc.byB)},
				{"C caused", rc.Caused, 0},
				{"A held up", ra.HeldUp, d(tc.heldUpA)},
				{"B held up", rb.HeldUp, d(tc.heldUpByB)},
			} {
				if w.got != w.want {
					t.Errorf("%s %v, want %v", w.name, w.got, w.want)
				}
			}
			if math.Abs(ra.Score-tc.scoreA) > 1e-9 || math.Abs(rb.Score-tc.scoreB) > 1e-9 {
				t.Errorf("scores A %v B %v, want %v and %v", ra.Score, rb.Score, tc.scoreA, tc.scoreB)
			}
			if st.Straggler != tc.straggler {
				t.Errorf("straggler %d, want %d", st.Straggler, tc.straggler)
			}
			if s := Summarize([]Step{st}); s.Straggler != tc.straggler {
				t.Errorf("summary straggler %d, want %d", s.Straggler, tc.straggler)
			}
		})
	}
}

// TestBlamePassesAlongACollective: ranks A and B share a tensor-parallel
// all-reduce, ranks B and C a data-parallel one, all in one stage. A
// computes 50 ms, B and C 10 ms. B waits 40 ms for A at the first, then
// computes 10 ms and arrives last at the second, 50 ms after C.
//
// Worked out by hand: A caused B's 40 ms at the first (its path is its
// own). At the second, B's path is its compute [52, 62), the first
// all-reduce's transfer [50, 52) after A arrived, then A's compute
// [0, 50); C's path is its compute [0, 10) and a 2 ms gap. B's own time,
// 12 ms, is C's; A's 50 ms has no counterpart on C's path: C's 50 ms go to
// A too, and so does the time each collective was held up.
func TestBlamePassesAlongACollective(t *testing.T) {
	const a, b, c = 0, 1, 2
	var bd build
	bd.step(a, 0, 0, 0, 100)
	bd.dev(a, 0, 0, 0, 0, profiler.Backward, 1, 0, 50)
	bd.coll(a, 0, 0, "AllReduce", "tp", 2, 0, -1, 0, 2, 50, 52)
	bd.step(b, 0, 0, 0, 100)
	bd.dev(b, 0, 0, 0, 0, profiler.Backward, 3, 0, 10)
	bd.coll(b, 0, 0, "AllReduce", "tp", 2, 1, -1, 0, 4, 10, 52)
	bd.dev(b, 0, 0, 1, 0, profiler.Backward, 3, 52, 62)
	bd.coll(b, 0, 0, "AllReduce", "dp", 2, 0, -1, 0, 4, 62, 64)
	bd.step(c, 0, 0, 0, 100)
	bd.dev(c, 0, 0, 0, 0, profiler.Backward, 5, 0, 10)
	bd.coll(c, 0, 0, "AllReduce", "dp", 2, 1, -1, 0, 6, 12, 64)
	st := Analyze(bd.recs)[0]
	if !st.Complete() {
		t.Fatalf("problems: %q", st.Problems)
	}
	ra, rb, rc := st.Ranks[a], st.Ranks[b], st.Ranks[c]
	if ra.Caused != d(40+50) || ra.HeldUp != d(40+50) || rb.Caused != 0 || rc.Caused != 0 {
		t.Errorf("caused A %v B %v C %v, A held up %v; want 90ms, 0, 0 and 90ms", ra.Caused, rb.Caused, rc.Caused, ra.HeldUp)
	}
	if rb.Waited != d(40) || rc.Waited != d(50) {
		t.Errorf("waited B %v C %v, want 40ms and 50ms", rb.Waited, rc.Waited)
	}
	if ra.Score != 1 || st.Straggler != a {
		t.Errorf("A's score %v, straggler %d; want 1 and rank %d", ra.Score, st.Straggler, a)
	}
}

// TestBlameStaysWithAnUnwaitedLastArrival: a last arrival whose path
// never left its own rank keeps the blame, however long the path — the
// data-parallel case; and so does one with no recorded activity before
// its arrival (its lateness has no recorded cause).
func TestBlameStaysWithAnUnwaitedLastArrival(t *testing.T) {
	var b build
	// Rank 0 computes 10 ms, rank 1 30 ms, rank 2 nothing until it
	// arrives at 45 ms; the all-reduce's waits are 35, 15 and 0 ms.
	b.step(0, 0, 0, 0, 60)
	b.dev(0, 0, 0, 0, 0, profiler.Backward, 1, 0, 10)
	b.coll(0, 0, 0, "AllReduce", "dp", 3, 0, -1, 0, 2, 10, 50)
	b.step(1, 0, 0, 0, 60)
	b.dev(1, 0, 0, 0, 0, profiler.Backward, 3, 0, 30)
	b.coll(1, 0, 0, "AllReduce", "dp", 3, 1, -1, 0, 4, 30, 50)
	b.step(2, 0, 0, 0, 60)
	b.coll(2, 0, 0, "AllReduce", "dp", 3, 2, -1, 0, 6, 45, 50)
	st := Analyze(b.recs)[0]
	if r := st.Ranks[2]; r.Caused != d(35+15) || r.HeldUp != d(15) || r.Score != 1 || st.Straggler != 2 {
		t.Errorf("rank 2: caused %v, held up %v, score %v, straggler %d; want 50ms, 15ms, 1, rank 2", r.Caused, r.HeldUp, r.Score, st.Straggler)
	}
	// Data parallel: rank 1 computes 15 ms longer than rank 0. Its path
	// is its own compute, 15 ms longer than rank 0's on the same stage:
	// it keeps the wait.
	var b2 build
	for r, compute := range []float64{10, 25} {
		b2.step(r, 0, 0, 0, 60)
		b2.dev(r, 0, 0, 0, 0, profiler.Backward, uint64(2*r+1), 0, compute)
		b2.coll(r, 0, 0, "AllReduce", "dp", 2, r, -1, 0, uint64(2*r+2), compute, 30)
	}
	st = Analyze(b2.recs)[0]
	if r := st.Ranks[1]; r.Caused != d(15) || r.HeldUp != d(15) || st.Straggler != 1 {
		t.Errorf("rank 1: caused %v, held up %v, straggler %d; want 15ms, 15ms, rank 1", r.Caused, r.HeldUp, st.Straggler)
	}
}
