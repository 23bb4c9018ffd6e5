package profiler_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
)

// exactStepTimes returns each rank's step wall times, sorted: the host
// time of its top-level ranges named "step".
func exactStepTimes(recs []profiler.Record) map[int][]time.Duration {
	out := map[int][]time.Duration{}
	for _, r := range recs {
		if r.Depth == 0 && r.Name == "step" {
			out[r.Rank] = append(out[r.Rank], r.HostEnd-r.HostStart)
		}
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	return out
}

// checkStepTimes compares a summary's distribution with the exact one:
// count, minimum, maximum and mean exactly, each quantile within the
// stated relative accuracy of the nearest-rank quantile, the ⌈q·n⌉-th
// smallest.
func checkStepTimes(t *testing.T, got []profiler.StepStats, exact map[int][]time.Duration) {
	t.Helper()
	if len(got) != len(exact) {
		t.Fatalf("%d ranks, want %d", len(got), len(exact))
	}
	for _, st := range got {
		ts := exact[st.Rank]
		n := len(ts)
		var sum time.Duration
		for _, d := range ts {
			sum += d
		}
		if st.Steps != n || st.Min != ts[0] || st.Max != ts[n-1] || st.MeanStep() != sum/time.Duration(n) {
			t.Errorf("rank %d: %d steps, min %v, max %v, mean %v; want %d, %v, %v, %v",
				st.Rank, st.Steps, st.Min, st.Max, st.MeanStep(), n, ts[0], ts[n-1], sum/time.Duration(n))
		}
		for _, q := range []struct {
			p   float64
			got time.Duration
		}{{0.5, st.P50}, {0.9, st.P90}, {0.99, st.P99}} {
			want := ts[max(int(math.Ceil(q.p*float64(n)))-1, 0)]
			if tol := profiler.StepQuantileAccuracy*float64(want) + 1; math.Abs(float64(q.got-want)) > tol {
				t.Errorf("rank %d: p%v %v, exact %v: off by more than %.0f ns", st.Rank, 100*q.p, q.got, want, tol)
			}
		}
	}
}

// StepSummary registered as a sink on real runs gives StepBreakdown's
// account of the whole record list, and the step times' distribution.
func TestStepSummaryMatchesWholeRunOnTrainer(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			s := profiler.NewStepSummary()
			tape, _, err := trainrun.Run(t.Context(), l, s)
			if err != nil {
				t.Fatal(err)
			}
			recs := tape.Records()
			want := profiler.StepBreakdown(recs)
			if got := s.Breakdown(); !reflect.DeepEqual(got, want) {
				t.Errorf("step summary %+v\nwhole run    %+v", got, want)
			}
			for _, rs := range want {
				if rs.Steps != l.Config.Steps || rs.Busy <= 0 {
					t.Errorf("rank %d: %d steps, busy %v; want %d steps, some busy time", rs.Rank, rs.Steps, rs.Busy, l.Config.Steps)
				}
			}
			checkStepTimes(t, s.Ranks(), exactStepTimes(recs))
			if st := s.Stats(); st != (profiler.StepSummaryStats{}) {
				t.Errorf("stats %+v, want nothing late or abandoned", st)
			}
		})
	}
}

func TestStepSummaryMatchesWholeRunSynthetic(t *testing.T) {
	recs := stepMajor(smallShape(2, syntheticSteps))
	for name, batches := range syntheticOrders(recs) {
		t.Run(name, func(t *testing.T) {
			s, undelayed := profiler.NewStepSummary(), profiler.NewStepSummary(profiler.WithStepDelay(0))
			for _, b := range batches {
				s.Consume(b)
				undelayed.Consume(b)
			}
			want := profiler.StepBreakdown(flatten(batches))
			if got := s.Breakdown(); !reflect.DeepEqual(got, want) {
				t.Errorf("step summary %+v\nwhole run    %+v", got, want)
			}
			if len(want) != 2 || want[0].Steps != syntheticSteps || want[0].Busy <= 0 {
				t.Fatalf("whole run %+v: want %d busy steps per rank", want, syntheticSteps)
			}
			checkStepTimes(t, s.Ranks(), exactStepTimes(recs))
			if st := s.Stats(); st != (profiler.StepSummaryStats{}) {
				t.Errorf("stats %+v, want nothing late or abandoned", st)
			}
			// Accounting a step in the batch of its step range misses the
			// device ranges that come in a later batch (parents first, a
			// batch may end between a step range and its work), and says
			// so; children first, none is late.
			late := undelayed.Stats().Late
			lessBusy := undelayed.Breakdown()[0].Busy < want[0].Busy
			if wantLate := name != "children first"; (late > 0) != wantLate || lessBusy != wantLate {
				t.Errorf("without a delay: %d late ranges, busy %v of %v; want late ranges left out: %v", late, undelayed.Breakdown()[0].Busy, want[0].Busy, wantLate)
			}
		})
	}
}

// Quantiles stay within their stated accuracy over step times spread
// across seven orders of magnitude.
func TestStepQuantileAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := profiler.NewStepSummary()
	var all []profiler.Record
	var batch []profiler.Record
	start := [3]time.Duration{}
	for step := range 10000 {
		for rank := range 3 {
			// Log-uniform between 1µs and 10s.
			d := time.Duration(math.Exp(math.Log(1e3) + rng.Float64()*(math.Log(1e10)-math.Log(1e3))))
			l := profiler.NoLabels
			l.Step = int32(step)
			r := profiler.Record{ID: uint64(step + 1), Name: "step", Rank: rank, Labels: l, HostStart: start[rank], HostEnd: start[rank] + d}
			start[rank] += d
			batch = append(batch, r)
			all = append(all, r)
		}
		if len(batch) >= 64 {
			s.Consume(batch)
			batch = batch[:0]
		}
	}
	s.Consume(batch)
	checkStepTimes(t, s.Ranks(), exactStepTimes(all))
	var buf bytes.Buffer
	if err := profiler.WriteStepTimes(&buf, s.Ranks()); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 4 || !strings.Contains(lines[0], "p99(ms)") || !strings.Contains(lines[1], "10000") {
		t.Errorf("step times table:\n%s", buf.String())
	}
}

// FinishAfter holds a step until later step ranges of its rank arrive, so
// a device range that comes after its step range still counts; Ready
// shows the held step as it stands.
func TestFinishAfterHoldsSteps(t *testing.T) {
	lbl := func(step int32, ph profiler.Phase) profiler.Labels {
		l := profiler.NoLabels
		l.Step, l.Stage, l.Phase = step, 0, ph
		return l
	}
	step := func(id uint64, n int32, s, e time.Duration) profiler.Record {
		return profiler.Record{ID: id, Name: "step", Labels: lbl(n, profiler.PhaseNone), HostStart: s, HostEnd: e}
	}
	fwd := func(id, parent uint64, n int32, s, e time.Duration) profiler.Record {
		return profiler.Record{ID: id, Parent: parent, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: lbl(n, profiler.Forward),
			Stream: 1, HostStart: s, HostEnd: e, HasDevice: true, DeviceStart: s, DeviceEnd: e}
	}
	batches := [][]profiler.Record{
		{step(1, 0, 0, 1000*us)},                                       // step 0's range; its forward is not resolved yet
		{step(3, 1, 1000*us, 2000*us)},                                 // step 1's range
		{fwd(2, 1, 0, 100*us, 400*us), fwd(4, 3, 1, 1100*us, 1200*us)}, // both forwards
		{step(5, 2, 2000*us, 3000*us)},                                 // step 2
		{step(7, 3, 3000*us, 4000*us)},                                 // step 3
	}
	for _, c := range []struct {
		later    int
		wantLate int
		wantBusy []time.Duration // per accounted step, in order
	}{
		// Each step accounted in the batch of its step range: both
		// forwards are late.
		{0, 2, []time.Duration{0, 0, 0, 0}},
		// Step 0 waits for step 1's range only, which comes before its
		// forward; step 1 waits for step 2's, after its forward.
		{1, 1, []time.Duration{0, 100 * us, 0, 0}},
		// Two later step ranges: both forwards count.
		{2, 0, []time.Duration{300 * us, 100 * us, 0, 0}},
	} {
		a := profiler.NewStepAccountant()
		var got []time.Duration
		late := 0
		for _, b := range batches {
			for i := range b {
				if a.Add(&b[i]) {
					late++
				}
			}
			a.FinishAfter(c.later, func(st profiler.StepTime) { got = append(got, st.Busy) }, nil)
		}
		var held []int
		a.Ready(func(st profiler.StepTime) { held = append(held, st.Step) })
		a.Finish(func(st profiler.StepTime) { got = append(got, st.Busy) }, nil)
		if late != c.wantLate || !slices.Equal(got, c.wantBusy) {
			t.Errorf("FinishAfter(%d): busy %v with %d late; want %v with %d late", c.later, got, late, c.wantBusy, c.wantLate)
		}
		var wantHeld []int
		for s := 4 - c.later; s < 4; s++ {
			wantHeld = append(wantHeld, s)
		}
		if !slices.Equal(held, wantHeld) {
			t.Errorf("FinishAfter(%d): holds steps %v, want %v", c.later, held, wantHeld)
		}
	}
}
