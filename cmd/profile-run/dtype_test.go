package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// runMain runs this test binary as profile-run with args and returns its
// exit code and output.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// Under the race detector a process sleeps a second before it exits,
	// unless told not to.
	cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("profile-run %q did not finish in 2 minutes; stderr %q", args, errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// lossLines are the "step N: loss L" parts of a run's output.
func lossLines(stdout string) []string {
	return regexp.MustCompile(`step \d+: loss \S+`).FindAllString(stdout, -1)
}

// On the cpu backend, which computes in float32 only, -dtype bf16 is not a
// mistake: profile-run warns, says float32 where it describes the run, and
// trains exactly as it does without the flag.
func TestDtypeBF16OnCPUWarnsAndTrains(t *testing.T) {
	args := append([]string{"-backend", "cpu", "-metrics-addr", "off", "-report", "off", "-pprof", "off", "-trace", "off", "-call-log-size", "0", "-progress", "off"}, small...)
	code, stdout, stderr := runMain(t, append([]string{"-out", t.TempDir(), "-dtype", "bf16"}, args...)...)
	if code != exitOK {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitOK, stderr)
	}
	const reason = "the cpu backend computes in float32; -dtype bf16 not available there, using float32"
	var warnings []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "WARN") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], reason) {
		t.Errorf("warnings %q, want one saying %q; stderr %q", warnings, reason, stderr)
	}
	if !strings.Contains(stdout, "training on ") || !strings.Contains(stdout, "precision float32") || strings.Contains(stdout, "bf16") {
		t.Errorf("the run's description does not say it trains in float32:\n%s", stdout)
	}
	got := lossLines(stdout)
	if len(got) != 2 {
		t.Fatalf("%d loss lines, want one per step (2):\n%s", len(got), stdout)
	}
	// The same run with no -dtype: the same losses, to the last digit.
	code, want, stderr := runMain(t, append([]string{"-out", t.TempDir()}, args...)...)
	if code != exitOK {
		t.Fatalf("float32 run: exit %d; stderr %q", code, stderr)
	}
	if strings.Contains(stderr, "WARN") {
		t.Errorf("float32 run warned: %q", stderr)
	}
	if !slices.Equal(got, lossLines(want)) {
		t.Errorf("losses with -dtype bf16 %q, without %q", got, lossLines(want))
	}
}

// An unknown -dtype is a usage error: exit 2 and one line that names the
// accepted values, before anything runs.
func TestDtypeUnknownExitsTwo(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runMain(t, "-out", out, "-metrics-addr", "off", "-dtype", "nonsense")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr)
	}
	want := `profile-run: -dtype: unknown precision "nonsense" (one of: float32, fp32, tf32, bf16) (see profile-run -h)` + "\n"
	if stderr != want {
		t.Errorf("stderr\n%q, want\n%q", stderr, want)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	if entries, err := os.ReadDir(out); err != nil || len(entries) != 0 {
		t.Errorf("output directory holds %d entries (%v), want none", len(entries), err)
	}
}

// Every accepted spelling parses, in any case; the float32 ones warn about
// nothing on the cpu backend.
func TestDtypeSpellings(t *testing.T) {
	for _, v := range []string{"float32", "FP32", "tf32", "BF16"} {
		o, err := parseFlags([]string{"-dtype", v}, &bytes.Buffer{})
		if err != nil {
			t.Errorf("-dtype %s: %v", v, err)
			continue
		}
		if got := o.train.Precision.String(); !strings.EqualFold(got, v) && !(got == "float32" && strings.EqualFold(v, "fp32")) {
			t.Errorf("-dtype %s parsed as %s", v, got)
		}
	}
	code, stdout, stderr := runCmd(t, append([]string{"-out", t.TempDir(), "-backend", "cpu", "-dtype", "fp32", "-metrics-addr", "off", "-profile", "off", "-progress", "off"}, small...)...)
	if code != exitOK || strings.Contains(stderr, "WARN") || !strings.Contains(stdout, "precision float32") {
		t.Errorf("-dtype fp32: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
}
