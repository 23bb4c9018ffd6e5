package prom_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/runtime"
)

// seriesBudget is the number of series a rank may add to a Prometheus by
// default, whatever the job's size (docs/metrics.md).
const seriesBudget = 100

// serveSynthetic feeds an exporter with steps of a synthetic trainer-shaped
// trace of the given ranks and returns the URL of its /metrics.
func serveSynthetic(t *testing.T, ranks, steps int, opts ...prom.Option) string {
	t.Helper()
	opts = append([]prom.Option{prom.WithHostname(host), prom.WithDescriber(func(runtime.DeviceType) runtime.DeviceDescriber { return nil })}, opts...)
	e, err := prom.New(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	g := synthtrace.NewGenerator(synthtrace.TrainerShape(ranks, steps))
	for range steps {
		e.Consume(synthtrace.EndOrder(g.Step(nil)))
	}
	return serveURL(t, e)
}

// serveTrainer runs the built-in trainer on the host backend with pp
// stages, vpp chunks and dp replicas, as profile-run does (the exporter
// and the pipeline analysis's collector), and returns the URL of /metrics.
func serveTrainer(t *testing.T, pp, vpp, dp int, opts ...prom.Option) string {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	e, err := prom.New(p, append([]prom.Option{prom.WithHostname(host)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	pipe := analysis.NewSink()
	if err := p.AddSink(pipe); err != nil {
		t.Fatal(err)
	}
	if err := e.Register(prom.NewAnalysisCollector(pipe)); err != nil {
		t.Fatal(err)
	}
	cfg := trainConfig(2, 4)
	cfg.Stages, cfg.Chunks, cfg.Replicas = pp, vpp, dp
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return serveURL(t, e)
}

func serveURL(t *testing.T, e *prom.Exporter) string {
	t.Helper()
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr.String() + "/metrics"
}

// The default series budget, counted from real scrapes in both formats:
// every rank adds at most seriesBudget series, the same number at 2, 16,
// 64 and 256 ranks, and the series without a rank do not grow with the
// job.
func TestSeriesPerRankWithinBudget(t *testing.T) {
	type job struct {
		name  string
		ranks int
		url   func(t *testing.T) string
	}
	var jobs []job
	for _, n := range []int{2, 16, 64, 256} {
		jobs = append(jobs, job{fmt.Sprintf("synthetic %d ranks", n), n, func(t *testing.T) string { return serveSynthetic(t, n, 3) }})
	}
	if !testing.Short() {
		jobs = append(jobs,
			job{"trainer -pp 2 -vpp 2 (2 ranks)", 2, func(t *testing.T) string { return serveTrainer(t, 2, 2, 1) }},
			job{"trainer -pp 2 -vpp 2 -dp 2 (4 ranks)", 4, func(t *testing.T) string { return serveTrainer(t, 2, 2, 2) }},
			job{"trainer -pp 4 -vpp 2 -dp 4 (16 ranks)", 16, func(t *testing.T) string { return serveTrainer(t, 4, 2, 4) }})
	}
	type key struct {
		synthetic bool
		dp        bool
		format    string
	}
	perRank, shared := map[key]int{}, map[key]int{}
	for _, j := range jobs {
		url := j.url(t)
		for _, f := range []scrapeFormat{classicScrape, nativeScrape} {
			s := scrapeAs(t, url, f)
			c := countSeries(s, f)
			t.Logf("%s, %s: %v; %d bytes", j.name, f.name, c, s.bytes)
			if len(c.perRank) != j.ranks {
				t.Errorf("%s, %s: series of %d ranks, want %d", j.name, f.name, len(c.perRank), j.ranks)
			}
			lo, hi := c.rankRange()
			if hi > seriesBudget {
				t.Errorf("%s, %s: a rank has %d series, over the budget of %d: %v", j.name, f.name, hi, seriesBudget, c.byName)
			}
			// Jobs of one shape (synthetic; trainer with or without data
			// parallelism) give every rank of every size the same series
			// and the same series without a rank.
			k := key{synthetic: j.name[0] == 's', dp: j.ranks > 2, format: f.name}
			if lo != hi {
				t.Errorf("%s, %s: ranks have %d to %d series, want all the same", j.name, f.name, lo, hi)
			}
			if v, ok := perRank[k]; ok && (v != hi || shared[k] != c.shared) {
				t.Errorf("%s, %s: %d series per rank and %d without a rank; a smaller job of the same shape had %d and %d",
					j.name, f.name, hi, c.shared, v, shared[k])
			}
			perRank[k], shared[k] = hi, c.shared
		}
	}
}
