package analysis

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// stepless builds n all-reduces of group dp among three ranks, without
// step labels, as a wrapped run records them: collective k starts at
// 10k ms; rank 0 arrives at +0, rank 1 at +1, rank 2 at +4, and all leave
// at +6. shift moves every time of a rank (its clock running ahead).
func stepless(n int, shift map[int]float64) []profiler.Record {
	var b build
	arrive := []float64{0, 1, 4}
	for k := range n {
		o := float64(10 * k)
		for r := range 3 {
			s := shift[r]
			b.coll(r, profiler.None, profiler.None, "AllReduce", "dp", 3, r, -1, uint64(k), 1, o+arrive[r]+s, o+6+s)
		}
	}
	return b.recs
}

// TestCallSinkByHand: the figures of TestCallSinkByHand's collectives,
// worked out by hand: each has skew 4 ms, rank 2 arriving last; ranks 0
// and 1 wait 4 and 3 ms for it, so it causes 7 ms per call and holds the
// call up 3 ms (its arrival less rank 1's); 2 ms of transfer follow.
func TestCallSinkByHand(t *testing.T) {
	const n = 20
	recs := stepless(n, nil)
	s := NewCallSink()
	// Delivered in three batches, one rank's records interleaved with
	// the next's as a collector merges processes.
	s.Consume(recs[:25])
	s.Consume(recs[25:40])
	s.Consume(recs[40:])
	sum := s.Summary()
	if !sum.Stepless || sum.Steps != 0 {
		t.Fatalf("summary stepless %v, %d steps; want stepless, none", sum.Stepless, sum.Steps)
	}
	c := sum.Collectives
	if c.Matched != n || c.Incomplete != 0 || c.Skew != n*d(4) || c.MaxSkew != d(4) || c.Wait != n*d(7) || c.Transfer != n*d(2) {
		t.Errorf("collectives %+v; want %d matched, skew 4 ms each, waiting 7 ms and transfer 2 ms per call", c, n)
	}
	if math.Abs(float64(c.P50Skew-d(4))) > 0.01*float64(d(4)) {
		t.Errorf("p50 skew %v, want 4ms within 1%%", c.P50Skew)
	}
	want := []RankTotals{
		{Rank: 0, Stage: profiler.None, Calls: n, Waited: n * d(4)},
		{Rank: 1, Stage: profiler.None, Calls: n, Waited: n * d(3)},
		{Rank: 2, Stage: profiler.None, Calls: n, Caused: n * d(7), HeldUp: n * d(3), Score: 1},
	}
	if len(sum.Ranks) != 3 {
		t.Fatalf("ranks %+v, want 3", sum.Ranks)
	}
	for i, w := range want {
		if sum.Ranks[i] != w {
			t.Errorf("rank %d: %+v, want %+v", i, sum.Ranks[i], w)
		}
	}
	if sum.Straggler != 2 {
		t.Errorf("straggler %d, want 2", sum.Straggler)
	}
	if o := sum.Offsets; o == nil || o.Offset[1] != 0 || o.MaxResidual() != 0 || o.Samples[2] != n {
		t.Errorf("clock estimate %+v; want offsets 0, residual 0, %d samples", o, n)
	}
	if sum.Aligned {
		t.Error("aligned without WithClockAlignment")
	}
	var out bytes.Buffer
	if err := WriteReport(&out, sum); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"collectives: 20 matched across ranks; arrival skew p50 4.0",
		"mean per call: waiting 7.000 ms (all ranks), transfer 2.000 ms",
		"straggler: rank 2 caused 100% of the waiting at collectives (140.000 ms; it held them up 60.000 ms",
		"clocks not aligned; departures from collectives against their median, by rank: 0 +0.000 ms 1 +0.000 ms 2 +0.000 ms; largest residual 0.000 ms",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
	// Sends, receives and ranges are not matched.
	var b build
	b.coll(0, profiler.None, profiler.None, "Send", "pp", 2, 0, 1, 0, 1, 0, 1)
	b.dev(0, profiler.None, profiler.None, 0, 0, profiler.Forward, 1, 0, 1)
	s2 := NewCallSink()
	s2.Consume(b.recs)
	s2.Flush()
	if st := s2.Stats(); st != (CallStats{}) {
		t.Errorf("a send and a range: %+v, want nothing decided", st)
	}
}

// TestCallSinkAlignsClocks: rank 1's clock runs 5 ms ahead. Unaligned,
// it seems to arrive last at every call; aligned, its offset is found
// exactly (every departure is 5 ms late against the others') from the
// 8th call on, and the calls after are charged to rank 2. The first 7,
// before the estimate is applied, stay charged to rank 1: 0 → 6 ms
// (arrival 1+5 against rank 0's 0) and 2 → 2 ms of waiting each.
func TestCallSinkAlignsClocks(t *testing.T) {
	const n = 100
	recs := stepless(n, map[int]float64{1: 5})
	plain := NewCallSink()
	plain.Consume(recs)
	if got := plain.Summary().Straggler; got != 1 {
		t.Errorf("unaligned: straggler %d, want 1 (its clock makes it look late)", got)
	}
	s := NewCallSink(WithClockAlignment())
	s.Consume(recs)
	sum := s.Summary()
	if !sum.Aligned || sum.Offsets.Offset[1] != d(5) || sum.Offsets.Offset[0] != 0 || sum.MaxClockResidual != 0 {
		t.Fatalf("aligned %v, offsets %+v; want rank 1 at +5ms, residual 0", sum.Aligned, sum.Offsets)
	}
	early := MinClockSamples - 1
	r1, r2 := sum.Ranks[1], sum.Ranks[2]
	if want := time.Duration(early) * d(8); r1.Caused != want {
		t.Errorf("rank 1 caused %v, want %v (the %d calls before the offset applied)", r1.Caused, want, early)
	}
	if want := time.Duration(n-early) * d(7); r2.Caused != want {
		t.Errorf("rank 2 caused %v, want %v", r2.Caused, want)
	}
	if sum.Straggler != 2 {
		t.Errorf("aligned: straggler %d, want 2 (scores %.2f %.2f)", sum.Straggler, r1.Score, r2.Score)
	}
}

// TestCallSinkTooFewToAlign: asked to align clocks, a sink that matched
// only 3 collectives applies no offset (docs/analysis.md: 8 are needed),
// and its report says so instead of a bare "not aligned".
func TestCallSinkTooFewToAlign(t *testing.T) {
	s := NewCallSink(WithClockAlignment())
	s.Consume(stepless(3, map[int]float64{1: 5}))
	sum := s.Summary()
	if sum.Aligned || sum.Collectives.Matched != 3 {
		t.Fatalf("aligned %v, %d matched; want not aligned, 3 matched", sum.Aligned, sum.Collectives.Matched)
	}
	var out bytes.Buffer
	if err := WriteReport(&out, sum); err != nil {
		t.Fatal(err)
	}
	want := "clocks not aligned: only 3 collectives matched across ranks, and alignment needs a rank in at least 8; departures from collectives against their median, by rank: 0 +0.000 ms 1 +5.000 ms 2 +0.000 ms"
	if !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}
}

// TestCallSinkIncomplete: a call rank 2 never made is decided at Flush
// and said to be incomplete; with a cap of 4 held records, calls whose
// last rank lags are decided early with what they have, and the sink
// never holds more.
func TestCallSinkIncomplete(t *testing.T) {
	recs := stepless(10, nil)
	var kept []profiler.Record
	for _, r := range recs {
		if r.Rank == 2 && r.Collective.Seq == 5 {
			continue
		}
		kept = append(kept, r)
	}
	s := NewCallSink()
	s.Consume(kept)
	if st := s.Stats(); st.Matched != 9 || st.Incomplete != 0 {
		t.Errorf("before Flush: %+v, want 9 matched, the 10th open", st)
	}
	s.Flush()
	sum := s.Summary()
	if sum.Collectives.Matched != 9 || sum.Collectives.Incomplete != 1 {
		t.Errorf("collectives %+v, want 9 matched and 1 incomplete", sum.Collectives)
	}
	// One line for the group: rank 2 recorded its other calls, so no
	// rank of it is outside the job.
	if len(sum.Problems) != 1 || !strings.HasPrefix(sum.Problems[0], "group dp: 1 collectives not recorded by every rank (first: #5 (AllReduce): 2 of 3 ranks recorded it (ranks 0, 1)") ||
		strings.Contains(sum.Problems[0], "outside the wrapped job") {
		t.Errorf("problems %q", sum.Problems)
	}
	var out bytes.Buffer
	if err := WriteReport(&out, sum); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "9 matched across ranks, 1 not recorded by every rank of their group") {
		t.Errorf("report:\n%s", out.String())
	}

	// Rank 2 never records anything (a process outside the job): every
	// call is incomplete, and the line for the group says which ranks it
	// heard from.
	var two []profiler.Record
	for _, r := range recs {
		if r.Rank != 2 {
			two = append(two, r)
		}
	}
	missing := NewCallSink()
	missing.Consume(two)
	missing.Flush()
	ms := missing.Summary()
	if ms.Collectives.Matched != 0 || ms.Collectives.Incomplete != 10 || len(ms.Problems) != 1 ||
		!strings.Contains(ms.Problems[0], "group dp: 10 collectives not recorded by every rank") ||
		!strings.Contains(ms.Problems[0], "only ranks 0, 1 of its 3 recorded any of its collectives") {
		t.Errorf("rank 2 missing: %+v, problems %q", ms.Collectives, ms.Problems)
	}

	// Rank 2's records come after everyone else's.
	var lagging []profiler.Record
	for _, r := range recs {
		if r.Rank != 2 {
			lagging = append(lagging, r)
		}
	}
	for _, r := range recs {
		if r.Rank == 2 {
			lagging = append(lagging, r)
		}
	}
	capped := NewCallSink(WithMaxRecords(4))
	for i := range lagging {
		capped.Consume(lagging[i : i+1])
		if capped.held > 4 || len(capped.open) > 4 {
			t.Fatalf("after record %d: %d records in %d calls held, cap 4", i, capped.held, len(capped.open))
		}
	}
	capped.Flush()
	st := capped.Stats()
	if st.Matched+st.Incomplete < 10 || st.Incomplete == 0 {
		t.Errorf("capped: %+v; want every call decided, some incomplete", st)
	}
	if capped.held != 0 || len(capped.open) != 0 || len(capped.order) != 0 {
		t.Errorf("after Flush: %d held, %d open, %d ordered", capped.held, len(capped.open), len(capped.order))
	}
}

// TestCallSinkStragglerMustMatter: rank 2 arrives last at every
// all-reduce and causes 7 ms of waiting each time. With a call every
// 10 ms that is most of the time its collectives span, and it is named;
// with a call every second (19.002 s spanned, 140 ms caused: 0.7 %) it is
// not, and the report says why.
func TestCallSinkStragglerMustMatter(t *testing.T) {
	sparse := func(every float64) []profiler.Record {
		var b build
		arrive := []float64{0, 1, 4}
		for k := range 20 {
			o := every * float64(k)
			for r := range 3 {
				b.coll(r, profiler.None, profiler.None, "AllReduce", "dp", 3, r, -1, uint64(k), 1, o+arrive[r], o+6)
			}
		}
		return b.recs
	}
	s := NewCallSink()
	s.Consume(sparse(10))
	s.Flush()
	if sum := s.Summary(); sum.Straggler != 2 || sum.Minor {
		t.Errorf("a call every 10 ms: straggler %d, minor %v; want rank 2 named", sum.Straggler, sum.Minor)
	}
	s = NewCallSink()
	s.Consume(sparse(1000))
	s.Flush()
	sum := s.Summary()
	if sum.Straggler != profiler.None || !sum.Minor || sum.MinorRank != 2 || sum.MinorSpan != 19002*time.Millisecond {
		t.Fatalf("a call every second: straggler %d, minor %v rank %d over %v; want none named, rank 2 minor over 19.002 s (its first arrival at 4 ms to its last departure)",
			sum.Straggler, sum.Minor, sum.MinorRank, sum.MinorSpan)
	}
	var buf strings.Builder
	if err := WriteReport(&buf, sum); err != nil {
		t.Fatal(err)
	}
	want := "straggler: none that matters: rank 2 caused 100% of the waiting at collectives, but 140.000 ms in all, under 1% of the 19.002 s its collectives spanned"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, buf.String())
	}
}

// TestSameNamedCommunicators: two data-parallel communicators both named
// "dp" ({0, 2} and {1, 3}, as Megatron-LM names every data-parallel
// group), with the same sequence numbers. Matched by name alone their
// calls mix; with GroupID each collective has its own two ranks, and the
// skews are the ones built in: 1 ms in the first communicator, 3 ms in
// the second.
func TestSameNamedCommunicators(t *testing.T) {
	var b build
	const a, c = 0xa1, 0xc3 // the communicators' ids
	for s := range 2 {
		o := float64(100 * s)
		for r := range 4 {
			b.step(r, s, r%2, o, o+50)
		}
		for _, m := range []struct {
			rank, grank int
			gid         uint64
			arrive      float64
		}{{0, 0, a, 10}, {2, 1, a, 11}, {1, 0, c, 10}, {3, 1, c, 13}} {
			b.coll(m.rank, s, m.rank%2, "AllReduce", "dp", 2, m.grank, -1, uint64(s), 1, o+m.arrive, o+20)
			b.recs[len(b.recs)-1].Collective.GroupID = m.gid
		}
	}
	for _, st := range Analyze(b.recs) {
		if len(st.Collectives) != 2 {
			t.Fatalf("step %d: %d collectives, want 2 (one per communicator)", st.Step, len(st.Collectives))
		}
		for _, col := range st.Collectives {
			var ranks []int
			for _, m := range col.Members {
				ranks = append(ranks, m.Rank)
			}
			slices.Sort(ranks)
			want, skew := []int{0, 2}, time.Millisecond
			if col.GroupID == c {
				want, skew = []int{1, 3}, 3*time.Millisecond
			}
			if !col.Complete || !slices.Equal(ranks, want) || col.Skew != skew {
				t.Errorf("step %d: %s [%x] #%d: complete %v, ranks %v, skew %v; want ranks %v, skew %v (%s)",
					st.Step, col.Group, col.GroupID, col.Seq, col.Complete, ranks, col.Skew, want, skew, col.Problem)
			}
		}
	}
	cs := NewCallSink()
	cs.Consume(b.recs)
	cs.Flush()
	if st := cs.Stats(); st.Matched != 4 || st.Incomplete != 0 {
		t.Errorf("CallSink: %d matched, %d incomplete; want 4 and 0", st.Matched, st.Incomplete)
	}
	sum := cs.Summary()
	if got := sum.Collectives.MaxSkew; got != 3*time.Millisecond {
		t.Errorf("CallSink: max skew %v, want 3ms", got)
	}
}
