package otel_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// TestJaegerSamplingWholeSteps sends 1,000 steps of 4 ranks (a step range
// holding a device-timed forward on each: 3 spans a rank) through
// traceidratio 0.1, one exporter per rank as in a real job, to a real
// Jaeger: it holds exactly the steps the OpenTelemetry SDK's own ratio
// sampler keeps for those trace ids — 100 ± 6σ of them — each with every
// rank's spans.
func TestJaegerSamplingWholeSteps(t *testing.T) {
	query, grpcEndpoint, _ := jaegerEnv(t)
	const ranks, steps, ratio = 4, 1000, 0.1
	since := time.Now()
	service := fmt.Sprintf("trainscope-sampling-%d", since.UnixNano())
	ctx := context.Background()
	var traceOf func(step int32) (string, bool)
	for rank := range ranks {
		p, err := profiler.New()
		if err != nil {
			t.Fatal(err)
		}
		exp, err := otelexp.New(ctx, p, otelexp.Config{
			Epoch: p.Epoch(), Endpoint: grpcEndpoint, Protocol: otelexp.ProtocolGRPC, Insecure: true,
			ServiceName: service, RunID: service, Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: fmt.Sprint(ratio),
			KeepFirst: -1, KeepSlowest: -1, KeepSlowestMin: -1, // the ratio sampler alone
		})
		if err != nil {
			t.Fatal(err)
		}
		traceOf = func(step int32) (string, bool) { return exp.StepTrace(step, 0) }
		var recs []profiler.Record
		for s := range steps {
			at := time.Duration(s) * time.Millisecond
			recs = append(recs,
				profiler.Record{ID: uint64(2*s + 2), Parent: uint64(2*s + 1), Name: "forward", Depth: 1, Kind: profiler.KindDevice, Rank: rank,
					Labels:    profiler.Labels{Step: int32(s), Stage: int16(rank), Chunk: 0, Microbatch: 0, Phase: profiler.Forward},
					Device:    runtime.Device{Type: runtime.CPU, Index: rank},
					HostStart: at + 100*time.Microsecond, HostEnd: at + 200*time.Microsecond,
					HasDevice: true, DeviceStart: at + 150*time.Microsecond, DeviceEnd: at + 600*time.Microsecond},
				profiler.Record{ID: uint64(2*s + 1), Name: profiler.StepName, Rank: rank,
					Labels:    profiler.Labels{Step: int32(s), Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
					Device:    runtime.Device{Type: runtime.CPU, Index: rank},
					HostStart: at, HostEnd: at + 900*time.Microsecond})
		}
		exp.Consume(recs)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := exp.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		_ = p.Close(ctx)
		if st := exp.Stats(); st.Undelivered() != 0 || st.Sampled+st.Unsampled != uint64(3*steps) {
			t.Fatalf("rank %d: stats %+v", rank, st)
		}
	}
	// The steps the SDK's own sampler keeps, from the trace ids.
	sdk := sdktrace.TraceIDRatioBased(ratio)
	want := map[string]bool{}
	for s := range steps {
		id, _ := traceOf(int32(s))
		tid, err := trace.TraceIDFromHex(id)
		if err != nil {
			t.Fatal(err)
		}
		if sdk.ShouldSample(sdktrace.SamplingParameters{TraceID: tid}).Decision == sdktrace.RecordAndSample {
			want[id] = true
		}
	}
	sigma := math.Sqrt(steps * ratio * (1 - ratio))
	// The run's trace ids are random, so the count is binomial: 6σ is a
	// bound a fair sampler misses about once in 500 million runs (3σ
	// failed a run here with 129), and that degenerate trace ids (every
	// step kept, or none) cannot meet.
	if d := math.Abs(float64(len(want)) - steps*ratio); d > 6*sigma {
		t.Errorf("the SDK keeps %d steps of %d at %v: more than 6σ (%.1f) from %v", len(want), steps, ratio, 6*sigma, steps*ratio)
	}
	spans := awaitSpans(t, query, service, since, 3*ranks*len(want))
	perTrace := map[string]int{}
	for _, s := range spans {
		perTrace[strings.TrimLeft(s.TraceID, "0")]++
	}
	for id := range want {
		if n := perTrace[strings.TrimLeft(id, "0")]; n != 3*ranks {
			t.Errorf("trace %s: %d spans in Jaeger, want every rank's %d", id, n, 3*ranks)
		}
	}
	if len(perTrace) != len(want) {
		t.Errorf("Jaeger holds %d step traces, the SDK's sampler keeps %d", len(perTrace), len(want))
	}
	t.Logf("%d of %d steps sampled at %v (expected %v, σ %.1f), each whole in Jaeger (%d spans)", len(want), steps, ratio, steps*ratio, sigma, len(spans))
}

// TestJaegerTailKeepsSlowestSteps sends 1,000 steps of 4 ranks, ten of
// them three to four times slower than the rest, through one exporter
// with traceidratio 0.1 and the tail policy to a real Jaeger: it holds
// every step the SDK's ratio sampler keeps, the first five, the slowest
// so far — the run's slowest 1 % among them — each with every rank's
// spans, and no other step.
func TestJaegerTailKeepsSlowestSteps(t *testing.T) {
	query, grpcEndpoint, _ := jaegerEnv(t)
	const ranks, steps, ratio, first, share, atLeast = 4, 1000, 0.1, 5, 0.01, 10
	// The run's 13 s of steps lie in the past, where the query API looks.
	since := time.Now().Add(-30 * time.Second)
	service := fmt.Sprintf("trainscope-tail-%d", since.UnixNano())
	slow := []int{17, 140, 141, 388, 502, 650, 777, 901, 960, 999}
	run := newTailRun(21, ranks, steps, slow)
	ctx := context.Background()
	exp, err := otelexp.New(ctx, nil, otelexp.Config{
		Epoch: since.Add(time.Second), Endpoint: grpcEndpoint, Protocol: otelexp.ProtocolGRPC, Insecure: true,
		ServiceName: service, RunID: service, Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: fmt.Sprint(ratio),
		KeepFirst: first, KeepSlowest: share, KeepSlowestMin: atLeast,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range run.batches() {
		exp.Consume(b)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := exp.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	st := exp.Stats()
	if st.Undelivered() != 0 || st.Deciding != 0 || st.Sampled+st.Unsampled != uint64(spansPerRankStep*ranks*steps) {
		t.Fatalf("stats %+v", st)
	}
	traceOf := func(step int32) string { id, _ := exp.StepTrace(step, 0); return id }
	stepOfTrace := map[string]int{}
	for s := range steps {
		stepOfTrace[strings.TrimLeft(traceOf(int32(s)), "0")] = s
	}
	spans := awaitSpans(t, query, service, since, int(st.Exported))
	got := map[int]int{}
	for _, s := range spans {
		step, ok := stepOfTrace[strings.TrimLeft(s.TraceID, "0")]
		if !ok {
			t.Fatalf("Jaeger holds a span in trace %s, of no step", s.TraceID)
		}
		got[step]++
	}
	sdk := ratioKeeps(t, ratio, steps, traceOf)
	kept, _ := checkTailKeeps(t, run, got, sdk, first, share, atLeast)
	for _, s := range slow {
		if got[s] == 0 {
			t.Errorf("slowed step %d (%v) is not in Jaeger", s, run.duration(s))
		}
	}
	t.Logf("Jaeger holds %d of %d steps, each whole (%d spans): %d by the ratio sampler, %d first, %d slowest so far",
		kept, steps, len(spans), len(sdk), st.KeptFirst, st.KeptSlow)
}
