package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/importer"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// TestImportTwoHosts imports one run's trace as two hosts would have
// written it: a pp=2 × dp=2 run of the built-in trainer split into ranks
// 0 and 1 (one file) and ranks 2 and 3 (another, whose clock runs 4.321 ms
// ahead). The data-parallel groups, {0, 2} and {1, 3}, cross the hosts,
// and no collective joins 0 and 1: only because a file's ranks share a
// clock can ranks 1 and 3 be aligned at all. The import finds the offset
// within the collectives' own spread of departures, and its analysis is
// the one-file import's.
func TestImportTwoHosts(t *testing.T) {
	dir := t.TempDir()
	whole, p := trainedTrace(t, dir, "-dp", "2", "-steps", "12")

	// The spread of departures at one collective, on the run's one clock:
	// what no alignment can resolve below.
	var jitter time.Duration
	n := 0
	for _, st := range analysis.Analyze(p.Records) {
		for _, c := range st.Collectives {
			lo, hi := c.Members[0].Leave, c.Members[0].Leave
			for _, m := range c.Members {
				lo, hi = min(lo, m.Leave), max(hi, m.Leave)
			}
			jitter = max(jitter, hi-lo)
			n++
		}
	}
	if n < analysis.MinClockSamples {
		t.Fatalf("%d collectives in the trace, want at least %d", n, analysis.MinClockSamples)
	}

	const skewUS = 4321.0
	hostA, hostB := filepath.Join(dir, "hostA.json"), filepath.Join(dir, "hostB.json")
	splitTrace(t, whole, map[int]string{0: hostA, 1: hostA, 2: hostB, 3: hostB}, map[string]float64{hostB: skewUS})

	one := filepath.Join(dir, "one")
	if code, stdout, stderr := runCmd(t, "import", "-out", one, whole); code != exitOK {
		t.Fatalf("import of the whole trace: exit %d\n%s\n%s", code, stdout, stderr)
	}
	two := filepath.Join(dir, "two")
	code, stdout, stderr := runCmd(t, "import", "-out", two, hostA, hostB)
	if code != exitOK {
		t.Fatalf("import of two hosts: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "hostA.json: trainscope trace, ranks 0, 1,") || !strings.Contains(stdout, ", the reference clock\n") {
		t.Errorf("hostA's line:\n%s", stdout)
	}
	m := regexp.MustCompile(`hostB\.json: trainscope trace, ranks 2, 3, \d+ ranges, clock ([+-][0-9.]+) ms against \S*hostA\.json's \(from (\d+) collectives`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no clock line for hostB:\n%s", stdout)
	}
	got, _ := strconv.ParseFloat(m[1], 64)
	if e := time.Duration((got*1000 - skewUS) * float64(time.Microsecond)).Abs(); e > jitter+time.Microsecond {
		t.Errorf("hostB's clock %+.3f ms, injected %+.3f ms: off by %v, more than the departures' spread %v", got, skewUS/1000, e, jitter)
	}
	t.Logf("offset %s ms from %s collectives against %.3f injected; departures spread %v", m[1], m[2], skewUS/1000, jitter)

	want, gotReport := onlyRunReport(t, one), onlyRunReport(t, two)
	if c := regexp.MustCompile(`(\d+) of (\d+) steps complete`).FindStringSubmatch(gotReport); c == nil || c[1] != c[2] || c[1] == "0" {
		t.Errorf("two-host report: not every step complete:\n%s", gotReport)
	}
	// The report gives the offset the import applied, one per host.
	want2 := fmt.Sprintf("clocks aligned on the run's collective departures; offsets by rank: 0 +0.000 ms 1 +0.000 ms 2 %s ms 3 %s ms;", m[1], m[1])
	if !strings.Contains(gotReport, want2) {
		t.Errorf("two-host report lacks %q", want2)
	}
	if strings.Contains(gotReport, "clock alignment:") {
		t.Errorf("two-host report has a clock problem:\n%s", gotReport)
	}
	// Per rank, the waiting at collectives and the waiting caused, per
	// step: as on one clock, within the alignment's error.
	for _, rank := range []string{"0", "1", "2", "3"} {
		w, g := analysisRow(t, want, rank), analysisRow(t, gotReport, rank)
		for _, col := range []int{6, 7} { // Waited/step(ms), Caused/step(ms)
			a, _ := strconv.ParseFloat(w[col], 64)
			b, _ := strconv.ParseFloat(g[col], 64)
			if d := time.Duration((a - b) * float64(time.Millisecond)).Abs(); d > 2*jitter+2*time.Microsecond {
				t.Errorf("rank %s column %d: %v on one clock, %v from two hosts", rank, col, w[col], g[col])
			}
		}
	}
}

// analysisRow is rank's row of the pipeline analysis's rank table.
func analysisRow(t *testing.T, report, rank string) []string {
	t.Helper()
	_, sec, ok := strings.Cut(report, "  Rank  Stage  Steps  Busy %  Comm/step(ms)  Overlap %  Waited/step(ms)  Caused/step(ms)  Straggler score\n")
	if !ok {
		t.Fatalf("no rank table in\n%s", report)
	}
	for _, line := range strings.Split(sec, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			break
		}
		if f[0] == rank {
			return f
		}
	}
	t.Fatalf("no row for rank %s in\n%s", rank, sec)
	return nil
}

// splitTrace writes trainscope trace path's events into one file per
// host (files: by rank), each moved by its host's clock skew (µs).
func splitTrace(t *testing.T, path string, files map[int]string, skew map[string]float64) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var trace map[string]any
	if err := json.Unmarshal(raw, &trace); err != nil {
		t.Fatal(err)
	}
	events, _ := trace["traceEvents"].([]any)
	// Processes are named "rank N (device)".
	rankOf := map[float64]int{}
	for _, e := range events {
		ev := e.(map[string]any)
		if ev["ph"] == "M" && ev["name"] == "process_name" {
			name, _ := ev["args"].(map[string]any)["name"].(string)
			var r int
			if _, err := fmt.Sscanf(name, "rank %d", &r); err != nil {
				t.Fatalf("process name %q", name)
			}
			rankOf[ev["pid"].(float64)] = r
		}
	}
	out := map[string][]any{}
	for _, e := range events {
		ev := e.(map[string]any)
		pid, ok := ev["pid"].(float64)
		r, known := rankOf[pid]
		if !ok || !known {
			t.Fatalf("event without a rank's process: %v", ev)
		}
		file := files[r]
		if ts, ok := ev["ts"].(float64); ok {
			ev["ts"] = ts + skew[file]
		}
		out[file] = append(out[file], ev)
	}
	for file, evs := range out {
		part := map[string]any{}
		for k, v := range trace {
			part[k] = v
		}
		part["traceEvents"] = evs
		b, err := json.Marshal(part)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImportTwoHostsPipelineOnly: a pp=2 run with no data parallelism has
// no collective; split into its two stages' hosts (rank 1's clock 1.5 ms
// behind), the import aligns them on the activations and gradients they
// exchange, within how far apart a send and its receive leave.
func TestImportTwoHostsPipelineOnly(t *testing.T) {
	dir := t.TempDir()
	whole, p := trainedTrace(t, dir, "-steps", "8")
	// Each send with its receive, in each end's order of issue: how far
	// apart their ends are on the run's one clock.
	type key struct {
		group    string
		from, to int32
	}
	sends, recvs := map[key][]*profiler.Record{}, map[key][]*profiler.Record{}
	for i := range p.Records {
		r := &p.Records[i]
		c := r.Collective
		switch {
		case r.Kind != profiler.KindP2P:
		case c.Op == "Send":
			sends[key{c.Group, c.GroupRank, c.Peer}] = append(sends[key{c.Group, c.GroupRank, c.Peer}], r)
		case c.Op == "Recv":
			recvs[key{c.Group, c.Peer, c.GroupRank}] = append(recvs[key{c.Group, c.Peer, c.GroupRank}], r)
		}
	}
	var spread time.Duration
	pairs := 0
	for k, ss := range sends {
		rs := recvs[k]
		for i := range min(len(ss), len(rs)) {
			spread = max(spread, (ss[i].DeviceEnd - rs[i].DeviceEnd).Abs())
			pairs++
		}
	}
	if pairs < analysis.MinClockSamples {
		t.Fatalf("%d sends matched with receives, want at least %d", pairs, analysis.MinClockSamples)
	}
	const skewUS = -1500.0
	hostA, hostB := filepath.Join(dir, "stage0.json"), filepath.Join(dir, "stage1.json")
	splitTrace(t, whole, map[int]string{0: hostA, 1: hostB}, map[string]float64{hostB: skewUS})
	code, stdout, stderr := runCmd(t, "import", "-out", filepath.Join(dir, "two"), hostA, hostB)
	if code != exitOK {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`stage1\.json: trainscope trace, rank 1, \d+ ranges, clock ([+-][0-9.]+) ms against \S*stage0\.json's \(from (\d+) sends matched with their receives: no collective crossed`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no clock line for stage1:\n%s", stdout)
	}
	got, _ := strconv.ParseFloat(m[1], 64)
	if e := time.Duration((got*1000 - skewUS) * float64(time.Microsecond)).Abs(); e > spread+time.Microsecond {
		t.Errorf("stage 1's clock %+.3f ms, injected %+.3f ms: off by %v, more than the pairs' spread %v", got, skewUS/1000, e, spread)
	}
	t.Logf("offset %s ms from %s pairs against %.3f injected; pairs' spread %v", m[1], m[2], skewUS/1000, spread)
	report := onlyRunReport(t, filepath.Join(dir, "two"))
	if c := regexp.MustCompile(`(\d+) of (\d+) steps complete`).FindStringSubmatch(report); c == nil || c[1] != c[2] || c[1] == "0" {
		t.Errorf("not every step complete (%v):\n%s", c, report)
	}
	if want := "rank 1 on sends and receives, no collective joining its clock to the others'"; !strings.Contains(report, want) {
		t.Errorf("report lacks %q:\n%s", want, report)
	}
	if strings.Contains(report, "clock alignment:") {
		t.Errorf("report has a clock problem:\n%s", report)
	}
}

// trainedTrace runs the built-in trainer on the CPU (small sizes, args
// added) into dir/run and returns its trace.json's path and records.
func trainedTrace(t *testing.T, dir string, args ...string) (string, *importer.Profile) {
	t.Helper()
	code, stdout, stderr := runCmd(t, append([]string{"-out", filepath.Join(dir, "run"), "-metrics-addr", "off", "-backend", "cpu",
		"-layers", "4", "-width", "16", "-microbatch-size", "4", "-microbatches", "4"}, args...)...)
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	runs := runDirs(t, filepath.Join(dir, "run"))
	if len(runs) != 1 {
		t.Fatalf("run directories %v", runs)
	}
	whole := filepath.Join(runs[0], "trace.json")
	f, err := os.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := importer.Load(whole, f)
	if err != nil {
		t.Fatal(err)
	}
	return whole, p
}
