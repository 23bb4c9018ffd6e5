package dashboards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	client "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	_ "github.com/trainscope/trainscope/ccl/local" // in-process collectives for the CPU backend
	"github.com/trainscope/trainscope/dashboards"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu" // host backend
)

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
	AllValue   string          `json:"allValue"`
}

// query is the variable's query text, whether Grafana stored it as a
// string or as an object.
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Format     string      `json:"format"`
	Datasource *datasource `json:"datasource"`
	Exemplar   bool        `json:"exemplar"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Datasource  *datasource `json:"datasource"`
	GridPos     *struct{ X, Y, W, H int }
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Options struct {
		YAxis struct {
			Unit string `json:"unit"`
		} `json:"yAxis"`
	} `json:"options"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a row's
}

type dashboard struct {
	file          string
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func (d *dashboard) variable(name string) *variable {
	for i := range d.Templating.List {
		if d.Templating.List[i].Name == name {
			return &d.Templating.List[i]
		}
	}
	return nil
}

// allPanels flattens rows.
func (d *dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func load(t *testing.T) []*dashboard {
	t.Helper()
	names := dashboards.Names()
	if len(names) < 2 {
		t.Fatalf("dashboards: %v, want the training overview and the collectives dashboard", names)
	}
	var out []*dashboard
	for _, n := range names {
		b, err := dashboards.JSON(n)
		if err != nil {
			t.Fatal(err)
		}
		d := &dashboard{file: n}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(d); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out = append(out, d)
	}
	return out
}

// The variables every dashboard filters by, in the order they chain.
var filters = []string{"Hostname", "rank", "group"}

var builtins = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "5s",
	"__range":         "30m",
}

var varRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces every variable in expr: dashboard variables from
// values (regex-escaped, as Grafana formats multi-value variables for
// Prometheus), Grafana's built-ins with fixed durations.
func substitute(expr string, values map[string]string) (string, error) {
	var err error
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if v, ok := builtins[name]; ok {
			return v
		}
		v, ok := values[name]
		if !ok {
			err = fmt.Errorf("undefined variable %s in %s", m, expr)
			return m
		}
		return v
	})
	return out, err
}

// regexValue formats a concrete value for a =~ matcher inside a PromQL
// string.
func regexValue(v string) string { return strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`) }

var matcherRef = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"(\$\{?\w+\}?)"`)

func TestDashboardStructure(t *testing.T) {
	uids := map[string]bool{}
	for _, d := range load(t) {
		t.Run(d.file, func(t *testing.T) {
			if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || uids[d.UID] {
				t.Errorf("uid %q, title %q, schemaVersion %d: want a unique uid, a title and a schema version", d.UID, d.Title, d.SchemaVersion)
			}
			uids[d.UID] = true
			ds := d.variable("datasource")
			if ds == nil || ds.Type != "datasource" || ds.query() != "prometheus" {
				t.Errorf("no Prometheus datasource variable named datasource: %+v", ds)
			}
			for _, name := range filters {
				v := d.variable(name)
				if v == nil {
					t.Errorf("no %s variable", name)
					continue
				}
				q := v.query()
				if v.Type != "query" || !strings.HasPrefix(q, "label_values(") || v.Definition != q ||
					v.Datasource == nil || v.Datasource.UID != "${datasource}" || !v.IncludeAll || !v.Multi || v.AllValue != ".*" {
					t.Errorf("variable %s: %+v (query %q): want a multi-value label_values query on ${datasource} with All = .*", name, *v, q)
				}
			}
			ids := map[int]bool{}
			used := map[string]bool{}
			for _, p := range d.allPanels() {
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if p.ID == 0 || ids[p.ID] || p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
					t.Errorf("%s: want a unique id, a title and a grid position", where)
				}
				ids[p.ID] = true
				if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
					t.Errorf("%s: datasource %+v, want prometheus ${datasource}", where, p.Datasource)
				}
				if p.FieldConfig.Defaults.Unit == "" {
					t.Errorf("%s: no unit", where)
				}
				if p.Type == "heatmap" && p.Options.YAxis.Unit == "" {
					t.Errorf("%s: heatmap without a y-axis unit", where)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
						t.Errorf("%s: target %+v: want an expression and a unique refId", where, tg)
					}
					refs[tg.RefID] = true
					if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
						t.Errorf("%s: target datasource %+v", where, tg.Datasource)
					}
					if p.Type == "heatmap" && tg.Format != "heatmap" {
						t.Errorf("%s: heatmap target format %q", where, tg.Format)
					}
					// Multi-value variables hold regexes: only =~ fits.
					for _, m := range matcherRef.FindAllStringSubmatch(tg.Expr, -1) {
						if m[2] != "=~" {
							t.Errorf("%s: %s %s %s: a multi-value variable needs =~", where, m[1], m[2], m[3])
						}
					}
					for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
						used[m[1]+m[2]+m[3]] = true
					}
					if _, err := substitute(tg.Expr, allValues(d)); err != nil {
						t.Errorf("%s: %v", where, err)
					}
				}
			}
			for _, name := range filters {
				if !used[name] {
					t.Errorf("variable %s is used by no panel", name)
				}
			}
		})
	}
}

func allValues(d *dashboard) map[string]string {
	m := map[string]string{}
	for _, v := range d.Templating.List {
		m[v.Name] = ".*"
	}
	return m
}

func TestProvisioning(t *testing.T) {
	for file, want := range map[string][]string{
		"provisioning/datasources/trainscope.yaml": {"apiVersion: 1", "datasources:", "type: prometheus", "url: http://127.0.0.1:9090"},
		"provisioning/dashboards/trainscope.yaml":  {"apiVersion: 1", "providers:", "type: file", "path: "},
	} {
		b, err := fs.ReadFile(dashboards.FS(), file)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s has no %q", file, w)
			}
		}
		if strings.Contains(string(b), "\t") {
			t.Errorf("%s has a tab: YAML indents with spaces", file)
		}
	}
}

// queries returns every panel query of d, variables substituted.
func queries(t *testing.T, d *dashboard, values map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			q, err := substitute(tg.Expr, values)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s panel %d %q %s", d.file, p.ID, p.Title, tg.RefID)] = q
		}
	}
	return out
}

// exportedNames runs a small real training job through the exporter and
// returns the sample names it exposes.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e, err := prom.New(p, prom.WithHostname("test-host"))
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline analysis's metrics, as profile-run registers them.
	pipe := analysis.NewSink()
	if err := p.AddSink(pipe); err != nil {
		t.Fatal(err)
	}
	if err := e.Register(prom.NewAnalysisCollector(pipe)); err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.Backend = runtime.CPU
	cfg.Stages, cfg.Chunks, cfg.Replicas = 2, 2, 2
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers, cfg.Steps = 2, 4, 16, 8, 2
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	pipe.Flush()
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	// The cycle of a wrapped job's collectives, as profile-run registers
	// it for wrapped runs: its series appear once a cycle is found, which
	// a run of two steps does not repeat enough to show; the names it
	// declares are those it exposes (TestWrapCycleScrapedByPrometheus in
	// cmd/profile-run has Prometheus scrape them).
	descs := make(chan *client.Desc, 8)
	prom.NewCycleCollector(cycle.NewSink(0), 0).Describe(descs)
	close(descs)
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	for _, mf := range mfs {
		n := mf.GetName()
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names[n], names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true, true
			continue
		}
		names[n] = true
	}
	return names
}

var fqName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

var metricName = regexp.MustCompile(`\btrainscope_[a-z_]+\b`)

// Every metric a dashboard queries is one the exporter exposes.
func TestQueriesUseExportedMetrics(t *testing.T) {
	have := exportedNames(t)
	for _, d := range load(t) {
		for where, q := range queries(t, d, allValues(d)) {
			for _, n := range metricName.FindAllString(q, -1) {
				if !have[n] {
					t.Errorf("%s: queries %s, which the exporter does not expose", where, n)
				}
			}
		}
		for _, v := range d.Templating.List {
			for _, n := range metricName.FindAllString(v.query(), -1) {
				if !have[n] {
					t.Errorf("%s: variable %s queries %s, which the exporter does not expose", d.file, v.Name, n)
				}
			}
		}
	}
}

// The panels of step time and collective latency show exemplars, which
// link an observation to its step's trace (prom.WithStepTraces); the
// panels of other quantities do not, as their exemplars would be step
// times drawn on another scale.
func TestExemplarPanels(t *testing.T) {
	want := map[string]bool{"Step time by rank": true, "Step time quantiles": true,
		"Collective latency heatmap": true, "Latency quantiles by op": true, "Per-rank skew: mean call duration by rank and op": true}
	seen := 0
	for _, d := range load(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if tg.Exemplar != want[p.Title] {
					t.Errorf("%s: panel %q target %s: exemplar %v, want %v", d.file, p.Title, tg.RefID, tg.Exemplar, want[p.Title])
				}
			}
			if want[p.Title] {
				seen++
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d exemplar panels found", seen, len(want))
	}
}

// Every query parses as PromQL: promtool checks them as recording rules.
func TestQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian package prometheus provides /usr/bin/promtool; scripts/prometheus.sh start installs it)")
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	n := 0
	for _, d := range load(t) {
		qs := queries(t, d, allValues(d))
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range qs {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			n++
			expr, _ := json.Marshal(qs[k])
			fmt.Fprintf(&b, "      # %s\n      - record: dashboard:query_%d\n        expr: %s\n", k, n, expr)
		}
	}
	file := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

// prometheus is the HTTP API of a real Prometheus.
type prometheus struct{ base string }

func (p prometheus) get(ctx context.Context, path string, params url.Values, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
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
		return fmt.Errorf("%s: HTTP %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

// rangeQuery evaluates expr as a Grafana panel does, over [start, end],
// and returns how many series it gave and how many finite points.
func (p prometheus) rangeQuery(ctx context.Context, expr string, start, end time.Time) (series, finite int, err error) {
	var data struct {
		Result []struct {
			Values     [][2]any `json:"values"`
			Histograms [][2]any `json:"histograms"` // native histogram samples
		} `json:"result"`
	}
	err = p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {"5"},
	}, &data)
	for _, r := range data.Result {
		for _, v := range r.Values {
			s, _ := v[1].(string)
			if f, perr := strconv.ParseFloat(s, 64); perr == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				finite++
			}
		}
		for _, h := range r.Histograms {
			if m, ok := h[1].(map[string]any); ok && m["count"] != nil {
				finite++
			}
		}
	}
	return len(data.Result), finite, err
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// values evaluates a label_values(selector, label) variable query.
func (p prometheus) values(ctx context.Context, query string, start, end time.Time) ([]string, error) {
	m := labelValues.FindStringSubmatch(query)
	if m == nil {
		return nil, fmt.Errorf("not a label_values(selector, label) query: %s", query)
	}
	var series []map[string]string
	if err := p.get(ctx, "/api/v1/series", url.Values{
		"match[]": {m[1]},
		"start":   {strconv.FormatInt(start.Unix(), 10)},
		"end":     {strconv.FormatInt(end.Unix(), 10)},
	}, &series); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, s := range series {
		if v := s[m[2]]; v != "" {
			set[v] = true
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out, nil
}

// Against a real Prometheus that scraped a real training run (CI runs
// exporters/prom's TestEndToEndPrometheus first), every variable query
// finds values and every panel query returns data, with the variables set
// to All and to concrete values.
func TestQueriesReturnDataFromPrometheus(t *testing.T) {
	base := os.Getenv("TRAINSCOPE_PROMETHEUS_URL")
	if base == "" {
		t.Skip("TRAINSCOPE_PROMETHEUS_URL is not set (CI sets it to a Prometheus that scraped a real training run)")
	}
	p := prometheus{strings.TrimSuffix(base, "/")}
	end := time.Now()
	start := end.Add(-30 * time.Minute)
	for _, d := range load(t) {
		t.Run(d.file, func(t *testing.T) {
			ctx := t.Context()
			all := allValues(d)
			concrete := allValues(d)
			// Chained like Grafana's: each variable's query sees the
			// concrete values chosen before it.
			for _, name := range filters {
				q, err := substitute(d.variable(name).query(), concrete)
				if err != nil {
					t.Fatal(err)
				}
				vals, err := p.values(ctx, q, start, end)
				if err != nil || len(vals) == 0 {
					t.Fatalf("variable %s: %s: values %v, %v", name, q, vals, err)
				}
				concrete[name] = regexValue(vals[0])
				t.Logf("variable %s: %d values, using %q", name, len(vals), vals[0])
			}
			for _, values := range []map[string]string{all, concrete} {
				for where, q := range queries(t, d, values) {
					series, finite, err := p.rangeQuery(ctx, q, start, end)
					if err != nil || series == 0 || finite == 0 {
						t.Errorf("%s: %s: %d series, %d finite points, %v: want data", where, q, series, finite, err)
					}
				}
			}
		})
	}
}
