package prom_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// TestNativeHistogramQuantilesInPrometheus trains with the exporter serving
// on TRAINSCOPE_METRICS_ADDR to the real Prometheus at
// TRAINSCOPE_PROMETHEUS_URL, started with native histograms
// (scripts/prometheus.sh does), and checks that histogram_quantile over the
// stored native step-time histograms gives each rank's p50 and p99 as the
// report does (profiler.StepSummary, within 1%), within the native
// buckets' width: schema 3, a factor 2^(1/8) between bucket bounds.
func TestNativeHistogramQuantilesInPrometheus(t *testing.T) {
	q, addr, runID, ours := scrapedRun(t, "native")

	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	report := profiler.NewStepSummary()
	if err := p.AddSink(report); err != nil {
		t.Fatal(err)
	}
	e, err := prom.New(p, prom.WithRunID(runID))
	if err != nil {
		t.Fatal(err)
	}
	q.serveScraped(t, e, addr, ours)

	// 100 steps per rank: the order statistic the report's quantile
	// names, the ⌈q·n⌉-th, is then the one histogram_quantile's rank q·n
	// falls on, for q = 0.5 and 0.99.
	const steps = 100
	cfg := trainConfig(steps, 2)
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Each rank's step times, from the records.
	times := map[string][]float64{}
	for _, r := range p.Snapshot() {
		if r.Depth == 0 && r.Name == prom.StepRange {
			rank := strconv.Itoa(r.Rank)
			times[rank] = append(times[rank], r.HostDuration().Seconds())
		}
	}
	for rank, x := range times {
		if len(x) != steps {
			t.Fatalf("rank %s: %d steps in the records, want %d", rank, len(x), steps)
		}
		slices.Sort(x)
	}

	// Prometheus holds every step, in native histograms.
	deadline := time.Now().Add(60 * time.Second)
	q.poll(t, deadline, `histogram_count(trainscope_step_seconds`+ours+`)`, func(res []promSample) error {
		if len(res) == 0 {
			return fmt.Errorf("no native step histograms (is Prometheus started with --enable-feature=native-histograms?)")
		}
		if len(res) != len(times) {
			return fmt.Errorf("%d ranks, want %d", len(res), len(times))
		}
		for _, s := range res {
			if s.Value != steps {
				return fmt.Errorf("rank %s: %v steps, want %d", s.Metric["rank"], s.Value, steps)
			}
		}
		return nil
	})

	growth := math.Pow(2, 1.0/8) // schema 3: prom.NativeBucketFactor 1.1 rounds down to it
	byRank := map[string]profiler.StepStats{}
	for _, st := range report.Ranks() {
		byRank[strconv.Itoa(st.Rank)] = st
	}
	for _, c := range []struct {
		q      float64
		report func(profiler.StepStats) time.Duration
	}{
		{0.5, func(s profiler.StepStats) time.Duration { return s.P50 }},
		{0.99, func(s profiler.StepStats) time.Duration { return s.P99 }},
	} {
		res, err := q.query(t.Context(), fmt.Sprintf(`histogram_quantile(%g, trainscope_step_seconds%s)`, c.q, ours))
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(times) {
			t.Fatalf("p%g: %d ranks, want %d: %v", 100*c.q, len(res), len(times), res)
		}
		for _, s := range res {
			rank := s.Metric["rank"]
			exact := times[rank][int(c.q*float64(steps-1))]
			rep := c.report(byRank[rank]).Seconds()
			// The report is within 1% of the exact order statistic
			// (DDSketch's guarantee: |report − exact| ≤ 1% of exact, so
			// the ratio lies in [0.99, 1.01]); the native histogram's
			// estimate lies in the bucket that holds it, so within a
			// factor growth of it.
			acc := profiler.StepQuantileAccuracy
			if r := rep / exact; r < 1-acc || r > 1+acc {
				t.Errorf("rank %s p%g: report %v, exact %v", rank, 100*c.q, rep, exact)
			}
			if r := s.Value / exact; r < 1/growth || r > growth {
				t.Errorf("rank %s p%g: Prometheus %v, exact %v: ratio %.4f beyond one bucket (%.4f)", rank, 100*c.q, s.Value, exact, r, growth)
			}
			if r := s.Value / rep; r < 1/(growth*(1+acc)) || r > growth/(1-acc) {
				t.Errorf("rank %s p%g: Prometheus %v, report %v: ratio %.4f", rank, 100*c.q, s.Value, rep, r)
			}
			t.Logf("rank %s p%g: Prometheus %.6fs, report %.6fs, exact %.6fs (Prometheus/report %.4f)", rank, 100*c.q, s.Value, rep, exact, s.Value/rep)
		}
	}
}
