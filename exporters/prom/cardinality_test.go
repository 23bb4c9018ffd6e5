package prom_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestHeadSeriesInPrometheus starts a Prometheus of its own (native
// histograms on, as scripts/prometheus.sh starts it) scraping exporters
// of 2, 16, 64 and 256 synthetic ranks and, unless -short, the built-in
// trainer's 16 ranks. Prometheus's own count of the series it holds,
// prometheus_tsdb_head_series, equals the series of the exporters'
// scrapes (as a server with native histograms stores them) plus the five
// it adds per target (up, scrape_duration_seconds, scrape_samples_scraped,
// scrape_samples_post_metric_relabeling, scrape_series_added); each
// target's share is checked too, and every rank stays within the budget.
func TestHeadSeriesInPrometheus(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus is not installed (scripts/prometheus.sh start installs the Debian package): " + err.Error())
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; scripts/prometheus.sh needs it: " + err.Error())
	}
	type target struct {
		name  string
		ranks int
		url   string
	}
	var targets []target
	for _, n := range []int{2, 16, 64, 256} {
		targets = append(targets, target{fmt.Sprintf("synthetic %d ranks", n), n, serveSynthetic(t, n, 3)})
	}
	if !testing.Short() {
		targets = append(targets, target{"trainer -pp 4 -vpp 2 -dp 4", 16, serveTrainer(t, 4, 2, 4)})
	}
	// A port of our own for this Prometheus, beside any other.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	args := []string{"../../scripts/prometheus.sh", "start"}
	for _, tg := range targets {
		u, err := url.Parse(tg.url)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, u.Host)
	}
	env := append(os.Environ(), "TRAINSCOPE_PROMETHEUS_LISTEN="+listen, "TRAINSCOPE_PROMETHEUS_DIR="+dir,
		"TRAINSCOPE_PROMETHEUS_FEATURES=native-histograms",
		// A 256-rank scrape under the race detector on loaded cores
		// takes more than the default 1 s.
		"TRAINSCOPE_PROMETHEUS_INTERVAL=5s")
	start := exec.CommandContext(t.Context(), "bash", args...)
	start.Env = env
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("scripts/prometheus.sh start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		stop := exec.Command("bash", "../../scripts/prometheus.sh", "stop")
		stop.Env = env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Errorf("scripts/prometheus.sh stop: %v\n%s", err, out)
		}
	})
	q := promQuery{"http://" + listen}

	// What each target's scrape holds, as a native-histogram server
	// stores it; the exporters are fed before Prometheus starts and do not
	// change.
	const perTarget = 5
	want := 0
	byTarget := map[string]int{}
	for _, tg := range targets {
		c := countSeries(scrapeAs(t, tg.url, nativeScrape), nativeScrape)
		u, _ := url.Parse(tg.url)
		byTarget[u.Host] = c.total + c.other + perTarget
		want += c.total + c.other + perTarget
		_, hi := c.rankRange()
		if hi > seriesBudget {
			t.Errorf("%s: a rank has %d series, over the budget of %d", tg.name, hi, seriesBudget)
		}
		t.Logf("%s: %d series in a scrape, %d with a rank's label per rank, %d without", tg.name, c.total, hi, c.shared)
	}
	deadline := time.Now().Add(120 * time.Second)
	q.poll(t, deadline, `count by (instance) ({__name__=~".+"})`, func(res []promSample) error {
		if len(res) != len(byTarget) {
			return fmt.Errorf("series of %d targets, want %d", len(res), len(byTarget))
		}
		for _, s := range res {
			if int(s.Value) != byTarget[s.Metric["instance"]] {
				return fmt.Errorf("%s: %v series, want %d", s.Metric["instance"], s.Value, byTarget[s.Metric["instance"]])
			}
		}
		return nil
	})
	var head int
	for {
		var err error
		head, err = headSeries(t.Context(), "http://"+listen+"/metrics")
		if err == nil && head == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus_tsdb_head_series = %d (%v), want %d: the scrapes' series and %d per target", head, err, want, perTarget)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("prometheus_tsdb_head_series = %d: the %d targets' scrapes and %d series per target", head, len(targets), perTarget)
}

// headSeries reads prometheus_tsdb_head_series from a Prometheus's own
// /metrics.
func headSeries(ctx context.Context, metricsURL string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "prometheus_tsdb_head_series "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no prometheus_tsdb_head_series in %s", metricsURL)
}
