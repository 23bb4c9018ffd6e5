package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCompareGatesASlowerRun: two CPU runs of one job, the second with
// 20 ms of device time added to each of its 32 actions a rank and step
// (-action-delay), so that no step of it is shorter than 640 ms (one
// of the first takes about 30 ms on an idle machine, and stayed under
// 250 ms on a loaded 2-core machine running the race detector, where 5
// ms an action once left the slower run's p50 under 1.5× the other's). compare sets the
// slowest rank's p50 step time of each run's summary.json beside the
// other, names the setting that differs, and -fail-above fails the
// slower run (exit 3) and passes the faster one against it (exit 0).
func TestCompareGatesASlowerRun(t *testing.T) {
	job := []string{"-steps", "6", "-layers", "8", "-width", "32"}
	_, base := trainOnCPU(t, job...)
	_, slow := trainOnCPU(t, append(job, "-action-delay", "20ms")...)
	p50 := func(dir string) float64 {
		raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Steps []struct {
				P50 float64 `json:"p50_s"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		m := 0.0
		for _, s := range d.Steps {
			m = max(m, s.P50)
		}
		return m
	}
	b, s := p50(base), p50(slow)
	// A rank's stream holds still 32 × 20 ms a step: no step is shorter.
	if s < 0.640 || s < 1.5*b {
		t.Fatalf("p50 %v s with 640 ms of delay a rank and step, against %v s without: the delay did not show", s, b)
	}

	code, stdout, stderr := runCmd(t, "compare", "-fail-above", "10%", base, slow)
	if code != exitSlower {
		t.Fatalf("slower run: exit %d; want %d\n%s\n%s", code, exitSlower, stdout, stderr)
	}
	line := regexp.MustCompile(`(?m)^step time p50, slowest rank +(\S+ \S+) +(\S+ \S+) +\+(\S+) %$`).FindStringSubmatch(stdout)
	if line == nil {
		t.Fatalf("no p50 line:\n%s", stdout)
	}
	for i, v := range []float64{b, s} {
		if got := parseSeconds(t, line[i+1]); got < v*0.99 || got > v*1.01 {
			t.Errorf("p50 shown %q; summary.json's %v s", line[i+1], v)
		}
	}
	for _, w := range []string{
		"the jobs differ: -action-delay 0s → 20ms",
		fmt.Sprintf("base  %s  (pp 2 × vpp 2 × dp 1, 8 microbatches of 16 rows, 8 layers of width 32, float32, 1f1b; 2 ranks on 2 cpu devices)", base),
		"more than the 10 % allowed by -fail-above",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, stdout)
		}
	}

	code, stdout, stderr = runCmd(t, "compare", filepath.Join(slow, "summary.json"), base, "-fail-above", "0")
	if code != exitOK || !strings.Contains(stdout, "within the 0 % allowed") {
		t.Errorf("faster run: exit %d; want 0 and within\n%s\n%s", code, stdout, stderr)
	}
}

// parseSeconds reads compare's "12.3 ms".
func parseSeconds(t *testing.T, s string) float64 {
	t.Helper()
	var v float64
	var unit string
	if _, err := fmt.Sscanf(s, "%g %s", &v, &unit); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	switch unit {
	case "s":
		return v
	case "ms":
		return v / 1e3
	case "µs":
		return v / 1e6
	}
	t.Fatalf("%q: unit %q", s, unit)
	return 0
}

// TestCompareBadInput: every mistake is one line naming the problem; a
// usage mistake exits 2, a run that cannot be read or gated 1.
func TestCompareBadInput(t *testing.T) {
	dir, empty := t.TempDir(), t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good/summary.json", `{"schema":"trainscope.summary/v1","command":[],"records":{},"steps":[{"rank":0,"steps":9,"p50_s":0.01}],"ranges":[]}`)
	stepless := write("wrapped/summary.json", `{"schema":"trainscope.summary/v1","command":["--","python","x.py"],"records":{},"steps":[],"pipeline":{"stepless":true},"ranges":[]}`)
	garbage := write("garbage.json", `{"schema": "trainscope.summary/v1", "steps": [}`)
	newer := write("newer.json", `{"schema":"trainscope.summary/v2"}`)
	write("out/20260101-000000-aaaaaa/summary.json", `{}`)
	write("out/20260102-000000-bbbbbb/summary.json", `{}`)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"compare"}, exitUsage, "compare: two runs, BASE and NEW (run directories or summary.json files), not 0 (see profile-run compare -h)"},
		{[]string{"compare", good}, exitUsage, "not 1 (" + good + ")"},
		{[]string{"compare", good, good, good}, exitUsage, "not 3"},
		{[]string{"compare", "-fail-above", "lots", good, good}, exitUsage, `"lots" is not a percentage`},
		{[]string{"compare", "-fail-above", "-5", good, good}, exitUsage, `"-5": a percentage from 0 up`},
		{[]string{"compare", "-fail", "5", good, good}, exitUsage, "did you mean -fail-above?"},
		{[]string{"compare", filepath.Join(dir, "none"), good}, exitFail, filepath.Join(dir, "none") + ": no such run directory or file"},
		{[]string{"compare", good, empty}, exitFail, filepath.Join(empty, "summary.json") + ": no such file: the run wrote no summary.json"},
		{[]string{"compare", good, garbage}, exitFail, garbage + ": not JSON at byte 47"},
		{[]string{"compare", newer, good}, exitFail, newer + `: schema "trainscope.summary/v2": written by another profile-run version; this one reads "trainscope.summary/v1"`},
		{[]string{"compare", filepath.Join(dir, "out"), good}, exitFail, "holding 2 run directories, not a run directory: name one; its latest two: profile-run compare " +
			filepath.Join(dir, "out", "20260101-000000-aaaaaa") + " " + filepath.Join(dir, "out", "20260102-000000-bbbbbb")},
		{[]string{"compare", "-fail-above", "5", good, filepath.Dir(stepless)}, exitFail, "-fail-above: new " + filepath.Dir(stepless) + ": no step times"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and one line with %q (stdout %q)", c.args, code, stderr, c.code, c.msg, stdout)
		}
	}
	// Without -fail-above, a run without steps compares: its step times
	// are unmeasured, not an error.
	if code, stdout, stderr := runCmd(t, "compare", good, filepath.Dir(stepless)); code != exitOK || !strings.Contains(stdout, "new   "+filepath.Dir(stepless)+"  (wrapped: python x.py)") {
		t.Errorf("compare with a wrapped run: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
