package dashboards_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// panelExpr is the query of the panel titled title (its only target, or
// the one with refID) with the variables set to values.
func panelExpr(t *testing.T, file, title, refID string, values map[string]string) string {
	t.Helper()
	for _, d := range load(t) {
		if d.file != file {
			continue
		}
		for _, p := range d.allPanels() {
			if p.Title != title {
				continue
			}
			for _, tg := range p.Targets {
				if refID != "" && tg.RefID != refID {
					continue
				}
				q, err := substitute(tg.Expr, values)
				if err != nil {
					t.Fatal(err)
				}
				return q
			}
		}
	}
	t.Fatalf("%s: no panel %q (target %q)", file, title, refID)
	return ""
}

// evalAt evaluates exprs with promtool's rule unit tests over the input
// series (classic series, as a server without native histograms stores
// them, one sample every 15 s), at 5 minutes, and checks each against its
// expected samples.
func evalAt(t *testing.T, series map[string]string, want map[string][]string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian package prometheus provides /usr/bin/promtool; scripts/prometheus.sh start installs it)")
	}
	var b strings.Builder
	b.WriteString("evaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n")
	for s, v := range series {
		sj, _ := json.Marshal(s)
		fmt.Fprintf(&b, "      - series: %s\n        values: %q\n", sj, v)
	}
	b.WriteString("    promql_expr_test:\n")
	for expr, samples := range want {
		ej, _ := json.Marshal(expr)
		fmt.Fprintf(&b, "      - expr: %s\n        eval_time: 5m\n        exp_samples:\n", ej)
		for _, s := range samples {
			fmt.Fprintf(&b, "          - %s\n", s)
		}
	}
	file := filepath.Join(t.TempDir(), "test.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\n%s", err, out, b.String())
	}
}

// The device time per step of a range name is the same whichever rank
// the dashboard shows: range series carry no rank (they are summed over
// the exporter's ranks), so the steps they are divided by must be those
// of all ranks too, not of the selected ones.
func TestDeviceTimePerStepIndependentOfRank(t *testing.T) {
	// Four ranks on one host, each one step per 15 s, each spending
	// 0.25 s of device time per step in "forward": 1 s per 15 s in all.
	series := map[string]string{
		`trainscope_range_device_seconds_sum{Hostname="h", name="forward"}`:   "0+1x40",
		`trainscope_range_device_seconds_count{Hostname="h", name="forward"}`: "0+4x40",
	}
	for r := range 4 {
		series[fmt.Sprintf(`trainscope_step_seconds_count{Hostname="h", rank="%d", gpu="%d", UUID="", stage="%d"}`, r, r, r)] = "0+1x40"
	}
	want := map[string][]string{}
	for _, rank := range []string{".*", "0", "0|1"} {
		q := panelExpr(t, "training-overview.json", "Device time per step by range name", "",
			map[string]string{"datasource": "prometheus", "Hostname": "h", "rank": rank, "group": ".*"})
		want[q] = []string{`labels: '{name="forward"}'` + "\n            value: 0.25"}
	}
	evalAt(t, series, want)
}
