package analysis

import (
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestCallSinkOrderBounded: one collective that a rank never records (a
// communicator reaching a rank outside the wrapped job) stays open
// forever, while every later collective is decided as soon as both ranks
// have recorded it. What the sink holds must not grow with the run: the
// open collectives are one, whatever the number of decided ones.
func TestCallSinkOrderBounded(t *testing.T) {
	s := NewCallSink()
	var b build
	b.coll(0, profiler.None, profiler.None, "AllReduce", "world", 3, 0, -1, 0, 1, 0, 1)
	s.Consume(b.recs)
	const n = 20000
	for k := range n {
		var b build
		o := float64(10 * (k + 1))
		b.coll(0, profiler.None, profiler.None, "AllReduce", "dp", 2, 0, -1, uint64(k), 1, o, o+2)
		b.coll(1, profiler.None, profiler.None, "AllReduce", "dp", 2, 1, -1, uint64(k), 1, o+1, o+2)
		s.Consume(b.recs)
	}
	if st := s.Stats(); st.Matched != n || len(s.open) != 1 {
		t.Fatalf("%+v, %d open; want %d matched, 1 open", st, len(s.open), n)
	}
	// One open collective; the decided ones' keys may linger, but only
	// within a constant of the open ones.
	if len(s.order) > 2048 {
		t.Errorf("%d keys ordered for 1 open collective after %d decided: grows with the run", len(s.order), n)
	}
}

// TestCallSinkOrderBoundedReopened: a recorder that numbers every call of
// a group 0, behind a collective some rank never records (which keeps the
// order's front), opens the same key again right after each decision, in
// the same batch. Two collectives are open at any time, and the order
// must stay as short, not keep a key per decision that looks open.
func TestCallSinkOrderBoundedReopened(t *testing.T) {
	s := NewCallSink()
	var b build
	b.coll(0, profiler.None, profiler.None, "AllReduce", "world", 3, 0, -1, 0, 1, 0, 1)
	b.coll(0, profiler.None, profiler.None, "AllReduce", "dp", 2, 0, -1, 0, 1, 0, 1)
	s.Consume(b.recs)
	const n = 20000
	for k := range n {
		var b build
		o := float64(10 * (k + 1))
		// Rank 0 records call 0 again: with the one open, two records of
		// a group of two decide it (incomplete: rank 1 never came), and
		// the next opens it again.
		b.coll(0, profiler.None, profiler.None, "AllReduce", "dp", 2, 0, -1, 0, 1, o, o+2)
		b.coll(0, profiler.None, profiler.None, "AllReduce", "dp", 2, 0, -1, 0, 1, o+5, o+7)
		s.Consume(b.recs)
	}
	if st := s.Stats(); st.Incomplete != n || len(s.open) != 2 {
		t.Fatalf("%+v, %d open; want %d incomplete, 2 open", st, len(s.open), n)
	}
	if len(s.order) > 2048 {
		t.Errorf("%d keys ordered for %d open collectives: grows with the run", len(s.order), len(s.open))
	}
}

// TestCriticalPathIgnoresInvertedWork: a malformed range whose device end
// comes before its start ran at no instant: it bounds no span (as the
// step's Span already treats it), so it is not the step's last activity
// and puts no gap on the path. Worked by hand: the only real work is rank
// 0's forward [10, 40), so the path is that one compute segment.
func TestCriticalPathIgnoresInvertedWork(t *testing.T) {
	var b build
	b.step(0, 0, 0, 0, 100)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 10, 40)
	b.dev(0, 0, 0, 0, 1, profiler.Forward, 1, 90, 60) // inverted: ends before it starts
	steps := Analyze(b.recs)
	if len(steps) != 1 {
		t.Fatalf("%d steps, want 1", len(steps))
	}
	cp := steps[0].Critical
	if cp == nil {
		t.Fatal("no critical path")
	}
	want := [][4]float64{{float64(SegmentCompute), 0, 10, 40}}
	if got := pathOf(cp); !slices.Equal(got, want) {
		t.Errorf("path %v, want %v", got, want)
	}
	if cp.Span != (profiler.Interval{Start: d(10), End: d(40)}) || cp.Compute != d(30) || cp.Gap != 0 {
		t.Errorf("span %v, compute %v, gap %v; want [10ms, 40ms), 30ms, 0", cp.Span, cp.Compute, cp.Gap)
	}
}

// TestTimeSlicesInStageOrder: a rank that computes for two stages (a
// V-shaped schedule puts stages 0 and 3 of four on one rank) has two
// compute slices alike but for their stage. Rank.Time must come out in
// one order, not in the order a map gave them. By hand: forward of stage
// 0 [10, 20) and of stage 3 [30, 50); the span is [10, 50), so [20, 30)
// is bubble, and [0, 10) and [50, 100) idle outside it.
func TestTimeSlicesInStageOrder(t *testing.T) {
	var b build
	b.step(0, 0, 0, 0, 100)
	b.dev(0, 0, 3, 0, 0, profiler.Forward, 1, 30, 50)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 10, 20)
	want := []Slice{
		{Use: UseCompute, Phase: profiler.Forward, Stage: 0, Chunk: 0, Microbatch: 0, Time: d(10)},
		{Use: UseCompute, Phase: profiler.Forward, Stage: 3, Chunk: 0, Microbatch: 0, Time: d(20)},
		{Use: UseBubble, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None, Time: d(10)},
		{Use: UseIdle, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None, Time: d(60)},
	}
	for range 50 {
		steps := Analyze(b.recs)
		if got := steps[0].Ranks[0].Time; !slices.Equal(got, want) {
			t.Fatalf("time slices\n%+v\nwant\n%+v", got, want)
		}
	}
}

// TestSinkCarriesOnlyOffsetsFromCollectives: step 0 joins ranks 0 and 1
// by an all-reduce, but rank 2 only by a send from rank 1; step 1 has
// sends only. Step 0 aligned rank 2 on sends and receives, so it is not a
// step that aligned all of its ranks on collectives, and step 1 must not
// take its offsets as if it were (Carried, with no rank listed in P2P):
// it is aligned on its own sends and receives, ranks 1 and 2 listed as
// such. Rank 2's clock runs 5 ms ahead; the pairs' ends are simultaneous.
func TestSinkCarriesOnlyOffsetsFromCollectives(t *testing.T) {
	var b build
	for step := range 2 {
		o := float64(1000 * step)
		for r := range 3 {
			b.step(r, step, r, o, o+100)
		}
		if step == 0 {
			b.coll(0, step, 0, "AllReduce", "dp", 2, 0, -1, 0, 2, o+40, o+50)
			b.coll(1, step, 1, "AllReduce", "dp", 2, 1, -1, 0, 2, o+45, o+50)
		} else {
			b.coll(0, step, 0, "Send", "pp01", 2, 0, 1, 0, 2, o+10, o+12)
			b.coll(1, step, 1, "Recv", "pp01", 2, 1, 0, 0, 2, o+5, o+12)
		}
		b.coll(1, step, 1, "Send", "pp12", 2, 0, 1, 0, 2, o+60, o+62)
		b.coll(2, step, 2, "Recv", "pp12", 2, 1, 0, 0, 2, o+55, o+62)
	}
	recs := shifted(b.recs, map[int]time.Duration{2: 5 * time.Millisecond})
	s := NewSink(WithClockAlignment(), WithKeepSteps(2))
	s.Consume(recs)
	s.Flush()
	steps := s.Steps()
	if len(steps) != 2 {
		t.Fatalf("%d steps kept, want 2", len(steps))
	}
	if c := steps[0].Clock; c == nil || !slices.Equal(c.P2P, []int{2}) || c.Carried {
		t.Fatalf("step 0 clock %+v; want rank 2 aligned on sends and receives", c)
	}
	c := steps[1].Clock
	if c == nil || c.Carried || !slices.Equal(c.P2P, []int{1, 2}) {
		t.Fatalf("step 1 clock %+v; want its own offsets, ranks 1 and 2 aligned on sends and receives", c)
	}
	if d := c.Offset[2] - c.Offset[0]; d != 5*time.Millisecond {
		t.Errorf("step 1: rank 2 is %v ahead of rank 0, want 5ms", d)
	}
}
