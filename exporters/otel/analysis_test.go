package otel_test

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/runtime"
)

// TestAnalysisSpans trains pp=2 × dp=2 on the host backend with the
// analysis sink feeding AddStep: every rank's step span gets one child,
// "pipeline analysis", in the step's trace, spanning the step, whose busy
// and idle add up to the step span's length and whose critical-path
// shares add up to one over the step's ranks.
func TestAnalysisSpans(t *testing.T) {
	ctx := context.Background()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	mem := tracetest.NewInMemoryExporter()
	exp, err := otelexp.New(ctx, p, otelexp.Config{Epoch: p.Epoch(), RunID: "analysis"}, otelexp.WithSpanExporter(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	pipe := analysis.NewSink(analysis.WithStepFunc(exp.AddStep))
	if err := p.AddSink(pipe); err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.Backend = runtime.CPU
	cfg.Stages, cfg.Chunks, cfg.Replicas = 2, 2, 2
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers, cfg.Steps = 4, 4, 16, 8, 3
	cfg.CommTimeout = 30 * time.Second
	cfg.Profiler = p
	if _, err := pipeline.Train(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pipe.Flush()
	if err := exp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	type key struct{ rank, step int64 }
	stepSpans := map[[8]byte]tracetest.SpanStub{}
	analysed := map[key]tracetest.SpanStub{}
	for _, s := range mem.GetSpans() {
		a := map[string]any{}
		for _, kv := range s.Attributes {
			a[string(kv.Key)] = kv.Value.AsInterface()
		}
		switch s.Name {
		case profiler.StepName:
			stepSpans[s.SpanContext.SpanID()] = s
		case otelexp.AnalysisSpanName:
			analysed[key{a[string(otelexp.KeyRank)].(int64), a[string(otelexp.KeyStep)].(int64)}] = s
		}
	}
	ranks := cfg.Stages * cfg.Replicas
	if len(analysed) != ranks*cfg.Steps {
		t.Fatalf("%d analysis spans, want one per rank and step (%d)", len(analysed), ranks*cfg.Steps)
	}
	share := map[int64]float64{}
	for k, s := range analysed {
		parent, ok := stepSpans[s.Parent.SpanID()]
		if !ok || parent.SpanContext.TraceID() != s.SpanContext.TraceID() {
			t.Errorf("rank %d step %d: the analysis span's parent is not a step span of its trace", k.rank, k.step)
			continue
		}
		if !s.StartTime.Equal(parent.StartTime) || !s.EndTime.Equal(parent.EndTime) {
			t.Errorf("rank %d step %d: analysis span [%v, %v], step span [%v, %v]", k.rank, k.step, s.StartTime, s.EndTime, parent.StartTime, parent.EndTime)
		}
		a := map[string]float64{}
		for _, kv := range s.Attributes {
			if f, ok := kv.Value.AsInterface().(float64); ok {
				a[string(kv.Key)] = f
			}
		}
		wall := parent.EndTime.Sub(parent.StartTime).Seconds()
		if got := a[string(otelexp.KeyPipelineBusy)] + a[string(otelexp.KeyPipelineIdle)]; math.Abs(got-wall) > 1e-9 {
			t.Errorf("rank %d step %d: busy + idle = %v s, step span %v s", k.rank, k.step, got, wall)
		}
		f, ok := a[string(otelexp.KeyPipelineBubbleShare)]
		if !ok || f < 0 || f > 1 {
			t.Errorf("rank %d step %d: bubble fraction %v (present %v)", k.rank, k.step, f, ok)
		}
		// The computation is the span less the bubble, the span the
		// bubble over its fraction (every rank of a pipeline idles some
		// of it); and it is part of the busy time.
		bubble, compute := a[string(otelexp.KeyPipelineBubble)], a[string(otelexp.KeyPipelineCompute)]
		if span := bubble / f; f > 0 && (math.Abs(compute+bubble-span) > 1e-9 || compute <= 0 || compute > a[string(otelexp.KeyPipelineBusy)]+1e-9) {
			t.Errorf("rank %d step %d: compute %v s, bubble %v s (%.3f of the span, %v s), busy %v s", k.rank, k.step, compute, bubble, f, span, a[string(otelexp.KeyPipelineBusy)])
		}
		if _, ok := a[string(otelexp.KeyPipelineScore)]; !ok {
			t.Errorf("rank %d step %d: no straggler score with dp=2", k.rank, k.step)
		}
		share[k.step] += a[string(otelexp.KeyPipelineCriticalShare)]
	}
	for step, s := range share {
		if math.Abs(s-1) > 1e-9 {
			t.Errorf("step %d: critical-path shares add up to %v, want 1", step, s)
		}
	}
	if st := exp.Stats(); st.Undelivered() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A step whose ranks timed no compute on the device (a wrapped job whose
// kernels were not traced) has its transfers but no measure of the
// computation that hid them: its analysis spans carry neither busy time
// nor an overlap ratio, which would read as 0.
func TestAnalysisSpanOverlapUnknownWithoutCompute(t *testing.T) {
	ctx := context.Background()
	mem := tracetest.NewInMemoryExporter()
	exp, err := otelexp.New(ctx, nil, otelexp.Config{Epoch: epoch, RunID: "no-compute"}, otelexp.WithSpanExporter(mem))
	if err != nil {
		t.Fatal(err)
	}
	pipe := analysis.NewSink(analysis.WithStepFunc(exp.AddStep))
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var recs []profiler.Record
	for rank := range 2 {
		l := profiler.Labels{Step: 0, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None}
		recs = append(recs, profiler.Record{ID: 1, Name: profiler.StepName, Rank: rank, Labels: l, HostEnd: ms(100)})
		recs = append(recs, profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank,
			Stream: 2, Labels: l, HasDevice: true, DeviceStart: ms(30 + 5*rank), DeviceEnd: ms(40),
			Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 2, GroupRank: int32(rank), Peer: -1, Root: -1}})
	}
	pipe.Consume(recs)
	pipe.Flush()
	defer exp.Shutdown(ctx)
	if err := exp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range mem.GetSpans() {
		if s.Name != otelexp.AnalysisSpanName {
			continue
		}
		n++
		for _, kv := range s.Attributes {
			switch kv.Key {
			case otelexp.KeyPipelineOverlap, otelexp.KeyPipelineBusy:
				t.Errorf("analysis span has %s = %v with no compute timed", kv.Key, kv.Value.String())
			}
		}
	}
	if n != 2 {
		t.Errorf("%d analysis spans, want 2", n)
	}
}
