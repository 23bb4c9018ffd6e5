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
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// promQuery is an instant query against a real Prometheus.
type promQuery struct {
	base string
}

type promSample struct {
	Metric map[string]string
	Value  float64
}

// get calls a Prometheus HTTP API endpoint and decodes its data into
// data; an error names the call and what went wrong.
func (q promQuery) get(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s %v: %d: %w", path, params, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

func (q promQuery) query(ctx context.Context, expr string) ([]promSample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := q.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	var out []promSample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", expr, s, err)
		}
		out = append(out, promSample{r.Metric, v})
	}
	return out, nil
}

// scrapedRun is the set-up of a test against a real Prometheus that
// scrapes TRAINSCOPE_METRICS_ADDR: it skips, saying why, when either
// variable is unset, and returns the client, the address to serve on, a
// fresh run id (prefix-…) and the PromQL suffix that selects that run's
// series (same target as its run_info series).
func scrapedRun(t *testing.T, prefix string) (q promQuery, addr, runID, ours string) {
	t.Helper()
	base, addr := os.Getenv("TRAINSCOPE_PROMETHEUS_URL"), os.Getenv("TRAINSCOPE_METRICS_ADDR")
	if base == "" || addr == "" {
		t.Skip("TRAINSCOPE_PROMETHEUS_URL and TRAINSCOPE_METRICS_ADDR are not both set (CI sets them: scripts/prometheus.sh start $TRAINSCOPE_METRICS_ADDR)")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	runID = prefix + "-" + hex.EncodeToString(b[:])
	return promQuery{strings.TrimSuffix(base, "/")}, addr, runID, fmt.Sprintf(` and on(job, instance) trainscope_run_info{run=%q}`, runID)
}

// serveScraped serves e on addr until the test ends, and waits until
// Prometheus scrapes it.
func (q promQuery) serveScraped(t *testing.T, e *prom.Exporter, addr, ours string) {
	t.Helper()
	if _, err := e.Serve(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	q.poll(t, time.Now().Add(60*time.Second), `up`+ours, func(res []promSample) error {
		if len(res) != 1 || res[0].Value != 1 {
			return fmt.Errorf("up = %v, want one target up (is Prometheus scraping %s?)", res, addr)
		}
		return nil
	})
}

// poll runs expr until check accepts its result or the deadline passes.
func (q promQuery) poll(t *testing.T, deadline time.Time, expr string, check func([]promSample) error) []promSample {
	t.Helper()
	var last error
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		res, err := q.query(ctx, expr)
		cancel()
		if err == nil {
			if err = check(res); err == nil {
				return res
			}
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus at %s: %s: still not as expected after the deadline: %v", q.base, expr, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestEndToEndPrometheus runs the real trainer with the exporter serving
// on TRAINSCOPE_METRICS_ADDR, which the real Prometheus at
// TRAINSCOPE_PROMETHEUS_URL scrapes (scripts/prometheus.sh start ADDR), and
// proves that what Prometheus stored equals the profiler's own counts:
// records by name (summed over ranks, as exported by default) against
// Summarize(Snapshot()), the profiler's
// Stats, step counts and collective bytes. It keeps serving until
// Prometheus holds several scrapes of the final values, so the dashboard
// test (dashboards/) finds the run's data afterwards.
func TestEndToEndPrometheus(t *testing.T) {
	q, addr, runID, ours := scrapedRun(t, "e2e")

	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e, err := prom.New(p, prom.WithRunID(runID))
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline analysis's metrics, as profile-run registers them (the
	// dashboards' test reads them from this run too).
	pipe := analysis.NewSink()
	if err := p.AddSink(pipe); err != nil {
		t.Fatal(err)
	}
	if err := e.Register(prom.NewAnalysisCollector(pipe)); err != nil {
		t.Fatal(err)
	}
	// Prometheus scrapes this exporter before training starts.
	q.serveScraped(t, e, addr, ours)

	// Train, watching Prometheus see records while training goes on;
	// training runs again (on the same profiler) until it has, within a
	// bound, so the check holds on a slow or loaded machine too.
	var live atomic.Bool
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for !live.Load() {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			res, err := q.query(t.Context(), `sum(trainscope_records_total`+ours+`)`)
			select {
			case <-done:
				return // what it saw may be from after training
			default:
			}
			if err == nil && len(res) == 1 && res[0].Value > 0 {
				live.Store(true)
			}
		}
	}()
	start := time.Now()
	runs := 0
	for runs < 2 || !live.Load() && time.Since(start) < 60*time.Second {
		cfg := trainConfig(20, 8)
		cfg.Profiler = p
		if _, err := pipeline.Train(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		runs++
		if runs >= 2 && !live.Load() {
			// A run takes well under the scrape interval without the
			// race detector: runs back to back until a scrape would
			// pass the profiler's record bound (262,144, about 11 runs).
			time.Sleep(250 * time.Millisecond)
		}
	}
	close(done)
	<-watched
	if !live.Load() {
		t.Errorf("Prometheus saw no records during %v of training (%d runs): /metrics is not live", time.Since(start), runs)
	}
	t.Logf("%d training runs in %v; Prometheus scraped records while training", runs, time.Since(start))
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The report's counts.
	recs := p.Snapshot()
	st := p.Stats()
	if st.Pending != 0 || st.Dropped != 0 || st.Overflow != 0 {
		t.Fatalf("profiler stats %+v: the report would not hold every record", st)
	}
	want := map[string]float64{} // name → count over all ranks
	total := 0
	for _, g := range profiler.Summarize(recs) {
		for _, n := range g.Names {
			want[n.Name] += float64(n.Count)
			total += n.Count
		}
	}
	if total != len(recs) {
		t.Fatalf("Summarize counts %d records of %d", total, len(recs))
	}
	steps := map[string]float64{}
	bytes := map[string]float64{} // rank/op/group → bytes
	for i := range recs {
		r := &recs[i]
		rank := strconv.Itoa(r.Rank)
		if r.Depth == 0 && r.Name == "step" {
			steps[rank]++
		}
		if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
			bytes[rank+"/"+r.Collective.Op+"/"+r.Collective.Group] += float64(r.Collective.Bytes)
		}
	}

	// Exact reconciliation: Prometheus's stored counters equal the
	// report's counts, series for series, once it has scraped the final
	// values.
	deadline := time.Now().Add(60 * time.Second)
	equal := func(key func(map[string]string) string, want map[string]float64) func([]promSample) error {
		return func(res []promSample) error {
			got := map[string]float64{}
			for _, s := range res {
				got[key(s.Metric)] += s.Value
			}
			if len(got) != len(want) {
				return fmt.Errorf("%d series, want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					return fmt.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			return nil
		}
	}
	q.poll(t, deadline, `trainscope_records_total`+ours, equal(func(m map[string]string) string { return m["name"] }, want))
	q.poll(t, deadline, `sum(trainscope_records_total`+ours+`)`, equal(func(map[string]string) string { return "" }, map[string]float64{"": float64(len(recs))}))
	// Step counts from the step time histogram: native where the server
	// stores native histograms, else classic.
	q.poll(t, deadline, `sum by (rank) (histogram_count(trainscope_step_seconds`+ours+`) or trainscope_step_seconds_count`+ours+`)`,
		equal(func(m map[string]string) string { return m["rank"] }, steps))
	q.poll(t, deadline, `sum by (rank, op, group) (trainscope_collective_bytes_total`+ours+`)`,
		equal(func(m map[string]string) string { return m["rank"] + "/" + m["op"] + "/" + m["group"] }, bytes))
	st = p.Stats()
	for name, v := range map[string]float64{
		"trainscope_records_kept":           float64(st.Records),
		"trainscope_records_pending":        float64(st.Pending),
		"trainscope_records_dropped_total":  float64(st.Dropped),
		"trainscope_records_overflow_total": float64(st.Overflow),
		"trainscope_event_shortages_total":  float64(st.EventDrops),
		"trainscope_recorders":              float64(st.Recorders),
	} {
		q.poll(t, deadline, name+ours, equal(func(map[string]string) string { return "" }, map[string]float64{"": v}))
	}
	t.Logf("Prometheus holds exactly the report's counts: %d records in %d name series, %d steps", len(recs), len(want), int(sumValues(steps)))

	// The series Prometheus holds for the run are the series of a scrape
	// of the exporter, counted as a server of its kind stores them.
	format := classicScrape
	if res, err := q.query(t.Context(), `count(histogram_count(trainscope_step_seconds`+ours+`))`); err == nil && len(res) == 1 && res[0].Value > 0 {
		format = nativeScrape
	}
	url := "http://" + addr + "/metrics"
	var series int
	q.poll(t, deadline, `count({__name__=~"trainscope_.+"}`+ours+`)`, func(res []promSample) error {
		c := countSeries(scrapeAs(t, url, format), format)
		series = c.total
		if len(res) != 1 || int(res[0].Value) != c.total {
			return fmt.Errorf("Prometheus holds %v series, a %s scrape has %d", res, format.name, c.total)
		}
		return nil
	})
	t.Logf("Prometheus holds the %d series of a %s scrape", series, format.name)

	// Linger until Prometheus has a few more scrapes of the final values,
	// so rate() windows over the run's end hold data for the dashboards.
	first := q.poll(t, deadline, `count_over_time(trainscope_run_info{run="`+runID+`"}[10m])`, func(res []promSample) error {
		if len(res) != 1 {
			return fmt.Errorf("no run_info samples")
		}
		return nil
	})
	q.poll(t, time.Now().Add(60*time.Second), `count_over_time(trainscope_run_info{run="`+runID+`"}[10m])`, func(res []promSample) error {
		if len(res) != 1 || res[0].Value < first[0].Value+5 {
			return fmt.Errorf("%v samples, waiting for %v", res, first[0].Value+5)
		}
		return nil
	})
}

func sumValues(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}
