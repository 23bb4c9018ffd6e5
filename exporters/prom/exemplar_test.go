package prom_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// TestExemplarsLinkSampledSteps trains with spans sampled at a ratio of
// 0.25, the tail policy keeping the slowest step so far, and step
// times exported with WithStepTraces: an OpenMetrics scrape carries
// exemplars whose trace ids are those of step spans the span exporter
// sent — and only those, whichever rule kept the step.
func TestExemplarsLinkSampledSteps(t *testing.T) {
	ctx := context.Background()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	mem := tracetest.NewInMemoryExporter()
	spans, err := otelexp.New(ctx, p, otelexp.Config{Epoch: p.Epoch(), RunID: "exemplars", Sampler: "traceidratio", SamplerArg: "0.25",
		KeepFirst: -1, KeepSlowest: -1, KeepSlowestMin: 1}, otelexp.WithSpanExporter(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer spans.Shutdown(ctx)
	e, err := prom.New(p, prom.WithHostname(host), prom.WithStepTraces(spans.StepTrace))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(ctx)
	cfg := trainConfig(16, 4)
	cfg.Profiler = p
	if _, err := pipeline.Train(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := spans.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	sent := sentSteps(mem)
	t.Logf("%d of %d steps sent (%d as slowest so far)", len(sent), cfg.Steps, spans.Stats().KeptSlow)
	if len(sent) == 0 || len(sent) == cfg.Steps {
		t.Fatalf("%d of %d steps' traces sent: the test needs a ratio that keeps some and not all", len(sent), cfg.Steps)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	ex := regexp.MustCompile(`(?m)^(trainscope_[a-z_]+)_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})"\}`)
	found := map[string]map[string]bool{}
	for _, m := range ex.FindAllStringSubmatch(string(body), -1) {
		if !sent[m[2]] {
			t.Errorf("%s: exemplar trace %s is not a trace the span exporter sent", m[1], m[2])
		}
		if found[m[1]] == nil {
			found[m[1]] = map[string]bool{}
		}
		found[m[1]][m[2]] = true
	}
	for _, name := range []string{"trainscope_step_seconds", "trainscope_collective_seconds"} {
		if len(found[name]) == 0 {
			t.Errorf("no exemplars on %s", name)
		}
	}
}

// sentSteps is the trace ids, in hex, of the steps whose spans mem got.
func sentSteps(mem *tracetest.InMemoryExporter) map[string]bool {
	sent := map[string]bool{}
	for _, s := range mem.GetSpans() {
		if s.Name == profiler.StepName {
			sent[s.SpanContext.TraceID().String()] = true
		}
	}
	return sent
}
