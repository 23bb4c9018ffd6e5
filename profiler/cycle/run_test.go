package cycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// longJob is a rank's collectives over a long run: a warm-up step of
// other sizes, then steps of three all-reduces 5 ms apart and a pause to
// 50 ms; the steps in stall take extra longer (a checkpoint in the
// pause), and before the steps in eval two other collectives come in the
// pause (an evaluation). It returns the records and each step's start.
func longJob(rank, steps int, stall map[int]bool, extra time.Duration, eval map[int]bool) ([]profiler.Record, []time.Duration) {
	j := &job{rank: rank}
	j.call(0, "AllReduce", 7*mib, -1)
	j.call(5*ms, "AllReduce", 3*mib, -1)
	t := 100 * ms
	starts := make([]time.Duration, steps)
	for s := range steps {
		if eval[s] {
			j.call(t, "AllGather", 1*mib, -1)
			j.call(t+5*ms, "AllReduce", 4, -1)
			t += 20 * ms
		}
		starts[s] = t
		for i, b := range []int64{4, 4, 1} {
			j.call(t+time.Duration(i)*5*ms, "AllReduce", b*mib, -1)
		}
		t += 50 * ms
		if stall[s] {
			t += extra
		}
	}
	return j.recs, starts
}

// feed hands recs to s in batches of n.
func feed(s *cycle.Sink, recs []profiler.Record, n int) {
	for len(recs) > 0 {
		k := min(n, len(recs))
		s.Consume(recs[:k])
		recs = recs[k:]
	}
}

func TestRunCountsEveryCycle(t *testing.T) {
	const steps = 5000 // 15,000 operations: 25 windows of 600
	stall := map[int]bool{1000: true, 3000: true, 4000: true}
	eval := map[int]bool{2500: true}
	recs, starts := longJob(0, steps, stall, 300*ms, eval)
	s := cycle.NewSink(600)
	feed(s, recs, 7)
	s.Finish()
	res := s.Result()
	if len(res.Ranks) != 1 || !res.Ranks[0].Found {
		t.Fatalf("no cycle: %+v", res.Ranks)
	}
	run := res.Ranks[0].Run
	// Every step is timed up to the next one's start but the last (no
	// next) and the one before the evaluation (other collectives follow
	// it).
	if run.Cycles != steps-2 {
		t.Errorf("%d cycles, want %d", run.Cycles, steps-2)
	}
	if run.Breaks != 1 || run.Missed != 0 {
		t.Errorf("breaks %d, missed %d; want 1, 0", run.Breaks, run.Missed)
	}
	if run.From != starts[0] || run.To != starts[steps-1] {
		t.Errorf("from %v to %v, want %v to %v", run.From, run.To, starts[0], starts[steps-1])
	}
	near(t, "p50", run.P50, 50*ms, ms/2)
	near(t, "p99", run.P99, 50*ms, ms/2)
	if run.Min != 50*ms || run.Max != 350*ms {
		t.Errorf("min %v max %v, want 50ms 350ms", run.Min, run.Max)
	}
	want := 3*350*ms + (steps-2-3)*50*ms
	if run.Sum != want {
		t.Errorf("sum %v, want %v", run.Sum, want)
	}
	if len(run.Longest) != cycle.LongestKept {
		t.Fatalf("%d longest, want %d", len(run.Longest), cycle.LongestKept)
	}
	for i, s := range []int{1000, 3000, 4000} {
		if c := run.Longest[i]; c.Start != starts[s] || c.Duration != 350*ms {
			t.Errorf("longest %d: %+v, want step %d at %v, 350ms", i, c, s, starts[s])
		}
	}
	text := res.RunText()
	for _, w := range []string{"cycles over the run: 4998 on rank 0", "p50 50.", "max 350.0 ms",
		"the longest of 2× the median or more: 350.0 ms at", "the sequence broke off once"} {
		if !strings.Contains(text, w) {
			t.Errorf("run text lacks %q:\n%s", w, text)
		}
	}
}

// phase adds steps of n all-reduces of size bytes, gap apart, a step
// every step from t0; it returns when the next would start.
func (j *job) phase(t0 time.Duration, steps, n int, bytes int64, gap, step time.Duration) time.Duration {
	for s := range steps {
		at := t0 + time.Duration(s)*step
		for i := range n {
			j.call(at+time.Duration(i)*gap, "AllReduce", bytes, -1)
		}
	}
	return t0 + time.Duration(steps)*step
}

func TestRunFollowsANewSequence(t *testing.T) {
	// Steps of one sequence, then steps of another: the first sequence's
	// cycles, one break, the second's. Where the first has 150
	// operations a step, four of its cycles' worth of operations without
	// it (the sign it has changed) span more than the half window
	// between two counts.
	type phase struct {
		steps, ops int
		bytes      int64
		gap, step  time.Duration
	}
	for _, tc := range [][2]phase{
		{{2000, 3, 4 * mib, 5 * ms, 50 * ms}, {2000, 4, 2 * mib, 4 * ms, 60 * ms}},
		{{30, 150, 4 * mib, 10 * ms, 1700 * ms}, {300, 3, 2 * mib, 5 * ms, 50 * ms}},
	} {
		j := &job{}
		t0 := j.phase(0, tc[0].steps, tc[0].ops, tc[0].bytes, tc[0].gap, tc[0].step)
		j.phase(t0, tc[1].steps, tc[1].ops, tc[1].bytes, tc[1].gap, tc[1].step)
		s := cycle.NewSink(600)
		feed(s, j.recs, 5)
		s.Finish()
		run := s.Result().Ranks[0].Run
		// Every step but the last of each sequence is timed.
		want := tc[0].steps - 1 + tc[1].steps - 1
		if run.Cycles != want || run.Breaks != 1 || run.Missed != 0 {
			t.Errorf("%d then %d operations a step: %d cycles, %d breaks, %d missed; want %d, 1, 0", tc[0].ops, tc[1].ops, run.Cycles, run.Breaks, run.Missed, want)
		}
		if a, b := min(tc[0].step, tc[1].step), max(tc[0].step, tc[1].step); run.Min != a || run.Max != b {
			t.Errorf("%d then %d operations a step: min %v max %v, want %v %v", tc[0].ops, tc[1].ops, run.Min, run.Max, a, b)
		}
		if want := time.Duration(tc[0].steps-1)*tc[0].step + time.Duration(tc[1].steps-1)*tc[1].step; run.Sum != want {
			t.Errorf("%d then %d operations a step: sum %v, want %v", tc[0].ops, tc[1].ops, run.Sum, want)
		}
	}
}

func TestRunSaysWhenCyclesWereMissed(t *testing.T) {
	// Steps of 1 ms: 3,000 operations a second, more than a window of
	// 600 arrive within TrackLag, so cycles leave it uncounted, and Run
	// says so rather than count too few in silence.
	j := &job{}
	for s := range 20000 {
		at := time.Duration(s) * ms
		j.call(at, "AllReduce", 4*mib, -1)
		j.call(at+100*time.Microsecond, "AllReduce", 4*mib, -1)
		j.call(at+200*time.Microsecond, "AllReduce", mib, -1)
	}
	s := cycle.NewSink(600)
	feed(s, j.recs, 16)
	s.Finish()
	res := s.Result()
	run := res.Ranks[0].Run
	if run.Missed == 0 || run.Cycles == 0 || run.Cycles >= 19999 {
		t.Errorf("%d cycles, %d missed: want some of 19999 counted and misses counted", run.Cycles, run.Missed)
	}
	if !strings.Contains(res.RunText(), "cycles were missed") {
		t.Errorf("run text does not say cycles were missed:\n%s", res.RunText())
	}
}

func TestRunCycleFoundLate(t *testing.T) {
	// 1,000 operations that never repeat (more than the window), then
	// 500 steps: the operations that left the window held no cycle, so
	// none was missed; every step but the last is timed.
	j := &job{}
	for i := range 1000 {
		j.call(time.Duration(i)*10*ms, "AllReduce", int64(i+1), -1)
	}
	j.phase(10*time.Second, 500, 3, 4*mib, 5*ms, 50*ms)
	s := cycle.NewSink(600)
	feed(s, j.recs, 3)
	s.Finish()
	run := s.Result().Ranks[0].Run
	if run.Cycles != 499 || run.Missed != 0 || run.Breaks != 0 || run.From != 10*time.Second {
		t.Errorf("%d cycles from %v, %d missed, %d breaks; want 499 from 10s, none missed, no break", run.Cycles, run.From, run.Missed, run.Breaks)
	}
}

func TestRunTakesTheCycleALaterSearchFinds(t *testing.T) {
	// The first 20 steps alternate between 40 and 60 ms (a job warming up
	// on a loaded machine): three all-reduces apart take no steady time,
	// six do, and the first search, a TrackLag into the run, takes two
	// steps for the cycle. 120 steps of 50 ms follow: with every
	// operation still kept, the later searches find the step of three,
	// and the run counts steps, not pairs of them.
	j := &job{}
	var starts []time.Duration
	at := time.Duration(0)
	for s := range 140 {
		starts = append(starts, at)
		for i, b := range []int64{4, 4, 1} {
			j.call(at+time.Duration(i)*5*ms, "AllReduce", b*mib, -1)
		}
		switch {
		case s >= 20:
			at += 50 * ms
		case s%2 == 0:
			at += 40 * ms
		default:
			at += 60 * ms
		}
	}
	s := cycle.NewSink(0)
	// The first search sees the warm-up alone: the pair is its cycle.
	feed(s, j.recs[:3*22], 3)
	if r := s.Result().Ranks[0]; !r.Found || r.Length != 6 {
		t.Fatalf("after the warm-up: found %v, %d operations a cycle; want 6 (two steps)", r.Found, r.Length)
	}
	feed(s, j.recs[3*22:], 3)
	s.Finish()
	r := s.Result().Ranks[0]
	if !r.Found || r.Length != 3 {
		t.Fatalf("found %v, %d operations a cycle; want 3", r.Found, r.Length)
	}
	run := r.Run
	if run.Cycles != 139 || run.Breaks != 0 || run.Missed != 0 || run.From != starts[0] || run.To != starts[139] {
		t.Errorf("%d cycles from %v to %v, %d breaks, %d missed; want 139 from %v to %v, none broken or missed",
			run.Cycles, run.From, run.To, run.Breaks, run.Missed, starts[0], starts[139])
	}
	if run.Min != 40*ms || run.Max != 60*ms || run.Sum != starts[139]-starts[0] {
		t.Errorf("min %v max %v sum %v; want 40ms 60ms %v", run.Min, run.Max, run.Sum, starts[139]-starts[0])
	}
	near(t, "p50", run.P50, 50*ms, ms/2)
}
