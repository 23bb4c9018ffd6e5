package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promInstant runs an instant query against the Prometheus at base and
// returns each series' labels and value.
func promInstant(ctx context.Context, base, expr string) ([]map[string]string, []float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?"+url.Values{"query": {expr}}.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, nil, fmt.Errorf("%s: %s", resp.Status, body.Error)
	}
	var labels []map[string]string
	var values []float64
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("value %q: %v", s, err)
		}
		labels, values = append(labels, r.Metric), append(values, v)
	}
	return labels, values, nil
}

// TestWrapCycleScrapedByPrometheus: a wrapped job that marks no steps —
// the plugin's C driver, two processes each issuing three all-reduces
// then sleeping, 50 ms a step — with profile-run serving /metrics on
// TRAINSCOPE_METRICS_ADDR, which the real Prometheus at
// TRAINSCOPE_PROMETHEUS_URL scrapes (scripts/prometheus.sh start ADDR).
// Prometheus stores, for each rank, the cycle of its collectives: 3
// operations, at least the 50 ms the driver sleeps (its sleeps last
// longer on a loaded machine, never less); and the cycles timed over the
// run, their count and the longest. profile-run lingers after the
// job so that several scrapes hold the final values, which the
// dashboards' test (dashboards/) then finds.
func TestWrapCycleScrapedByPrometheus(t *testing.T) {
	base, addr := os.Getenv("TRAINSCOPE_PROMETHEUS_URL"), os.Getenv("TRAINSCOPE_METRICS_ADDR")
	if base == "" || addr == "" {
		t.Skip("TRAINSCOPE_PROMETHEUS_URL and TRAINSCOPE_METRICS_ADDR are not both set (CI sets them: scripts/prometheus.sh start $TRAINSCOPE_METRICS_ADDR)")
	}
	base = strings.TrimSuffix(base, "/")
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q 300 $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", addr, "-metrics-linger", "10s", "-quiet", "-progress", "off",
			"-trace", "off", "-pprof", "off", "--", "bash", "-c", script)
		done <- result{code, stdout, stderr}
	}()
	// The run's id is its directory's name.
	var runID string
	for deadline := time.Now().Add(30 * time.Second); runID == ""; {
		if dirs, _ := filepath.Glob(filepath.Join(out, "*")); len(dirs) == 1 {
			runID = filepath.Base(dirs[0])
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("profile-run made no run directory in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ours := fmt.Sprintf(` and on(job, instance) trainscope_run_info{run=%q}`, runID)
	var last string
	check := func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		secs, sv, err := promInstant(ctx, base, `trainscope_collective_cycle_seconds`+ours)
		if err != nil {
			last = err.Error()
			return false
		}
		_, ov, err := promInstant(ctx, base, `trainscope_collective_cycle_operations`+ours)
		if err != nil {
			last = err.Error()
			return false
		}
		_, cv, err := promInstant(ctx, base, `trainscope_collective_cycle_run_seconds_count`+ours)
		if err != nil {
			last = err.Error()
			return false
		}
		_, lv, err := promInstant(ctx, base, `trainscope_collective_cycle_longest_seconds`+ours)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("seconds %v %v, operations %v, cycles timed %v, longest %v", secs, sv, ov, cv, lv)
		if len(sv) != 2 || len(ov) != 2 || len(cv) != 2 || len(lv) != 2 || secs[0]["rank"] == secs[1]["rank"] {
			return false
		}
		for i := range sv {
			// The longest of a few hundred steps: 50 ms or more, a
			// loaded machine's slowest a few times that.
			if sv[i] < 0.0495 || sv[i] > 0.08 || ov[i] != 3 || cv[i] < 1 || cv[i] > 300 || lv[i] < 0.0495 || lv[i] > 1 {
				t.Errorf("Prometheus holds %s: want each rank's cycle 3 operations and 49.5–80 ms, 1–300 cycles timed, the longest 49.5 ms–1 s", last)
			}
		}
		return true
	}
	for deadline := time.Now().Add(90 * time.Second); !check(); {
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus at %s has no cycle of run %s after 90 s: %s", base, runID, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
	select {
	case r := <-done:
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("profile-run did not end within 120 s")
	}
}
