package otel

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// Attributes of the pipeline analysis spans (AnalysisSpanName): one per
// rank and step, a child of the rank's step span, spanning the step.
// Durations are in seconds.
const (
	KeyPipelineComplete      = attribute.Key("training.pipeline.complete")
	KeyPipelineBusy          = attribute.Key("training.pipeline.busy")
	KeyPipelineIdle          = attribute.Key("training.pipeline.idle")
	KeyPipelineBubble        = attribute.Key("training.pipeline.bubble")
	KeyPipelineBubbleShare   = attribute.Key("training.pipeline.bubble_fraction")
	KeyPipelineCompute       = attribute.Key("training.pipeline.compute")
	KeyPipelineIdealBubble   = attribute.Key("training.pipeline.bubble_ideal_fraction")
	KeyPipelineOverlap       = attribute.Key("training.pipeline.overlap_ratio")
	KeyPipelineWaited        = attribute.Key("training.pipeline.collective_wait")
	KeyPipelineCaused        = attribute.Key("training.pipeline.collective_wait_caused")
	KeyPipelineScore         = attribute.Key("training.pipeline.straggler_score")
	KeyPipelineStraggler     = attribute.Key("training.pipeline.straggler")
	KeyPipelineCriticalShare = attribute.Key("training.pipeline.critical_path_share")
)

// AnalysisSpanName names the span that carries a rank's pipeline
// analysis of a step.
const AnalysisSpanName = "pipeline analysis"

// analysisSpan is what AddStep queues for one rank: built into a span by
// the export goroutine, which owns the builder.
type analysisSpan struct {
	rank       int
	step       int32
	cycle      bool // a cycle's span (CycleSpanName), no analysis's
	stepRange  uint64
	start, end time.Duration
	attrs      []attribute.KeyValue
}

// AddStep queues a span per rank of an analysed step, carrying the
// pipeline analysis's figures for that rank (the Key Pipeline*
// attributes), as a child of the rank's step span in the step's trace:
// spans already sent cannot take attributes, and the analysis of a step
// needs every rank's records. Feed it from analysis.WithStepFunc. The
// spans are sampled with their step, bounded by the queue and counted
// like the others.
func (e *Exporter) AddStep(st *analysis.Step) {
	var crit map[int]time.Duration
	var critTotal time.Duration
	if cp := st.Critical; cp != nil {
		crit = map[int]time.Duration{}
		for _, s := range cp.Segments {
			crit[s.Rank] += s.Len()
			critTotal += s.Len()
		}
	}
	var queued []analysisSpan
	for i := range st.Ranks {
		r := &st.Ranks[i]
		if r.StepRange == 0 {
			continue // no step range to hang it on
		}
		a := []attribute.KeyValue{
			KeyRank.Int(r.Rank), KeyStep.Int64(int64(st.Step)),
			KeyPipelineComplete.Bool(st.Complete()),
		}
		if r.Computed {
			// Without compute timed on the device (a wrapped job's step)
			// busy time is unknown, not 0.
			a = append(a, KeyPipelineBusy.Float64(r.Busy.Seconds()), KeyPipelineIdle.Float64(r.Idle().Seconds()))
		}
		if r.Stage != profiler.None {
			a = append(a, KeyStage.Int64(int64(r.Stage)))
		}
		if span := st.Span.Len(); span > 0 && st.Pipeline.Stages > 0 {
			// A bubble only where the work is a pipeline's (stage-labelled).
			// Its computation there is the rest of the span: what the
			// stages are compared by (analysis.StageBalance).
			a = append(a, KeyPipelineBubble.Float64(r.Bubble.Seconds()), KeyPipelineBubbleShare.Float64(float64(r.Bubble)/float64(span)),
				KeyPipelineCompute.Float64((span - r.Bubble).Seconds()))
		}
		if ideal := st.Pipeline.Ideal; !math.IsNaN(ideal) {
			a = append(a, KeyPipelineIdealBubble.Float64(ideal))
		}
		if ratio, ok := r.OverlapRatio(); ok && r.Computed {
			// Without compute timed on the device, overlap is unknown too.
			a = append(a, KeyPipelineOverlap.Float64(ratio))
		}
		if len(st.Collectives) > 0 {
			a = append(a, KeyPipelineWaited.Float64(r.Waited.Seconds()), KeyPipelineCaused.Float64(r.Caused.Seconds()),
				KeyPipelineScore.Float64(r.Score), KeyPipelineStraggler.Bool(st.Straggler == r.Rank))
		}
		if critTotal > 0 {
			a = append(a, KeyPipelineCriticalShare.Float64(float64(crit[r.Rank])/float64(critTotal)))
		}
		queued = append(queued, analysisSpan{rank: r.Rank, step: int32(st.Step), stepRange: r.StepRange, start: r.Wall.Start, end: r.Wall.End, attrs: a})
	}
	n := len(queued)
	if n == 0 {
		return
	}
	step := int32(st.Step)
	e.mu.Lock()
	e.stats.Spans += uint64(n)
	keep := e.sampler.sampled(e.build.ids.traceID(step))
	if t := e.tail; t != nil && step != profiler.None {
		// As for records (routeTail): a step's decision stands after
		// Shutdown too, so the spans of a step the tail policy kept count
		// as dropped then, not as left out by the sampler.
		// Nothing is held once the exporter has stopped.
		if k, ok := t.decided[step]; ok {
			keep = k
		} else if !e.finished {
			if o := t.openFor(step, func() bool { return keep }); o != nil && !o.kept() {
				// Held with the step's records until its decision.
				o.analysis = append(o.analysis, queued...)
				o.spans += n
				t.held += n
				e.mu.Unlock()
				return
			} else if o != nil {
				keep = true
			}
		}
	}
	wake := false
	if keep {
		wake = e.enqueueStepsLocked(queued)
	} else {
		e.stats.Unsampled += uint64(n)
	}
	e.mu.Unlock()
	if wake {
		e.wakeUp()
	}
}

// analysisSpans builds queued analysis spans.
func (b *builder) analysisSpans(q []analysisSpan, out []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	spans := make([]span, len(q))
	for i, a := range q {
		tid := b.ids.traceID(a.step)
		s := &spans[i]
		*s = span{
			name:   AnalysisSpanName,
			sc:     spanContext(tid, b.ids.analysisSpanID(a.rank, a.step)),
			parent: spanContext(tid, b.ids.spanID(a.rank, a.stepRange, false)),
			start:  b.epoch.Add(a.start),
			end:    b.epoch.Add(a.end),
			attrs:  a.attrs,
			res:    b.resource(a.rank),
			scope:  &b.scope,
		}
		if a.cycle { // a cycle's span: the root of its rank's records
			s.name, s.parent = CycleSpanName, trace.SpanContext{}
		}
		out = append(out, s)
	}
	return out
}

// StepTrace is the trace id of a step's spans, in hex, and whether this
// exporter exports that step: what a metrics exporter attaches as an
// exemplar, so that a step-time panel links to the step's trace
// (prom.WithStepTraces). stepTime is a rank's duration of the step, or 0
// when the caller has none (a collective's observation). Under the tail
// policy a step whose decision waits counts as sampled when it is kept
// whatever its duration, or when stepTime already places it among the
// slowest steps, which then keeps it: an exemplar never names a trace
// that is not exported.
func (e *Exporter) StepTrace(step int32, stepTime time.Duration) (traceID string, sampled bool) {
	tid := e.build.ids.traceID(step)
	sampled = e.sampler.sampled(tid)
	if !sampled && e.tail != nil && step != profiler.None {
		sampled = e.stepTraceTail(step, stepTime)
	}
	return tid.String(), sampled
}
