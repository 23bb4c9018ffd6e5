package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSummaryJSON: a CPU run writes summary.json beside report.txt, and
// its figures are report.txt's: each rank's step times, each stage's
// bubble per step, the forward ranges counted over both ranks' tables,
// the records the summary line counts, the run directory's name as the
// run id. With -report off no summary.json is written.
func TestSummaryJSON(t *testing.T) {
	t.Setenv("NCCL_ALGO", "Ring")
	t.Setenv("TRAINSCOPE_TEST_TOKEN", "not-to-be-written")
	setStartEnviron(t)
	stdout, dir := trainOnCPU(t, "-steps", "4")
	text, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "summary: "+filepath.Join(dir, "summary.json")) {
		t.Errorf("stdout does not name summary.json:\n%s", stdout)
	}
	var doc struct {
		Schema  string   `json:"schema"`
		RunID   string   `json:"run_id"`
		Command []string `json:"command"`
		Trainer struct {
			Placement      string
			PP, VPP, Steps int
		} `json:"trainer"`
		Records struct {
			Collected int `json:"collected"`
		} `json:"records"`
		RawSteps []map[string]float64 `json:"steps"`
		Pipeline struct {
			Bubbles []struct {
				Stage   int     `json:"stage"`
				Bubble  float64 `json:"bubble_s"`
				Compute float64 `json:"compute_s"`
			} `json:"bubbles"`
			SlowestStage *int `json:"slowest_stage"`
		} `json:"pipeline"`
		Ranges []struct {
			Tag, Name string
			Count     int
		} `json:"ranges"`
		Environment struct {
			ProfileRun struct{ Version, Go string } `json:"profile_run"`
			Host       *struct {
				Name string
				CPUs int
			} `json:"host"`
			Backend string
			Devices []struct {
				Index       int
				MemoryBytes int64 `json:"memory_bytes"`
				HostMemory  bool  `json:"host_memory"`
			}
			Libraries []any
			Variables map[string]string
		} `json:"environment"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if doc.Schema != "trainscope.summary/v1" || doc.RunID != filepath.Base(dir) {
		t.Errorf("schema %q, run id %q; want trainscope.summary/v1, %q", doc.Schema, doc.RunID, filepath.Base(dir))
	}
	// The job: its command line as given, and the trainer's first line.
	first := regexp.MustCompile(`training on (.+): pp=(\d+) vpp=(\d+) `).FindStringSubmatch(stdout)
	args := append(cpuRunFlags(filepath.Dir(dir)), "-steps", "4")
	if !slices.Equal(doc.Command, args) || first == nil || doc.Trainer.Placement != first[1] ||
		strconv.Itoa(doc.Trainer.PP) != first[2] || strconv.Itoa(doc.Trainer.VPP) != first[3] || doc.Trainer.Steps != 4 {
		t.Errorf("command %q, trainer %+v; want %q and the first line's %q", doc.Command, doc.Trainer, args, first)
	}
	if m := regexp.MustCompile(`report: (\d+) records`).FindStringSubmatch(stdout); m == nil || m[1] != strconv.Itoa(doc.Records.Collected) {
		t.Errorf("records collected %d, the summary line says %q", doc.Records.Collected, m)
	}
	// Step times: report.txt's table in ms, three decimals.
	times := rankRows(t, string(text), "=== step times", "  Rank  Steps")
	if len(times) != 2 || len(doc.RawSteps) != 2 {
		t.Fatalf("%d ranks' step times in report.txt, %d in summary.json", len(times), len(doc.RawSteps))
	}
	for _, s := range doc.RawSteps {
		row := times[int(s["rank"])]
		for i, k := range []string{"mean_s", "min_s", "p50_s", "p90_s", "p99_s", "max_s"} {
			if got := fmt.Sprintf("%.3f", 1000*s[k]); row == nil || got != row[2+i] {
				t.Errorf("rank %v %s: %s ms in summary.json, report.txt's row %v", s["rank"], k, got, row)
			}
		}
	}
	// Bubbles per stage.
	stages := rankRows(t, string(text), "=== pipeline analysis", "  Stage  Ranks×steps")
	if len(doc.Pipeline.Bubbles) != 2 || len(stages) != 2 {
		t.Fatalf("%d stages' bubbles in summary.json, %d in report.txt", len(doc.Pipeline.Bubbles), len(stages))
	}
	for _, b := range doc.Pipeline.Bubbles {
		if got := fmt.Sprintf("%.3f", 1000*b.Bubble); stages[b.Stage] == nil || got != stages[b.Stage][3] {
			t.Errorf("stage %d bubble %s ms per step in summary.json, report.txt's row %v", b.Stage, got, stages[b.Stage])
		}
		if got := fmt.Sprintf("%.3f", 1000*b.Compute); stages[b.Stage] == nil || got != stages[b.Stage][2] {
			t.Errorf("stage %d computation %s ms per step in summary.json, report.txt's row %v", b.Stage, got, stages[b.Stage])
		}
	}
	// The stage the others wait for, as the stage balance line has it.
	balance := regexp.MustCompile(`stage balance \(computation per step within the span\): stage (\d+) the most.* — (a pipeline goes|within)`).FindStringSubmatch(string(text))
	switch {
	case balance == nil:
		t.Errorf("report.txt has no stage balance line")
	case balance[2] == "within" && doc.Pipeline.SlowestStage != nil:
		t.Errorf("slowest stage %d in summary.json; report.txt: %q", *doc.Pipeline.SlowestStage, balance[0])
	case balance[2] != "within" && (doc.Pipeline.SlowestStage == nil || strconv.Itoa(*doc.Pipeline.SlowestStage) != balance[1]):
		t.Errorf("slowest stage %v in summary.json; report.txt: %q", doc.Pipeline.SlowestStage, balance[0])
	}
	// The forward ranges, over both ranks' tables.
	forward := 0
	for _, m := range regexp.MustCompile(`(?m)^forward +(\d+) `).FindAllStringSubmatch(string(text), -1) {
		n, _ := strconv.Atoi(m[1])
		forward += n
	}
	found := false
	for _, r := range doc.Ranges {
		if r.Name == "forward" {
			found = true
			if r.Count != forward || r.Tag != "all steps" {
				t.Errorf("forward: %d in tag %q in summary.json, %d over report.txt's tables", r.Count, r.Tag, forward)
			}
		}
	}
	if !found || forward == 0 {
		t.Errorf("forward: in summary.json %v, %d in report.txt", found, forward)
	}

	// What it ran on: this test binary's build, this host, and the
	// placement's two host devices, whose memory is the host's.
	env := doc.Environment
	hostname, _ := os.Hostname()
	if env.ProfileRun.Version != "(devel)" || !strings.HasPrefix(env.ProfileRun.Go, "go1.") || env.Host == nil ||
		env.Host.Name != hostname || env.Host.CPUs < 1 || env.Backend != "cpu" || len(env.Libraries) != 0 {
		t.Errorf("environment %+v (host %+v); want (devel), a Go toolchain, host %q, the cpu backend and no libraries", env, env.Host, hostname)
	}
	if !strings.HasPrefix(doc.Trainer.Placement, fmt.Sprintf("%d ranks on %d cpu devices", len(env.Devices), len(env.Devices))) || len(env.Devices) != 2 {
		t.Errorf("devices %+v for placement %q", env.Devices, doc.Trainer.Placement)
	}
	for i, d := range env.Devices {
		if d.Index != i || d.MemoryBytes <= 0 || !d.HostMemory {
			t.Errorf("device %+v: want index %d, the host's memory", d, i)
		}
	}
	if env.Variables["NCCL_ALGO"] != "Ring" || bytes.Contains(raw, []byte("not-to-be-written")) {
		t.Errorf("variables %v: want NCCL_ALGO=Ring, and no variable named like a credential", env.Variables)
	}

	stdout, dir = trainOnCPU(t, "-steps", "2", "-report", "off")
	if fileExists(filepath.Join(dir, "summary.json")) || strings.Contains(stdout, "summary.json") {
		t.Errorf("-report off wrote or named summary.json in %s", dir)
	}
}
