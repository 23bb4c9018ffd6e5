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

// The collective time per step of a group and op is what a rank of the
// group spends in it per step, whichever ranks the dashboard shows: the
// steps it is divided by are those of the group's selected ranks, not
// those of every selected rank (a rank outside the group spends nothing
// in it). The groups are the exporter's for the built-in trainer with 2
// stages and 2 replicas: dp0 = ranks 0 and 2, dp1 = 1 and 3, pp0 = 0 and
// 1, pp1 = 2 and 3.
func TestCollectiveTimePerStepIndependentOfRank(t *testing.T) {
	// Each rank does one step per 15 s, spending 0.5 s of each in its
	// data-parallel AllReduce and 0.125 s in its pipeline Send.
	series := map[string]string{}
	for r := range 4 {
		rank := fmt.Sprintf(`Hostname="h", rank="%d", gpu="%d", UUID=""`, r, r)
		series[fmt.Sprintf(`trainscope_step_seconds_count{%s, stage="%d"}`, rank, r%2)] = "0+1x40"
		for _, c := range []struct {
			op, group string
			seconds   string
		}{{"AllReduce", fmt.Sprintf("dp%d", r%2), "0+0.5x40"}, {"Send", fmt.Sprintf("pp%d", r/2), "0+0.125x40"}} {
			l := fmt.Sprintf(`%s, op="%s", group="%s"`, rank, c.op, c.group)
			series[`trainscope_collective_seconds_sum{`+l+`}`] = c.seconds
			series[`trainscope_collective_seconds_count{`+l+`}`] = "0+1x40"
			series[`trainscope_collective_bytes_total{`+l+`}`] = "0+4096x40"
		}
	}
	sample := func(group, op, v string) string {
		return fmt.Sprintf(`labels: '{group="%s", op="%s"}'`+"\n            value: %s", group, op, v)
	}
	want := map[string][]string{}
	for _, c := range []struct {
		rank, group string
		want        []string
	}{
		{".*", ".*", []string{sample("dp0", "AllReduce", "0.5"), sample("dp1", "AllReduce", "0.5"), sample("pp0", "Send", "0.125"), sample("pp1", "Send", "0.125")}},
		{"0", ".*", []string{sample("dp0", "AllReduce", "0.5"), sample("pp0", "Send", "0.125")}},
		{"0|1", ".*", []string{sample("dp0", "AllReduce", "0.5"), sample("dp1", "AllReduce", "0.5"), sample("pp0", "Send", "0.125")}},
		{".*", "dp0", []string{sample("dp0", "AllReduce", "0.5")}},
		{"1|2", "pp0|dp0", []string{sample("dp0", "AllReduce", "0.5"), sample("pp0", "Send", "0.125")}},
	} {
		q := panelExpr(t, "training-overview.json", "Collective time per step by group and op", "",
			map[string]string{"datasource": "prometheus", "Hostname": "h", "rank": c.rank, "group": c.group})
		want[q] = c.want
	}
	evalAt(t, series, want)
}
