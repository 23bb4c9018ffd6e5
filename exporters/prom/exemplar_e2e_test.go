package prom_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
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
	u := q.base + "/api/v1/query_exemplars?" + url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixNano())/1e9, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixNano())/1e9, 'f', 3, 64)},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			SeriesLabels map[string]string `json:"seriesLabels"`
			Exemplars    []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("exemplars %s: %d: %w", expr, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("exemplars %s: %s", expr, body.Error)
	}
	out := map[string][]string{}
	for _, s := range body.Data {
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
	base, addr := os.Getenv("TRAINSCOPE_PROMETHEUS_URL"), os.Getenv("TRAINSCOPE_METRICS_ADDR")
	if base == "" || addr == "" {
		t.Skip("TRAINSCOPE_PROMETHEUS_URL and TRAINSCOPE_METRICS_ADDR are not both set (CI sets them: scripts/prometheus.sh start $TRAINSCOPE_METRICS_ADDR)")
	}
	q := promQuery{strings.TrimSuffix(base, "/")}
	var b [4]byte
	_, _ = rand.Read(b[:])
	runID := "exemplars-" + hex.EncodeToString(b[:])
	ours := fmt.Sprintf(` and on(job, instance) trainscope_run_info{run=%q}`, runID)
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
	if _, err := e.Serve(addr); err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	q.poll(t, time.Now().Add(60*time.Second), `up`+ours, func(res []promSample) error {
		if len(res) != 1 || res[0].Value != 1 {
			return fmt.Errorf("up = %v, want one target up (is Prometheus scraping %s?)", res, addr)
		}
		return nil
	})

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
	sent := map[string]bool{}
	for _, s := range mem.GetSpans() {
		if s.Name == profiler.StepName {
			sent[s.SpanContext.TraceID().String()] = true
		}
	}
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
