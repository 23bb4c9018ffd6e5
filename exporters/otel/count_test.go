package otel_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// A step the ratio sampler leaves out but the tail policy keeps (the
// first step) stays kept after Shutdown: its analysis spans, added once
// the exporter has stopped, count as dropped like its records would, not
// as left out by the sampler.
func TestAddStepAfterShutdownKeepsTheTailDecision(t *testing.T) {
	clearOTLPEnv(t)
	s := &stub{}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{
		Epoch: epoch, RunID: "add-step-after-shutdown",
		// A ratio this small leaves out every step (a step in a billion
		// is kept); the tail policy keeps the first step only.
		Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "1e-9",
		KeepFirst: 1, KeepSlowest: -1, KeepSlowestMin: -1,
	}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	step := profiler.Record{ID: 7, Name: profiler.StepName, Labels: profiler.NoLabels, HostStart: 10, HostEnd: 20}
	step.Step = 0
	exp.Consume([]profiler.Record{step})
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := exp.Stats()
	if before.KeptFirst != 1 || before.Exported != 1 || before.Unsampled != 0 {
		t.Fatalf("stats %+v; want the one step range kept as the first step and exported", before)
	}
	exp.AddStep(&analysis.Step{Step: 0, Straggler: profiler.None, Ranks: []analysis.Rank{{Rank: 0, StepRange: 7, Wall: profiler.Interval{Start: 10, End: 20}}}})
	st := exp.Stats()
	if st.Spans != 2 || st.Dropped != 1 || st.Unsampled != 0 || st.Sampled != 2 {
		t.Errorf("after AddStep of the kept step after Shutdown: stats %+v; want its analysis span dropped (1), none unsampled", st)
	}
}

// A Shutdown whose context has ended counts what is still queued as
// failed without building its spans: building a full queue is work for
// nothing, long past the deadline. The test counts the allocations made
// during Shutdown: building allocates for every request (one record each
// here), counting does not.
func TestShutdownOutOfTimeBuildsNothing(t *testing.T) {
	const n = 20000
	s := &stub{gate: make(chan struct{})} // an endpoint that never answers
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 1, QueueSize: 2 * n, ExportTimeout: time.Hour},
		otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]profiler.Record, n)
	for i := range recs {
		recs[i] = profiler.Record{ID: uint64(i + 1), Name: "op", Labels: profiler.NoLabels, HostStart: time.Duration(i), HostEnd: time.Duration(i + 1)}
	}
	exp.Consume(recs)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	err = exp.Shutdown(expired())
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, otelexp.ErrShutdownDeadline) {
		t.Errorf("Shutdown with an ended context, endpoint not answering: %v; want ErrShutdownDeadline", err)
	}
	st := exp.Stats()
	if st.Failed != n || st.Pending != 0 || st.Exported != 0 || st.Queued != n {
		t.Errorf("stats %+v; want all %d spans queued, then failed", st, n)
	}
	// Building and sending one record costs several allocations; a few
	// thousand allow for everything else the process does meanwhile.
	if allocs := m1.Mallocs - m0.Mallocs; allocs > n/4 {
		t.Errorf("Shutdown out of time made %d allocations for %d queued records: it built their spans", allocs, n)
	}
}
