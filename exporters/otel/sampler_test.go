package otel_test

import (
	"context"
	"math"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/profiler"
)

// exportRank sends one rank's records through an exporter of its own, as
// a process of its own would, and returns the spans it exported and its
// Stats.
func exportRank(t *testing.T, cfg otelexp.Config, recs []profiler.Record) ([]sdktrace.ReadOnlySpan, otelexp.Stats) {
	t.Helper()
	s := &stub{}
	cfg.Epoch, cfg.QueueSize = epoch, 1<<22
	e, err := otelexp.New(context.Background(), nil, cfg, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	for len(recs) > 0 {
		n := min(512, len(recs))
		e.Consume(recs[:n])
		recs = recs[n:]
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans, _, _ := s.got()
	return spans, e.Stats()
}

// stepOf is the training.step attribute of a host span; device spans
// have none.
func stepOf(s sdktrace.ReadOnlySpan) (int64, bool) {
	for _, a := range s.Attributes() {
		if a.Key == otelexp.KeyStep {
			return a.Value.AsInt64(), true
		}
	}
	return 0, false
}

// With OTEL_TRACES_SAMPLER=traceidratio and a ratio of 0.1 over 1,000
// steps, ranks exporting on their own keep the same steps, whole; the
// steps kept are those the OpenTelemetry SDK's TraceIDRatioBased sampler
// keeps for the steps' trace ids, about a tenth of them (with the tail
// policy off; TestTailPolicyKeepsSlowestAndFirstSteps has it on); and Stats counts
// every span as sampled or not.
func TestRatioSamplerKeepsTheSameWholeStepsOnEveryRank(t *testing.T) {
	clearOTLPEnv(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
	const ranks, steps, ratio = 4, 1000, 0.1
	shape := synthtrace.Shape{Ranks: ranks, Steps: steps, Chunks: 1, Microbatches: 1, Layers: 1}
	all := shape.Records()
	byRank := make([][]profiler.Record, ranks)
	spansOf := map[[2]int64]int{} // rank, step → spans
	for _, r := range all {
		byRank[r.Rank] = append(byRank[r.Rank], r)
		n := 1
		if r.HasDevice {
			n = 2
		}
		spansOf[[2]int64{int64(r.Rank), int64(r.Step)}] += n
	}
	// The ratio sampler alone: each rank on its own, no tail policy.
	cfg := otelexp.Config{RunID: "sampling-test-run", KeepFirst: -1, KeepSlowest: -1, KeepSlowestMin: -1}

	// Each step's trace id, from an exporter that keeps everything.
	traceOf := map[int64]trace.TraceID{}
	on := cfg
	on.Sampler = otelexp.SamplerAlwaysOn
	spans, _ := exportRank(t, on, byRank[0])
	stepOfTrace := map[trace.TraceID]int64{}
	for _, s := range spans {
		if step, ok := stepOf(s); ok {
			traceOf[step] = s.SpanContext().TraceID()
			stepOfTrace[s.SpanContext().TraceID()] = step
		}
	}
	if len(traceOf) != steps || len(stepOfTrace) != steps {
		t.Fatalf("always_on: %d steps' traces, want %d", len(traceOf), steps)
	}
	ref := sdktrace.TraceIDRatioBased(ratio)
	want := map[int64]bool{}
	for step, tid := range traceOf {
		if ref.ShouldSample(sdktrace.SamplingParameters{TraceID: tid}).Decision == sdktrace.RecordAndSample {
			want[step] = true
		}
	}

	var first map[int64]bool
	for rank := range ranks {
		spans, st := exportRank(t, cfg, byRank[rank])
		got := map[int64]int{}
		for _, s := range spans {
			step, ok := stepOfTrace[s.SpanContext().TraceID()]
			if !ok {
				t.Fatalf("rank %d: span %s in trace %s, of no step", rank, s.Name(), s.SpanContext().TraceID())
			}
			if hs, ok := stepOf(s); ok && hs != step {
				t.Fatalf("rank %d: span of step %d in step %d's trace", rank, hs, step)
			}
			got[step]++
		}
		kept := map[int64]bool{}
		unsampled := 0
		for step := range int64(steps) {
			n := spansOf[[2]int64{int64(rank), step}]
			switch {
			case got[step] == 0:
				unsampled += n
			case got[step] != n:
				t.Errorf("rank %d step %d: %d spans exported, want the whole step's %d", rank, step, got[step], n)
				fallthrough
			default:
				kept[step] = true
			}
		}
		for step := range int64(steps) {
			if kept[step] != want[step] {
				t.Errorf("rank %d step %d: kept %v, the SDK's TraceIDRatioBased(%g) keeps %v", rank, step, kept[step], ratio, want[step])
			}
		}
		if first == nil {
			first = kept
			// A binomial count: 100 ± 6σ, a bound a fair sampler of
			// random trace ids misses about once in 500 million runs,
			// and degenerate ones (every step kept, or none) cannot meet.
			sigma := math.Sqrt(steps * ratio * (1 - ratio))
			if d := math.Abs(float64(len(kept)) - steps*ratio); d > 6*sigma {
				t.Errorf("%d of %d steps kept, want %v ± %.0f", len(kept), steps, steps*ratio, 6*sigma)
			}
			t.Logf("%d of %d steps kept on every rank", len(kept), steps)
		}
		if st.Spans != st.Sampled+st.Unsampled || st.Unsampled != uint64(unsampled) || st.Exported != uint64(len(spans)) || st.Sampled != st.Exported {
			t.Errorf("rank %d: stats %+v; %d spans exported, %d left out", rank, st, len(spans), unsampled)
		}
	}
}

func TestSamplerConfiguration(t *testing.T) {
	recs, n := records(300) // step 0 for every record
	cases := []struct {
		name      string
		env       map[string]string
		cfg       otelexp.Config
		all, none bool
		err       string
	}{
		{name: "default", all: true},
		{name: "always_on", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, all: true},
		{name: "always_off", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, none: true},
		{name: "parentbased_always_off", env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"}, none: true},
		{name: "ratio 0", env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, none: true},
		{name: "ratio without argument", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio"}, all: true},
		{name: "config over environment", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, cfg: otelexp.Config{Sampler: "always_on"}, all: true},
		{name: "unknown", env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, err: `OTEL_TRACES_SAMPLER="jaeger_remote": unknown sampler`},
		{name: "ratio above 1", cfg: otelexp.Config{Sampler: "traceidratio", SamplerArg: "1.5"}, err: `Config.SamplerArg="1.5"`},
		{name: "ratio not a number", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "tenth"}, err: `OTEL_TRACES_SAMPLER_ARG="tenth"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearOTLPEnv(t)
			t.Setenv("OTEL_TRACES_SAMPLER", "")
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", "")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if c.err != "" {
				cfg := c.cfg
				cfg.Epoch = epoch
				e, err := otelexp.New(context.Background(), nil, cfg, otelexp.WithSpanExporter(&stub{}))
				if err == nil {
					_ = e.Shutdown(context.Background())
					t.Fatal("New accepted it")
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q, want it to say %q", err, c.err)
				}
				return
			}
			spans, st := exportRank(t, c.cfg, recs)
			switch {
			case c.all && (len(spans) != n || st.Unsampled != 0):
				t.Errorf("%d spans exported, %d unsampled; want all %d", len(spans), st.Unsampled, n)
			case c.none && (len(spans) != 0 || st.Unsampled != uint64(n) || st.Sampled != 0):
				t.Errorf("%d spans exported, %d unsampled; want none of %d", len(spans), st.Unsampled, n)
			}
		})
	}
}
