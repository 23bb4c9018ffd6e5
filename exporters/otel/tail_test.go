package otel_test

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// tailRun is a run whose step durations the test chose: most steps 10 to
// 12 ms, a few three to four times that, each rank's step range starting
// and ending up to 100 µs apart from the others'. Every rank's step has a
// step range and a device-timed forward under it: 3 spans.
type tailRun struct {
	ranks      int
	start, end [][]time.Duration // [step][rank]
}

const spansPerRankStep = 3

func newTailRun(seed uint64, ranks, steps int, slow []int) *tailRun {
	rng := rand.New(rand.NewPCG(seed, 7))
	r := &tailRun{ranks: ranks}
	at := time.Duration(0)
	for s := range steps {
		d := 10*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Millisecond)))
		if slices.Contains(slow, s) {
			d = time.Duration(float64(d) * (3 + rng.Float64()))
		}
		st, en := make([]time.Duration, ranks), make([]time.Duration, ranks)
		for k := range ranks {
			st[k] = at + time.Duration(rng.Int64N(int64(100*time.Microsecond)))
			en[k] = at + d - time.Duration(rng.Int64N(int64(100*time.Microsecond)))
		}
		r.start, r.end = append(r.start, st), append(r.end, en)
		at += d + time.Millisecond
	}
	return r
}

func (r *tailRun) steps() int { return len(r.start) }

// duration is the step's first start to last end over the ranks.
func (r *tailRun) duration(s int) time.Duration {
	return slices.Max(r.end[s]) - slices.Min(r.start[s])
}

func (r *tailRun) stepRange(s, rank int) profiler.Record {
	return profiler.Record{ID: uint64(2*s + 1), Name: profiler.StepName, Rank: rank,
		Labels:    profiler.Labels{Step: int32(s), Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
		Device:    runtime.Device{Type: runtime.CPU, Index: rank},
		HostStart: r.start[s][rank], HostEnd: r.end[s][rank]}
}

func (r *tailRun) forward(s, rank int) profiler.Record {
	at := r.start[s][rank]
	return profiler.Record{ID: uint64(2*s + 2), Parent: uint64(2*s + 1), Name: "forward", Depth: 1, Kind: profiler.KindDevice, Rank: rank,
		Labels:    profiler.Labels{Step: int32(s), Stage: int16(rank), Chunk: 0, Microbatch: 0, Phase: profiler.Forward},
		Device:    runtime.Device{Type: runtime.CPU, Index: rank},
		HostStart: at + 100*time.Microsecond, HostEnd: at + 200*time.Microsecond,
		HasDevice: true, DeviceStart: at + 150*time.Microsecond, DeviceEnd: at + 600*time.Microsecond}
}

// batches are what a profiler delivers: batch s holds every rank's step
// range of step s and, as device ranges end late, the forward of step
// s-2; the last batch the last two steps' forwards.
func (r *tailRun) batches() [][]profiler.Record {
	var out [][]profiler.Record
	n := r.steps()
	for s := 0; s < n+1; s++ {
		var b []profiler.Record
		for k := range r.ranks {
			if s < n {
				b = append(b, r.stepRange(s, k))
			}
			for _, late := range []int{s - 2, s - 1} {
				if late >= 0 && (late == s-2 || s == n) {
					b = append(b, r.forward(late, k))
				}
			}
		}
		out = append(out, b)
	}
	return out
}

// tailOracle works out from the durations alone which steps the slowest
// rule keeps when steps end in order. Step i must be kept when fewer than
// atLeast earlier steps lasted as long or longer, or fewer than
// ⌈share·(i+1)⌉ lasted at least 98 % as long (the share's count takes
// durations within its bucket width, about 1.1 %, as equal); it may be
// kept only when fewer than the larger of the two lasted as long or
// longer.
func tailOracle(durs []time.Duration, share float64, atLeast int) (must, may map[int]bool) {
	must, may = map[int]bool{}, map[int]bool{}
	for i, d := range durs {
		byShare := int(math.Ceil(share * float64(i+1)))
		asLong, nearly := 0, 0
		for _, e := range durs[:i] {
			if e >= d {
				asLong++
			}
			if float64(e) >= 0.98*float64(d) {
				nearly++
			}
		}
		if asLong < atLeast || nearly < byShare {
			must[i] = true
		}
		if asLong < max(atLeast, byShare) {
			may[i] = true
		}
	}
	return must, may
}

// ratioKeeps is the set of steps the OpenTelemetry SDK's own
// TraceIDRatioBased sampler keeps, from the steps' trace ids.
func ratioKeeps(t *testing.T, ratio float64, steps int, traceOf func(int32) string) map[int]bool {
	t.Helper()
	sdk := sdktrace.TraceIDRatioBased(ratio)
	keep := map[int]bool{}
	for s := range steps {
		tid, err := trace.TraceIDFromHex(traceOf(int32(s)))
		if err != nil {
			t.Fatal(err)
		}
		if sdk.ShouldSample(sdktrace.SamplingParameters{TraceID: tid}).Decision == sdktrace.RecordAndSample {
			keep[s] = true
		}
	}
	return keep
}

// checkTailKeeps checks the steps whose spans arrived (spans per step)
// against the policy: whole steps only; every step the ratio sampler
// keeps, every one of the first steps, every step the slowest rule must
// keep (so the run's slowest ⌈share·N⌉ when that is at most atLeast), and
// nothing the rules would not keep.
func checkTailKeeps(t *testing.T, run *tailRun, got map[int]int, ratio map[int]bool, first int, share float64, atLeast int) (kept, extra int) {
	t.Helper()
	n := run.steps()
	durs := make([]time.Duration, n)
	for s := range n {
		durs[s] = run.duration(s)
	}
	must, may := tailOracle(durs, share, atLeast)
	whole := spansPerRankStep * run.ranks
	for s := range n {
		keep := got[s] > 0
		if keep && got[s] != whole {
			t.Errorf("step %d: %d spans exported, want the whole step's %d", s, got[s], whole)
		}
		switch {
		case !keep && ratio[s]:
			t.Errorf("step %d: left out, but the ratio sampler keeps it", s)
		case !keep && s < first:
			t.Errorf("step %d: left out, but it is among the first %d", s, first)
		case !keep && must[s]:
			t.Errorf("step %d (%v): left out, but it is among the slowest so far", s, durs[s])
		case keep && !ratio[s] && s >= first && !may[s]:
			t.Errorf("step %d (%v): kept, but the ratio sampler leaves it out and it is not among the slowest so far", s, durs[s])
		}
		if keep {
			kept++
			if !ratio[s] {
				extra++
			}
		}
	}
	// The run's slowest steps, named outright.
	bySlowness := make([]int, n)
	for s := range bySlowness {
		bySlowness[s] = s
	}
	slices.SortStableFunc(bySlowness, func(a, b int) int { return cmp.Compare(durs[b], durs[a]) })
	top := int(math.Ceil(share * float64(n)))
	for _, s := range bySlowness[:top] {
		if got[s] == 0 {
			t.Errorf("step %d (%v) is among the run's slowest %d, and not exported", s, durs[s], top)
		}
	}
	return kept, extra
}

// One exporter for four ranks (the built-in trainer, or profile-run
// collecting a wrapped job), 1,000 steps, traceidratio 0.1 and the tail
// policy: the steps the SDK's ratio sampler keeps, the first five, and
// the slowest so far — the run's slowest 1 % among them — are exported
// whole, device spans that arrived after their step was decided
// included, and nothing else.
func TestTailPolicyKeepsSlowestAndFirstSteps(t *testing.T) {
	clearOTLPEnv(t)
	const ranks, steps, ratio, first, share, atLeast = 4, 1000, 0.1, 5, 0.01, 10
	rng := rand.New(rand.NewPCG(3, 3))
	var slow []int
	for len(slow) < 10 {
		slow = append(slow, 5+rng.IntN(steps-5))
	}
	run := newTailRun(11, ranks, steps, slow)
	s := &stub{}
	e, err := otelexp.New(context.Background(), nil, otelexp.Config{
		Epoch: epoch, RunID: "tail-policy-test", Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "0.1",
		KeepFirst: first, KeepSlowest: share, KeepSlowestMin: atLeast,
	}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	maxDeciding := uint64(0)
	for _, b := range run.batches() {
		e.Consume(b)
		maxDeciding = max(maxDeciding, e.Stats().Deciding)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	traceOf := func(step int32) string { id, _ := e.StepTrace(step, 0); return id }
	stepOfTrace := map[string]int{}
	for s := range steps {
		stepOfTrace[traceOf(int32(s))] = s
	}
	spans, _, _ := s.got()
	got := map[int]int{}
	for _, sp := range spans {
		step, ok := stepOfTrace[sp.SpanContext().TraceID().String()]
		if !ok {
			t.Fatalf("span %s in trace %s, of no step", sp.Name(), sp.SpanContext().TraceID())
		}
		got[step]++
	}
	sdk := ratioKeeps(t, ratio, steps, traceOf)
	kept, extra := checkTailKeeps(t, run, got, sdk, first, share, atLeast)
	st := e.Stats()
	if st.Spans != uint64(spansPerRankStep*ranks*steps) || st.Spans != st.Sampled+st.Unsampled || st.Deciding != 0 ||
		st.Exported != uint64(len(spans)) || st.Sampled != st.Exported || st.Forced != 0 ||
		st.KeptFirst+st.KeptSlow != uint64(extra) {
		t.Errorf("stats %+v; %d spans exported, %d steps kept beyond the ratio sampler's", st, len(spans), extra)
	}
	// Steps end one by one and their decisions follow: at most the
	// current step and the device spans of the two before it wait.
	if maxDeciding > uint64(3*ranks*spansPerRankStep) {
		t.Errorf("up to %d spans held awaiting decisions, want at most the last steps'", maxDeciding)
	}
	t.Logf("%d of %d steps exported: %d by the ratio sampler, %d first, %d slowest so far (%d spans)",
		kept, steps, len(sdk), st.KeptFirst, st.KeptSlow, len(spans))
}

// Steps of identical duration — a replayed or perfectly steady run —
// rank in the order they ended: the first KeepSlowestMin are the slowest
// so far, no later one is.
func TestTailPolicyIdenticalSteps(t *testing.T) {
	clearOTLPEnv(t)
	const ranks, steps, atLeast = 2, 300, 10
	run := &tailRun{ranks: ranks}
	for s := range steps {
		at := time.Duration(s) * 11 * time.Millisecond
		run.start = append(run.start, []time.Duration{at, at})
		run.end = append(run.end, []time.Duration{at + 10*time.Millisecond, at + 10*time.Millisecond})
	}
	st := &stub{}
	e, err := otelexp.New(context.Background(), nil, otelexp.Config{
		Epoch: epoch, RunID: "tail-identical-test", Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "0.1",
		KeepFirst: -1, KeepSlowest: 0.01, KeepSlowestMin: atLeast,
	}, otelexp.WithSpanExporter(st))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range run.batches() {
		e.Consume(b)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	traceOf := func(step int32) string { id, _ := e.StepTrace(step, 0); return id }
	sdk := ratioKeeps(t, 0.1, steps, traceOf)
	spans, _, _ := st.got()
	got := map[string]bool{}
	for _, sp := range spans {
		got[sp.SpanContext().TraceID().String()] = true
	}
	for s := range steps {
		if want := sdk[s] || s < atLeast; got[traceOf(int32(s))] != want {
			t.Errorf("step %d: exported %v, want %v (ratio sampler %v)", s, got[traceOf(int32(s))], want, sdk[s])
		}
	}
}

// A step-time observation that already places a step among the slowest
// pins it as kept before its records arrive, so an exemplar carrying its
// trace id resolves; one that does not leaves it out and names no trace.
func TestTailPolicyPinsSlowStepsForExemplars(t *testing.T) {
	clearOTLPEnv(t)
	const ranks, steps = 2, 200
	run := newTailRun(5, ranks, steps, nil)
	s := &stub{}
	e, err := otelexp.New(context.Background(), nil, otelexp.Config{
		Epoch: epoch, RunID: "tail-pin-test", Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "0.1",
		KeepFirst: -1, KeepSlowest: 0.01, KeepSlowestMin: 2,
	}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	traceOf := func(step int32) string { id, _ := e.StepTrace(step, 0); return id }
	sdk := ratioKeeps(t, 0.1, steps, traceOf)
	durs := make([]time.Duration, steps)
	for s := range steps {
		durs[s] = run.duration(s)
	}
	_, may := tailOracle(durs, 0.01, 2)
	// Two late steps the ratio sampler leaves out, of ordinary length
	// (the second clearly not among the slowest so far).
	var pin, plain int
	for s := steps - 1; s > steps/2 && (pin == 0 || plain == 0); s-- {
		switch {
		case sdk[s]:
		case pin == 0:
			pin = s
		case !may[s]:
			plain = s
		}
	}
	answered := map[int]bool{}
	for i, b := range run.batches() {
		for _, step := range []int{pin, plain} {
			if i == step {
				// A rank's step time: 40 ms for the pinned step, as
				// long as its real duration for the other.
				d := run.duration(step)
				if step == pin {
					d = 40 * time.Millisecond
				}
				_, answered[step] = e.StepTrace(int32(step), d)
			}
		}
		e.Consume(b)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans, _, _ := s.got()
	exported := map[string]int{}
	for _, sp := range spans {
		exported[sp.SpanContext().TraceID().String()]++
	}
	if !answered[pin] || exported[traceOf(int32(pin))] != spansPerRankStep*ranks {
		t.Errorf("step %d: StepTrace with a 40 ms step time says sampled=%v, %d spans exported; want true and the whole step",
			pin, answered[pin], exported[traceOf(int32(pin))])
	}
	if answered[plain] || exported[traceOf(int32(plain))] != 0 {
		t.Errorf("step %d: StepTrace with its ordinary step time says sampled=%v, %d spans exported; want false and none",
			plain, answered[plain], exported[traceOf(int32(plain))])
	}
	if st := e.Stats(); st.KeptSlow == 0 {
		t.Errorf("stats %+v: no step kept as slow", st)
	}
}

// What the tail policy holds is bounded: a rank that stops ending its
// steps (a hung or dead rank) makes the oldest open steps be decided with
// what arrived once 64 are open, or once the held spans reach QueueSize;
// Shutdown decides the rest; every span is counted.
func TestTailPolicyBounds(t *testing.T) {
	clearOTLPEnv(t)
	const ranks, steps = 4, 300
	run := newTailRun(9, ranks, steps, nil)
	for _, c := range []struct {
		name  string
		queue int
	}{{"open steps", 1 << 16}, {"held spans", 96}} {
		t.Run(c.name, func(t *testing.T) {
			s := &stub{}
			e, err := otelexp.New(context.Background(), nil, otelexp.Config{
				Epoch: epoch, RunID: "tail-bounds-test", Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "0.1",
				QueueSize: c.queue,
			}, otelexp.WithSpanExporter(s))
			if err != nil {
				t.Fatal(err)
			}
			total, maxHeld := 0, uint64(0)
			for i, b := range run.batches() {
				// Rank 3 delivers nothing after step 10.
				b = slices.DeleteFunc(slices.Clone(b), func(r profiler.Record) bool { return r.Rank == 3 && i > 10 })
				for j := range b {
					total += 1 + int(boolInt(b[j].HasDevice))
				}
				e.Consume(b)
				maxHeld = max(maxHeld, e.Stats().Deciding)
			}
			// Decisions are taken after each batch: the bound is the
			// smaller of QueueSize and 65 open steps, plus a batch.
			if bound := uint64(min(c.queue, 65*spansPerRankStep*ranks) + 4*ranks); maxHeld > bound {
				t.Errorf("%d spans held awaiting decisions, over the bound of %d", maxHeld, bound)
			}
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			if st.Forced == 0 || st.Deciding != 0 || st.Spans != uint64(total) || st.Spans != st.Sampled+st.Unsampled || st.Sampled != st.Exported+st.Dropped {
				t.Errorf("stats %+v; %d spans consumed", st, total)
			}
			t.Logf("%d steps forced, at most %d spans held", st.Forced, maxHeld)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The tail policy's settings: from the Config, else the environment; bad
// values are configuration errors naming where they came from; with
// always_on nothing is held.
func TestTailPolicyConfiguration(t *testing.T) {
	clearOTLPEnv(t)
	cases := []struct {
		name string
		cfg  otelexp.Config
		env  map[string]string
		err  string
	}{
		{name: "share over 1", cfg: otelexp.Config{KeepSlowest: 1.5}, err: "KeepSlowest=1.5"},
		{name: "bad share in env", env: map[string]string{otelexp.EnvKeepSlowest: "1%"}, err: `TRAINSCOPE_TRACES_KEEP_SLOWEST="1%"`},
		{name: "negative first in env", env: map[string]string{otelexp.EnvKeepFirst: "-3"}, err: `TRAINSCOPE_TRACES_KEEP_FIRST="-3"`},
		{name: "bad min in env", env: map[string]string{otelexp.EnvKeepSlowestMin: "ten"}, err: `TRAINSCOPE_TRACES_KEEP_SLOWEST_MIN="ten"`},
		{name: "all off in env", env: map[string]string{otelexp.EnvKeepFirst: "0", otelexp.EnvKeepSlowest: "0", otelexp.EnvKeepSlowestMin: "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg := c.cfg
			cfg.Epoch, cfg.Sampler, cfg.SamplerArg = epoch, otelexp.SamplerTraceIDRatio, "0.5"
			e, err := otelexp.New(context.Background(), nil, cfg, otelexp.WithSpanExporter(&stub{}))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "invalid OTLP exporter configuration") {
					t.Fatalf("error %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.Shutdown(context.Background()) }()
			// With every part off nothing waits: records are decided as
			// they arrive.
			e.Consume(newTailRun(1, 2, 3, nil).batches()[0])
			if st := e.Stats(); st.Deciding != 0 || st.Spans != st.Sampled+st.Unsampled {
				t.Errorf("stats %+v: want nothing held", st)
			}
		})
	}
}
