package prom_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// exemplars asks a real Prometheus for the exemplars of expr in a range:
// the trace ids they carry, by metric name.
func (q promQuery) exemplars(ctx context.Context, expr string, start, end time.Time) (map[string][]string, error) {
	var data []struct {
		SeriesLabels map[string]string `json:"seriesLabels"`
		Exemplars    []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	err := q.get(ctx, "/api/v1/query_exemplars", url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixNano())/1e9, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixNano())/1e9, 'f', 3, 64)},
	}, &data)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range data {
		for _, e := range s.Exemplars {
			out[s.SeriesLabels["__name__"]] = append(out[s.SeriesLabels["__name__"]], e.Labels[prom.ExemplarTraceID])
		}
	}
	return out, nil
}

// TestExemplarsInPrometheus trains with spans sampled at a ratio of 0.5
// and a real Prometheus (exemplar storage on) scraping: its exemplar API
// returns trace ids for step-time observations, each the trace of a step
// the span exporter sent.
func TestExemplarsInPrometheus(t *testing.T) {
	q, addr, runID, ours := scrapedRun(t, "exemplars")
	ctx := t.Context()

	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	mem := tracetest.NewInMemoryExporter()
	spans, err := otelexp.New(ctx, p, otelexp.Config{Epoch: p.Epoch(), RunID: runID, Sampler: "traceidratio", SamplerArg: "0.5"}, otelexp.WithSpanExporter(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer spans.Shutdown(context.Background())
	e, err := prom.New(p, prom.WithRunID(runID), prom.WithStepTraces(spans.StepTrace))
	if err != nil {
		t.Fatal(err)
	}
	q.serveScraped(t, e, addr, ours)

	start := time.Now()
	const steps = 40
	cfg := trainConfig(steps, 2)
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
	if len(sent) == 0 {
		t.Fatal("no step's trace was sent")
	}
	// Prometheus has scraped the end of the run.
	q.poll(t, time.Now().Add(60*time.Second), `sum(histogram_count(trainscope_step_seconds`+ours+`)) or sum(trainscope_step_seconds_count`+ours+`)`, func(res []promSample) error {
		ranks := cfg.Stages * cfg.Replicas
		if len(res) != 1 || res[0].Value != float64(ranks*steps) {
			return fmt.Errorf("step observations %v, want %d", res, ranks*steps)
		}
		return nil
	})
	var got map[string][]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err = q.exemplars(ctx, `trainscope_step_seconds_bucket or trainscope_step_seconds`, start, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	n := 0
	for name, ids := range got {
		for _, id := range ids {
			n++
			if !sent[id] {
				t.Errorf("%s: exemplar trace %q is not a trace the span exporter sent", name, id)
			}
		}
	}
	if n == 0 {
		t.Fatalf("Prometheus holds no step-time exemplars (is it started with --enable-feature=exemplar-storage?)")
	}
	t.Logf("%d step-time exemplars over %d sampled steps' traces, all of them sent", n, len(sent))
}
