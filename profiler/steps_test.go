package profiler_test

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

func TestStepBreakdown(t *testing.T) {
	lbl := func(step int32, stage int16, ph profiler.Phase) profiler.Labels {
		l := profiler.NoLabels
		l.Step, l.Stage, l.Phase = step, stage, ph
		return l
	}
	dev := func(id, parent uint64, name string, rank int, l profiler.Labels, s, e time.Duration) profiler.Record {
		return profiler.Record{ID: id, Parent: parent, Depth: 1, Name: name, Kind: profiler.KindDevice, Rank: rank, Labels: l,
			Stream: uint64(rank + 1), HostStart: s, HostEnd: e, HasDevice: true, DeviceStart: s, DeviceEnd: e}
	}
	recs := []profiler.Record{
		// Rank 0: a 1000us step; forward 100–400 and backward 300–600
		// overlap (union 500us), the optimizer 600–700 counts, and a
		// forward spilling past the step's end (900–1200) counts up to
		// it (100us). Busy 700us.
		{ID: 1, Name: "step", Rank: 0, Labels: lbl(0, 0, profiler.PhaseNone), HostStart: 0, HostEnd: 1000 * us},
		dev(2, 1, "forward", 0, lbl(0, 0, profiler.Forward), 100*us, 400*us),
		dev(3, 1, "backward", 0, lbl(0, 0, profiler.Backward), 300*us, 600*us),
		dev(4, 1, "optimizer", 0, lbl(0, 0, profiler.Optimizer), 600*us, 700*us),
		dev(5, 1, "forward", 0, lbl(0, 0, profiler.Forward), 900*us, 1200*us),
		// Rank 1: two steps of 500us and 1500us. In the first, a forward
		// on the device 0–250 and a host-only forward (not busy); in the
		// second, a backward 600–1350 with a wait for input 700–800 on
		// its stream inside it: busy 650us.
		{ID: 1, Name: "step", Rank: 1, Labels: lbl(0, 1, profiler.PhaseNone), HostStart: 0, HostEnd: 500 * us},
		dev(2, 1, "forward", 1, lbl(0, 1, profiler.Forward), 0, 250*us),
		{ID: 3, Parent: 1, Depth: 1, Name: "forward", Rank: 1, Labels: lbl(0, 1, profiler.Forward), HostStart: 250 * us, HostEnd: 500 * us},
		{ID: 4, Name: "step", Rank: 1, Labels: lbl(1, 1, profiler.PhaseNone), HostStart: 600 * us, HostEnd: 2100 * us},
		dev(5, 4, "backward", 1, lbl(1, 1, profiler.Backward), 600*us, 1350*us),
		dev(6, 5, "recv", 1, lbl(1, 1, profiler.Comm), 700*us, 800*us),
	}
	got := profiler.StepBreakdown(recs)
	if len(got) != 2 {
		t.Fatalf("%d ranks", len(got))
	}
	r0, r1 := got[0], got[1]
	if r0.Rank != 0 || r0.Steps != 1 || r0.Wall != 1000*us || r0.Busy != 700*us || r0.Stage != 0 {
		t.Errorf("rank 0: %+v, want 1 step, wall 1000us, busy 700us, stage 0", r0)
	}
	if r0.IdleFraction() != 0.3 || r0.BusyFraction() != 0.7 {
		t.Errorf("rank 0 idle %v busy %v, want 0.3 and 0.7", r0.IdleFraction(), r0.BusyFraction())
	}
	if r1.Steps != 2 || r1.Wall != 2000*us || r1.Busy != 900*us || r1.MeanStep() != time.Millisecond || r1.Stage != 1 {
		t.Errorf("rank 1: %+v, want 2 steps, wall 2000us, busy 250+650us, mean 1ms, stage 1", r1)
	}
	var buf bytes.Buffer
	if err := profiler.WriteStepBreakdown(&buf, got, 0.2); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range []string{"Mean step(ms)", "70.0", "30.0", "45.0", "55.0", "ideal pipeline bubble for this schedule: 20.0%"} {
		if !strings.Contains(out, w) {
			t.Errorf("breakdown lacks %q:\n%s", w, out)
		}
	}
}

// The rank with the longest mean step is measured against the true median
// of the ranks' mean steps and named only when it stands out more than
// StandOut (10%) above it: the few-percent differences of a synchronous
// pipeline are not a slow rank. A single rank is compared with nothing.
func TestStepBreakdownMedian(t *testing.T) {
	ranks := func(means ...time.Duration) []profiler.RankSteps {
		var out []profiler.RankSteps
		for i, m := range means {
			out = append(out, profiler.RankSteps{Rank: i, Stage: profiler.None, Steps: 2, Wall: 2 * m})
		}
		return out
	}
	const us = time.Microsecond
	for _, c := range []struct {
		means []time.Duration
		want  string // "" for no line on the means
	}{
		{[]time.Duration{time.Millisecond}, ""},
		// Two ranks: the median is their mean, 2 ms; rank 1 is 50% above it.
		{[]time.Duration{time.Millisecond, 3 * time.Millisecond}, "longest mean step: rank 1, 3.000 ms, 50.0% above the median (2.000 ms)"},
		// Three: the middle one.
		{[]time.Duration{4 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, "longest mean step: rank 0, 4.000 ms, 100.0% above the median (2.000 ms)"},
		// Four: the mean of the middle two, (2+4)/2 = 3 ms.
		{[]time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 6 * time.Millisecond}, "longest mean step: rank 3, 6.000 ms, 100.0% above the median (3.000 ms)"},
		// 12% above the median: named.
		{[]time.Duration{100 * time.Millisecond, 112 * time.Millisecond, 100 * time.Millisecond}, "longest mean step: rank 1, 112.000 ms, 12.0% above the median (100.000 ms)"},
		// 9% above: within what a synchronous pipeline's ranks differ by.
		{[]time.Duration{100 * time.Millisecond, 109 * time.Millisecond, 100 * time.Millisecond}, "mean step: every rank within 9.0% of the median (100.000 ms), none more than 10% above it"},
		// The median 100.5 ms; 98 ms is 2.5% below it, 102 ms 1.5% above.
		{[]time.Duration{100 * time.Millisecond, 102 * time.Millisecond, 98 * time.Millisecond, 101 * time.Millisecond}, "mean step: every rank within 2.5% of the median (100.500 ms)"},
		// A walkthrough's pp 2 × dp 2 run whose rank 2 was delayed: every
		// rank waits for it, and rank 2's mean is 0.3% above the median.
		{[]time.Duration{269170 * us, 266087 * us, 269820 * us, 269026 * us}, "mean step: every rank within 1.1% of the median (269.098 ms)"},
	} {
		var buf bytes.Buffer
		if err := profiler.WriteStepBreakdown(&buf, ranks(c.means...), 0); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if strings.Contains(out, "slowest") {
			t.Errorf("%v: a rank called slowest, which the straggler analysis may contradict:\n%s", c.means, out)
		}
		if c.want == "" {
			if strings.Contains(out, "mean step:") {
				t.Errorf("%v: one rank compared with the others:\n%s", c.means, out)
			}
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v: want %q in\n%s", c.means, c.want, out)
		}
		if named := strings.Contains(out, "longest mean step"); named != strings.HasPrefix(c.want, "longest") {
			t.Errorf("%v: a rank named: %v\n%s", c.means, named, out)
		}
	}
}

// A step range ended by EndCutShort is delivered, marked, and left out of
// the step statistics, which count it per rank; the steps before it count
// as usual.
func TestCutShortStep(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, err := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 0})
	if err != nil {
		t.Fatal(err)
	}
	s := profiler.NewStepSummary(profiler.WithStepDelay(0))
	if err := p.AddSink(s); err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		r.SetStep(step)
		r.Start(profiler.StepName)
		r.Start("forward")
		time.Sleep(time.Millisecond)
		r.End()
		if step == 2 {
			r.EndCutShort()
		} else {
			r.End()
		}
	}
	r.EndCutShort() // no open range: counted as an unbalanced end, like End
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Unbalanced != 1 {
		t.Errorf("%d unbalanced ends, want 1", st.Unbalanced)
	}
	var cut, whole, inner int
	var recs []profiler.Record
	for _, rec := range p.Snapshot() {
		recs = append(recs, rec)
		switch {
		case rec.Name == profiler.StepName && rec.CutShort:
			cut++
			if rec.Step != 2 {
				t.Errorf("step %d cut short, want step 2", rec.Step)
			}
		case rec.Name == profiler.StepName:
			whole++
		case rec.CutShort:
			inner++
		}
	}
	if cut != 1 || whole != 2 || inner != 0 {
		t.Errorf("%d step ranges cut short, %d whole, %d inner ranges cut short; want 1, 2, 0", cut, whole, inner)
	}
	bd := profiler.StepBreakdown(recs)
	if len(bd) != 1 || bd[0].Steps != 2 || bd[0].CutShort != 1 {
		t.Fatalf("breakdown %+v, want rank 0 with 2 steps and 1 cut short", bd)
	}
	ranks := s.Ranks()
	if len(ranks) != 1 || ranks[0].Steps != 2 || ranks[0].CutShort != 1 || ranks[0].RankSteps != bd[0] {
		t.Fatalf("summary %+v, want the breakdown %+v", ranks, bd[0])
	}
	var buf bytes.Buffer
	if err := profiler.WriteStepTimes(&buf, ranks); err != nil {
		t.Fatal(err)
	}
	if want := "steps cut short (failed or interrupted), left out of the figures above: rank 0: 1\n"; !strings.HasSuffix(buf.String(), want) {
		t.Errorf("step times end\n%s\nwant %q", buf.String(), want)
	}
}

// A rank whose every step was cut short has no figures: dashes, not
// zeros, and it does not count among the ranks' mean steps.
func TestRankWithOnlyCutShortSteps(t *testing.T) {
	var buf bytes.Buffer
	ranks := []profiler.RankSteps{
		{Rank: 0, Stage: 0, CutShort: 1},
		{Rank: 1, Stage: 1, Steps: 2, Wall: 20 * time.Millisecond, Busy: 5 * time.Millisecond},
		{Rank: 2, Stage: 2, Steps: 2, Wall: 20 * time.Millisecond, Busy: 5 * time.Millisecond},
	}
	if err := profiler.WriteStepBreakdown(&buf, ranks, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "0 0 0 - - -" {
		t.Errorf("rank 0's line %q, want dashes", lines[1])
	}
	if !strings.Contains(buf.String(), "every rank within 0.0% of the median (10.000 ms)") {
		t.Errorf("the rank without steps counted among the means:\n%s", buf.String())
	}
	buf.Reset()
	if err := profiler.WriteStepTimes(&buf, []profiler.StepStats{{RankSteps: ranks[0]}}); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(buf.String(), "\n")
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "0 0 - - - - - -" {
		t.Errorf("rank 0's step times %q, want dashes", lines[1])
	}
}

// TestStepBreakdownWithoutCompute: a rank whose steps hold only a
// collective timed on the device (a wrapped job: NCCL's kernels are
// timed, its compute is not) has no measure of busy time; its line says
// "-" for busy and idle, not 0 % and 100 %, and a note names it. A rank
// with a device-timed forward keeps its figures.
func TestStepBreakdownWithoutCompute(t *testing.T) {
	step := func(rank int, s, e time.Duration) profiler.Record {
		l := profiler.NoLabels
		l.Step = 0
		return profiler.Record{ID: 1, Name: "step", Rank: rank, Labels: l, HostStart: s, HostEnd: e}
	}
	l := profiler.NoLabels
	l.Step = 0
	fwd := l
	fwd.Phase = profiler.Forward
	recs := []profiler.Record{
		step(0, 0, 1000*us),
		{ID: 2, Depth: 1, Parent: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: 0, Labels: l, Stream: 1,
			HostStart: 100 * us, HostEnd: 110 * us, HasDevice: true, DeviceStart: 200 * us, DeviceEnd: 500 * us,
			Collective: profiler.Collective{Op: "AllReduce", Bytes: 1 << 20, Peer: -1, Root: -1, Group: "dp", GroupSize: 2}},
		step(1, 0, 1000*us),
		{ID: 2, Depth: 1, Parent: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 1, Labels: fwd, Stream: 2,
			HostStart: 0, HostEnd: 400 * us, HasDevice: true, DeviceStart: 0, DeviceEnd: 400 * us},
	}
	got := profiler.StepBreakdown(recs)
	if len(got) != 2 || got[0].Computed || !got[1].Computed || got[1].Busy != 400*us {
		t.Fatalf("breakdown %+v; want rank 0 not computed, rank 1 computed with 400us busy", got)
	}
	var buf bytes.Buffer
	if err := profiler.WriteStepBreakdown(&buf, got, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if f := strings.Join(strings.Fields(lines[1]), " "); f != "0 - 1 1.000 - -" {
		t.Errorf("rank 0's line %q, want busy and idle unknown", f)
	}
	if f := strings.Join(strings.Fields(lines[2]), " "); f != "1 - 1 1.000 40.0 60.0" {
		t.Errorf("rank 1's line %q, want 40%% busy", f)
	}
	if !strings.Contains(buf.String(), "busy: not measured on rank 0:") {
		t.Errorf("no note on rank 0's busy time:\n%s", buf.String())
	}
}

// TestStepBreakdownWarmUp: a first step many times longer than the others
// on every rank is set apart, with the figures without it. Worked by
// hand, times in milliseconds: rank 0's steps last 100 (step 0), then 10,
// 10, 10, each busy 5 (a forward of 5), step 0 busy 10; rank 1's step 0
// lasts 80. Without step 0: mean 10, busy 15/30 = 50 %; step 0 took 10×
// and 8× the others' mean. Step 2's records come first: the first step
// is the lowest label, not the first delivered.
func TestStepBreakdownWarmUp(t *testing.T) {
	const ms = time.Millisecond
	records := func(first0, first1 time.Duration, steps int) []profiler.Record {
		var recs []profiler.Record
		id := map[int]uint64{}
		add := func(rank, step int, start, wall, busy time.Duration) {
			l := profiler.NoLabels
			l.Step = int32(step)
			id[rank]++
			parent := id[rank]
			recs = append(recs, profiler.Record{ID: parent, Name: profiler.StepName, Rank: rank, Labels: l, HostStart: start, HostEnd: start + wall})
			l.Phase = profiler.Forward
			id[rank]++
			recs = append(recs, profiler.Record{ID: id[rank], Parent: parent, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: rank,
				Labels: l, Stream: 1, HostStart: start, HostEnd: start + busy, HasDevice: true, DeviceStart: start, DeviceEnd: start + busy})
		}
		for rank, first := range []time.Duration{first0, first1} {
			order := []int{2}
			for s := range steps {
				if s != 2 {
					order = append(order, s)
				}
			}
			for _, s := range order {
				if s >= steps {
					continue
				}
				start := first + time.Duration(s-1)*10*ms
				wall, busy := 10*ms, 5*ms
				if s == 0 {
					start, wall, busy = 0, first, 10*ms
				}
				add(rank, s, start, wall, busy)
			}
		}
		return recs
	}
	write := func(ranks []profiler.RankSteps) string {
		var buf bytes.Buffer
		if err := profiler.WriteStepBreakdown(&buf, ranks, 0); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	const want = "warm-up: the first step (step 0) took 80.000–100.000 ms, 8.0–10.0× the mean of the others on every rank; without it the mean step is 10.000 ms and busy 50.0% (the report's figures include it)\n"
	recs := records(100*ms, 80*ms, 4)
	got := profiler.StepBreakdown(recs)
	if out := write(got); !strings.Contains(out, want) {
		t.Errorf("breakdown lacks %q:\n%s", want, out)
	}
	if f := got[0].First; f.Step != 0 || f.Wall() != 100*ms || f.Busy != 10*ms {
		t.Errorf("rank 0's first step %+v, want step 0 of 100 ms, busy 10 ms", f)
	}
	// The online summary keeps the same first step.
	sum := profiler.NewStepSummary(profiler.WithStepDelay(0))
	sum.Consume(recs)
	if out := write(sum.Breakdown()); !strings.Contains(out, want) {
		t.Errorf("StepSummary's breakdown lacks %q:\n%s", want, out)
	}
	// Not on every rank (rank 1's step 0 only 1.5× the others), and not
	// on runs of fewer than three steps: no warm-up line.
	for name, recs := range map[string][]profiler.Record{
		"one rank's":  records(100*ms, 15*ms, 4),
		"two steps'":  records(100*ms, 80*ms, 2),
		"even steps'": records(10*ms, 10*ms, 4),
	} {
		if out := write(profiler.StepBreakdown(recs)); strings.Contains(out, "warm-up") {
			t.Errorf("%s breakdown sets a warm-up apart:\n%s", name, out)
		}
	}
}

// Step ranges without a step label (a trainer that never calls SetStep)
// share one key: each is a step of its own, its work the device ranges
// that ran within it. All of them were once one step: the second and
// later step ranges of a batch were dropped and their work added to the
// first.
func TestStepBreakdownUnlabelledSteps(t *testing.T) {
	var recs []profiler.Record
	id := uint64(0)
	// Three steps of 1000us at 0, 2000 and 4000us; step i computes
	// (i+1)·100us on the device, and an async forward of the first
	// step, launched at 900us, runs on to 1100us.
	for i := range 3 {
		base := time.Duration(i) * 2000 * us
		id++
		step := id
		recs = append(recs, profiler.Record{ID: step, Name: profiler.StepName, Labels: profiler.NoLabels, HostStart: base, HostEnd: base + 1000*us})
		l := profiler.NoLabels
		l.Phase = profiler.Forward
		id++
		recs = append(recs, profiler.Record{ID: id, Parent: step, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: l, Stream: 1,
			HostStart: base + 100*us, HostEnd: base + 200*us, HasDevice: true, DeviceStart: base + 100*us, DeviceEnd: base + 100*us + time.Duration(i+1)*100*us})
		if i == 0 {
			id++
			recs = append(recs, profiler.Record{ID: id, Parent: step, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: l, Stream: 1,
				HostStart: 900 * us, HostEnd: 950 * us, HasDevice: true, DeviceStart: 900 * us, DeviceEnd: 1100 * us})
		}
	}
	// Records arrive as ranges end: a step range after its work.
	slices.SortStableFunc(recs, func(a, b profiler.Record) int { return cmp.Compare(a.HostEnd, b.HostEnd) })
	got := profiler.StepBreakdown(recs)
	if len(got) != 1 {
		t.Fatalf("%d ranks, want 1", len(got))
	}
	// Busy: 100+100 (the async forward up to the step's end), 200, 300.
	if r := got[0]; r.Steps != 3 || r.Wall != 3000*us || r.Busy != 700*us {
		t.Errorf("got %d steps, wall %v, busy %v; want 3 steps, wall 3ms, busy 700us", r.Steps, r.Wall, r.Busy)
	}
}
