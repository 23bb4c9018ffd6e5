package analysis

import (
	"math"
	"time"

	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

func TestSinkAnalysesAfterDelay(t *testing.T) {
	s := NewSink(WithKeepSteps(2))
	var all []profiler.Record
	for step := range 5 {
		var b build
		twoRanks(step, &b)
		all = append(all, b.recs...)
		s.Consume(b.recs)
		// Step n is analysed once both ranks delivered step n+2.
		if got, want := s.Stats().Steps, max(step-1, 0); got != want {
			t.Errorf("after step %d: %d steps analysed, want %d", step, got, want)
		}
	}
	s.Flush()
	if got := s.Stats(); got.Steps != 5 || got.Dropped != 0 || got.Late != 0 || got.Forced != 0 {
		t.Errorf("stats %+v, want 5 steps and nothing else", got)
	}
	if got := s.Steps(); len(got) != 2 || got[0].Step != 3 || got[1].Step != 4 {
		t.Errorf("kept steps %d, want the latest 2 (3 and 4)", len(got))
	}
	on, off := s.Summary(), Summarize(Analyze(all))
	if on.Complete != 5 || on.Ranks[1].Caused != off.Ranks[1].Caused || on.Straggler != 1 || off.Straggler != 1 {
		t.Errorf("sink summary %+v, offline %+v", on, off)
	}
	// A record of an analysed step is late.
	var b build
	twoRanks(1, &b)
	s.Consume(b.recs[:1])
	if got := s.Stats().Late; got != 1 {
		t.Errorf("late %d, want 1", got)
	}
}

// TestSinkHugeStepDelay: a delay no run reaches (math.MaxInt) holds every
// step until Flush; it must not wrap around to analyse them at once.
func TestSinkHugeStepDelay(t *testing.T) {
	s := NewSink(WithStepDelay(math.MaxInt), WithMaxOpenSteps(100))
	for step := 1; step <= 5; step++ { // from 1: step + delay passes MaxInt64
		var b build
		twoRanks(step, &b)
		s.Consume(b.recs)
	}
	if got := s.Stats().Steps; got != 0 {
		t.Errorf("%d steps analysed before Flush, want none", got)
	}
	s.Flush()
	if got := s.Stats(); got.Steps != 5 || got.Forced != 0 {
		t.Errorf("after Flush: %+v, want 5 steps, none forced", got)
	}
}

func TestSinkBounds(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		var b build
		twoRanks(0, &b)
		s := NewSink(WithMaxRecords(5))
		s.Consume(b.recs)
		s.Flush()
		want := len(b.recs) - 5
		if got := s.Stats().Dropped; got != uint64(want) {
			t.Errorf("dropped %d, want %d", got, want)
		}
		st := s.Steps()
		if len(st) != 1 || st[0].Complete() || !strings.Contains(strings.Join(st[0].Problems, "\n"), "records dropped") {
			t.Errorf("step does not say records were dropped: %+v", st)
		}
		if s.Summary().Complete != 0 {
			t.Errorf("a step with dropped records counted as complete")
		}
	})
	t.Run("steps", func(t *testing.T) {
		s := NewSink(WithMaxOpenSteps(2))
		for step := range 6 {
			var b build
			twoRanks(step, &b)
			if step > 0 {
				// Rank 1 stops after step 0: no step is ever ready.
				b.recs = dropRank(b.recs, 1)
			}
			s.Consume(b.recs)
		}
		st := s.Stats()
		if st.Forced == 0 || st.Steps != st.Forced {
			t.Fatalf("stats %+v: want steps analysed by force", st)
		}
		for _, x := range s.Steps() {
			if !strings.Contains(strings.Join(x.Problems, "\n"), "analysed before every rank's later steps arrived") {
				t.Errorf("step %d does not say it was analysed early: %q", x.Step, x.Problems)
			}
		}
		s.Flush()
		if got := s.Stats().Steps; got != 6 {
			t.Errorf("%d steps after Flush, want 6", got)
		}
	})
}

func dropRank(recs []profiler.Record, rank int) []profiler.Record {
	var out []profiler.Record
	for _, r := range recs {
		if r.Rank != rank {
			out = append(out, r)
		}
	}
	return out
}

// TestSinkExpectRanks: rank 1's records come after rank 0 has delivered
// four steps (a wrapped job's second process, whose first operations the
// GPU ran later). Told to expect two ranks, the sink waits for rank 1 and
// analyses every step complete; not told, it analyses the first steps
// with rank 0 alone, and rank 1's records of them come late.
func TestSinkExpectRanks(t *testing.T) {
	feed := func(s *Sink) Stats {
		var r0, r1 []profiler.Record
		for step := range 4 {
			var b build
			twoRanks(step, &b)
			for _, r := range b.recs {
				if r.Rank == 0 {
					r0 = append(r0, r)
				} else {
					r1 = append(r1, r)
				}
			}
		}
		s.Consume(r0)
		s.Consume(r1)
		s.Flush()
		return s.Stats()
	}
	told := NewSink()
	told.ExpectRanks(2)
	told.ExpectRanks(1) // smaller: no change
	if st, sum := feed(told), told.Summary(); st.Late != 0 || sum.Complete != 4 {
		t.Errorf("expecting 2 ranks: stats %+v, %d complete steps; want none late, 4 complete", st, sum.Complete)
	}
	if st := feed(NewSink()); st.Late == 0 {
		t.Errorf("not told: stats %+v; want rank 1's records of the first steps late (else this test shows nothing)", st)
	}
}

// TestSinkCarriesClockOffsets: rank 1's clock runs 5 ms ahead. Step 0
// has an all-reduce to align the ranks on; steps 1 and 2 only pass
// activations (a send and a receive). The online sink aligns them with
// step 0's offsets instead of leaving them out, says so (Carried), and
// their transfers are measured on one clock.
func TestSinkCarriesClockOffsets(t *testing.T) {
	var recs []profiler.Record
	for step := range 3 {
		var b build
		twoRanks(step, &b)
		for _, r := range b.recs {
			if step > 0 && r.Name == "AllReduce" {
				continue
			}
			recs = append(recs, r)
		}
	}
	recs = shifted(recs, map[int]time.Duration{1: 5 * time.Millisecond})
	s := NewSink(WithClockAlignment(), WithKeepSteps(3))
	s.Consume(recs)
	s.Flush()
	steps := s.Steps()
	if len(steps) != 3 {
		t.Fatalf("%d steps kept, want 3", len(steps))
	}
	for _, st := range steps {
		if len(st.Problems) != 0 || st.Clock == nil {
			t.Errorf("step %d: problems %q, clock %v; want none and a clock", st.Step, st.Problems, st.Clock)
			continue
		}
		if d := st.Clock.Offset[1] - st.Clock.Offset[0]; d != 5*time.Millisecond {
			t.Errorf("step %d: rank 1 is %v ahead of rank 0, want 5ms", st.Step, d)
		}
		if carried := st.Step > 0; st.Clock.Carried != carried || carried && st.Clock.CarriedFrom != 0 {
			t.Errorf("step %d: carried %v from %d; want carried from step 0 for steps 1 and 2 only", st.Step, st.Clock.Carried, st.Clock.CarriedFrom)
		}
	}
	if sum := s.Summary(); sum.Complete != 3 {
		t.Errorf("%d complete steps, want 3", sum.Complete)
	}
}

// TestStragglerMustMatter: rank 1 arrives 5 ms after rank 0 at every
// all-reduce. In steps of 100 ms that is 5 % of a step: rank 1 is named.
// In steps of 900 ms (the same work, the step ranges longer) it is under
// 1 %: no straggler is named, and the report says why.
func TestStragglerMustMatter(t *testing.T) {
	summary := func(wall float64) Summary {
		var recs []profiler.Record
		for step := range 3 {
			var b build
			twoRanks(step, &b)
			for _, r := range b.recs {
				if r.Name == profiler.StepName {
					r.HostEnd = r.HostStart + time.Duration(wall*float64(time.Millisecond))
				}
				recs = append(recs, r)
			}
		}
		return Summarize(Analyze(recs))
	}
	if s := summary(100); s.Straggler != 1 || s.Minor {
		t.Errorf("100 ms steps: straggler %d, minor %v; want rank 1 named", s.Straggler, s.Minor)
	}
	s := summary(900)
	if s.Straggler != profiler.None || !s.Minor || s.MinorRank != 1 {
		t.Fatalf("900 ms steps: straggler %d, minor %v rank %d; want none named, rank 1 minor", s.Straggler, s.Minor, s.MinorRank)
	}
	var buf strings.Builder
	if err := WriteReport(&buf, s); err != nil {
		t.Fatal(err)
	}
	want := "straggler: none that matters: rank 1 caused 100% of the waiting at collectives, but 5.000 ms per step, under 1% of its mean step (900.000 ms)"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, buf.String())
	}
}

// TestSinkExpectRanksNeverCome: four ranks expected, two ever deliver (a
// job on two hosts, one of them out of reach). Each step is analysed
// once the two are expectSlack steps past it, complete, not forced.
func TestSinkExpectRanksNeverCome(t *testing.T) {
	s := NewSink()
	s.ExpectRanks(4)
	for step := range 20 {
		var b build
		twoRanks(step, &b)
		s.Consume(b.recs)
		// Step n is analysed once both ranks delivered step n+2+8.
		if got, want := s.Stats().Steps, max(step-2-expectSlack+1, 0); got != want {
			t.Fatalf("after step %d: %d steps analysed, want %d", step, got, want)
		}
	}
	s.Flush()
	if st, sum := s.Stats(), s.Summary(); st.Forced != 0 || sum.Complete != 20 {
		t.Errorf("stats %+v, %d complete; want 20 complete, none forced", st, sum.Complete)
	}
}

// TestSinkReportsLateRecords: a record of a step already analysed is in
// no figure, and the report says how many came so.
func TestSinkReportsLateRecords(t *testing.T) {
	var b build
	for s := range 4 {
		o := float64(100 * s)
		b.step(0, s, 0, o, o+50)
		b.dev(0, s, 0, 0, 0, profiler.Forward, 1, o+10, o+20)
	}
	s := NewSink(WithStepDelay(1))
	s.Consume(b.recs)
	var late build
	late.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 30, 40) // step 0, analysed by now
	late.dev(0, 1, 0, 0, 0, profiler.Forward, 1, 130, 140)
	late.recs[1].Kind, late.recs[1].Name = profiler.KindKernel, "gemm"
	s.Consume(late.recs)
	s.Flush()
	sum := s.Summary()
	if sum.Late != 2 || s.Stats().Late != 2 {
		t.Fatalf("late %d (stats %d), want 2", sum.Late, s.Stats().Late)
	}
	var w strings.Builder
	if err := WriteReport(&w, sum); err != nil {
		t.Fatal(err)
	}
	// Steps 0 to 2 were analysed when the late records came (step 3 was
	// one step further on); the first of them was the forward of step 0.
	if want := `2 records came after their step was analysed and are in no figure above (1 device, 1 kernel; the first: rank 0's device "forward" of step 0, after steps up to 2 were analysed)`; !strings.Contains(w.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, w.String())
	}
}

// A step whose ranges the profiler dropped while recording is left out of
// the figures, with a problem naming the rank, and the report says how
// many ranges were dropped; drops of a step already analysed or of no
// step are counted apart, since no step can be left out for them.
func TestSinkLeavesOutStepsThatLostRanges(t *testing.T) {
	s := NewSink()
	s.ConsumeLost([]profiler.Lost{{Rank: 1, Step: 2, Ranges: 7}, {Rank: 0, Step: profiler.None, Ranges: 2}})
	for step := range 5 {
		var b build
		twoRanks(step, &b)
		s.Consume(b.recs)
		if step == 3 {
			// Step 0 is analysed by now: its drops come too late.
			s.ConsumeLost([]profiler.Lost{{Rank: 0, Step: 0, Ranges: 1}})
		}
	}
	s.Flush()
	st := s.Stats()
	if st.Steps != 5 || st.Lost != 10 || st.LostLate != 1 || st.LostUnlabelled != 2 {
		t.Fatalf("stats %+v: want 5 steps, 10 ranges lost, 1 of them late and 2 of no step", st)
	}
	sum := s.Summary()
	if sum.Complete != 4 || sum.ProblemSteps != 1 {
		t.Fatalf("%d complete steps, %d with problems; want 4 and step 2", sum.Complete, sum.ProblemSteps)
	}
	want := "step 2: rank 1: ranges of this step were dropped while recording"
	if len(sum.Problems) != 1 || !strings.HasPrefix(sum.Problems[0], want) {
		t.Errorf("problems %q, want one starting %q", sum.Problems, want)
	}
	// The figures are those of the other four steps: rank 1's mean step
	// as with step 2 not there at all.
	var kept []profiler.Record
	for _, step := range []int{0, 1, 3, 4} {
		var b build
		twoRanks(step, &b)
		kept = append(kept, b.recs...)
	}
	if off := Summarize(Analyze(kept)); sum.Ranks[1].Caused != off.Ranks[1].Caused || sum.Ranks[1].Steps != off.Ranks[1].Steps {
		t.Errorf("rank 1: caused %v over %d steps, want %v over %d (the four steps without drops)", sum.Ranks[1].Caused, sum.Ranks[1].Steps, off.Ranks[1].Caused, off.Ranks[1].Steps)
	}
	var w strings.Builder
	if err := WriteReport(&w, sum); err != nil {
		t.Fatal(err)
	}
	line := "10 ranges dropped while recording (the recorders' buffers were full: the profiler's collector fell behind the ranks); the steps that lost some are left out of the figures, but 3 of them belonged to steps already analysed or to no step the profiler could name"
	if !strings.Contains(w.String(), line) {
		t.Errorf("report lacks %q:\n%s", line, w.String())
	}
	if strings.Contains(w.String(), "(few:") {
		t.Errorf("four complete steps are said to be few:\n%s", w.String())
	}
}
