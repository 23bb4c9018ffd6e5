package prom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
// with the tail policy, and a real Prometheus (exemplar storage on) scraping: its exemplar API
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
	// With a real Jaeger at hand, the exporter's spans go there too, and
	// every exemplar must open its step's whole trace in it.
	mem := tracetest.NewInMemoryExporter()
	var to sdktrace.SpanExporter = mem
	jaegerQuery, otlp := os.Getenv("TRAINSCOPE_JAEGER_QUERY"), os.Getenv("TRAINSCOPE_OTLP_GRPC")
	if jaegerQuery != "" && otlp != "" {
		j, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(otlp))
		if err != nil {
			t.Fatal(err)
		}
		to = tee{mem, j}
	} else {
		t.Log("no Jaeger (TRAINSCOPE_JAEGER_QUERY, TRAINSCOPE_OTLP_GRPC): exemplars are checked against the spans sent, not opened in Jaeger")
	}
	// A ratio of 0.5 and the tail policy: steps kept by either carry
	// exemplars.
	spans, err := otelexp.New(ctx, p, otelexp.Config{Epoch: p.Epoch(), RunID: runID, ServiceName: runID, Sampler: "traceidratio", SamplerArg: "0.5",
		KeepFirst: 2, KeepSlowestMin: 3}, otelexp.WithSpanExporter(to))
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
	if to != sdktrace.SpanExporter(mem) {
		ranks := cfg.Stages * cfg.Replicas
		for _, ids := range got {
			for _, id := range ids {
				if have := jaegerStepRanks(t, jaegerQuery, id, ranks); have != ranks {
					t.Errorf("exemplar trace %s: Jaeger holds the step span of %d ranks, want %d", id, have, ranks)
				}
			}
		}
		t.Logf("every exemplar's trace opens in Jaeger with all %d ranks' step spans", ranks)
	}
	st := spans.Stats()
	t.Logf("%d step-time exemplars over %d sampled steps' traces (%d kept as first, %d as slowest so far), all of them sent", n, len(sent), st.KeptFirst, st.KeptSlow)
}

// jaegerStepRanks opens a trace in a real Jaeger (its query API) and
// counts the ranks whose step span it holds, waiting up to 30 s for want
// of them (ingestion is asynchronous).
func jaegerStepRanks(t *testing.T, query, traceID string, want int) int {
	t.Helper()
	var have int
	deadline := time.Now().Add(30 * time.Second)
	for {
		have = 0
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimRight(query, "/")+"/api/traces/"+traceID, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var body struct {
				Data []struct {
					Spans []struct {
						OperationName string `json:"operationName"`
						ProcessID     string `json:"processID"`
					} `json:"spans"`
					Processes map[string]struct {
						Tags []struct {
							Key   string `json:"key"`
							Value any    `json:"value"`
						} `json:"tags"`
					} `json:"processes"`
				} `json:"data"`
			}
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil && len(body.Data) == 1 {
				ranks := map[string]bool{}
				tr := body.Data[0]
				for _, sp := range tr.Spans {
					if sp.OperationName != profiler.StepName {
						continue
					}
					for _, kv := range tr.Processes[sp.ProcessID].Tags {
						if kv.Key == string(otelexp.KeyRank) {
							ranks[fmt.Sprint(kv.Value)] = true
						}
					}
				}
				have = len(ranks)
			}
			resp.Body.Close()
		}
		if have >= want || time.Now().After(deadline) {
			return have
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// tee sends spans to two exporters: what the test inspects, and Jaeger.
type tee [2]sdktrace.SpanExporter

func (t tee) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := t[0].ExportSpans(ctx, spans)
	if err2 := t[1].ExportSpans(ctx, spans); err == nil {
		err = err2
	}
	return err
}

func (t tee) Shutdown(ctx context.Context) error {
	err := t[0].Shutdown(ctx)
	if err2 := t[1].Shutdown(ctx); err == nil {
		err = err2
	}
	return err
}
