package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// On a terminal the progress is one status line updated in place, the
// loss lines print above it as steps finish, and the final screen holds
// the summary. The test runs profile-run (this test binary as main) in a
// pseudo-terminal and reads everything it draws.
func TestProgressLineOnATerminal(t *testing.T) {
	// The run must last several of the status line's 200 ms redraws
	// however fast the machine: 40 steps of about 4 ms once finished
	// within one redraw, and the line was drawn once. A delay of 3 ms per
	// microbatch on rank 0 (8 a step) makes each step at least 24 ms.
	const steps = 40
	cmd := exec.Command(os.Args[0], "-out", t.TempDir(), "-metrics-addr", "off", "-steps", strconv.Itoa(steps), "-width", "32",
		"-straggler-delay", "3ms", "-straggler-rank", "0", "-report", "off", "-pprof", "off", "-trace", "off")
	cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer tty.Close()
	var screen bytes.Buffer
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(&screen, tty)
		read <- err
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("profile-run: %v\n%s", err, screen.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("profile-run did not finish in 2 minutes")
	}
	// The reader ends with EIO once the terminal's other side is gone.
	select {
	case err := <-read:
		var errno syscall.Errno
		if err != nil && !(errors.As(err, &errno) && errno == syscall.EIO) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("terminal output did not end")
	}
	out := screen.String()

	// Drawn several times, each time over the last: cursor movements, and
	// the step counter advancing.
	renders := regexp.MustCompile(`step (\d+)/`+strconv.Itoa(steps)+` `).FindAllStringSubmatch(out, -1)
	seen := map[string]bool{}
	for _, m := range renders {
		seen[m[1]] = true
	}
	if len(seen) < 2 {
		t.Errorf("status line drawn with %d distinct step counts (%v); want it updated as steps finish:\n%q", len(seen), seen, out)
	}
	if !strings.Contains(out, "\x1b[") {
		t.Errorf("no cursor control: the status line is not redrawn in place:\n%q", out)
	}
	// The collector's rate shows once ranges have been collected.
	if !regexp.MustCompile(`  [1-9][0-9.]*k? ranges/s`).MatchString(out) {
		t.Errorf("the status line never shows a collection rate above zero:\n%q", out)
	}
	for _, w := range []string{"loss ", "samples/s", "ranges/s", "drops 0", "ETA"} {
		if !strings.Contains(out, w) {
			t.Errorf("status line lacks %q", w)
		}
	}
	// Every loss line, each once, and the summary after the last drawing.
	for i := range steps {
		if n := strings.Count(out, "step "+strconv.Itoa(i)+": loss "); n != 1 {
			t.Errorf("loss line of step %d printed %d times", i, n)
		}
	}
	total := "/" + strconv.Itoa(steps) + " "
	last := strings.LastIndex(out, total)
	if sum := strings.LastIndex(out, "where the steps went"); sum < last {
		t.Errorf("the summary is not on the final screen (summary at %d, last status drawing at %d)", sum, last)
	}
	if full := "step " + strconv.Itoa(steps) + total; !strings.Contains(out, full) {
		t.Errorf("the status line never reached %q", full)
	}
}

// -progress bar off a terminal cannot draw its status line; it falls back
// to what auto does there, says so once, and every step's loss line still
// prints on stdout.
func TestProgressBarOffATerminal(t *testing.T) {
	code, stdout, stderr := runCmd(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-progress", "bar"}, small...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, w := range []string{"step 0: loss ", "step 1: loss "} {
		if n := strings.Count(stdout, w); n != 1 {
			t.Errorf("%q printed %d times on stdout, want once:\n%s", w, n, stdout)
		}
	}
	if n := strings.Count(stderr, "-progress bar: stdout is not a terminal"); n != 1 {
		t.Errorf("the fallback is said %d times on stderr, want once:\n%s", n, stderr)
	}
	// The log line of -progress log comes instead, at least for the last step.
	if !strings.Contains(stderr, "training") || !strings.Contains(stderr, `"step": 1, "steps_done": 2`) {
		t.Errorf("no progress log line on stderr:\n%s", stderr)
	}
}

// TestProgressSteps: the wrapped run's progress line counts the steps of
// the furthest rank and their mean over every rank's steps, and says
// nothing before the first.
func TestProgressSteps(t *testing.T) {
	if got := progressSteps(nil); got != "" {
		t.Errorf("no steps: %q, want nothing", got)
	}
	ranks := []profiler.StepStats{
		{RankSteps: profiler.RankSteps{Rank: 0, Steps: 3, Wall: 30 * time.Millisecond}},
		{RankSteps: profiler.RankSteps{Rank: 1, Steps: 2, Wall: 30 * time.Millisecond}},
	}
	if got, want := progressSteps(ranks), ", 3 steps (mean 12.0 ms)"; got != want {
		t.Errorf("progressSteps = %q, want %q (60 ms over 5 steps)", got, want)
	}
}

// A learning rate that makes the loss NaN is warned about once, naming
// the step and the rate; training goes on to the last step.
func TestDivergedLossWarnsOnce(t *testing.T) {
	code, stdout, stderr := runCmd(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-progress", "off", "-quiet"}, append(small, "-lr", "1e308", "-steps", "4")...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "step 3: loss NaN") {
		t.Fatalf("the loss did not become NaN, or training stopped:\n%s", stdout)
	}
	if n := strings.Count(stderr, "the loss is NaN: training diverged (-lr 1e+308"); n != 1 {
		t.Errorf("the divergence is warned %d times, want once:\n%s", n, stderr)
	}
	code, _, stderr = runCmd(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-progress", "off", "-quiet"}, small...)...)
	if code != exitOK || strings.Contains(stderr, "diverged") {
		t.Errorf("a run that converges: exit %d, stderr:\n%s", code, stderr)
	}
}

// The progress log line names the step its loss and step time are of as
// the step lines, the report and the trace number it (from 0), and counts
// the steps done beside it.
func TestProgressLogNamesTheStepOfItsLoss(t *testing.T) {
	code, stdout, stderr := runCmd(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-progress", "log", "-progress-every", "1h", "-log-format", "json"}, append(small, "-steps", "3")...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var line struct {
		Msg       string  `json:"msg"`
		Step      *int    `json:"step"`
		StepsDone int     `json:"steps_done"`
		Steps     int     `json:"steps"`
		Loss      float64 `json:"loss"`
	}
	found := false
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, `"msg":"training"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			found = true // the last one: the run's end
		}
	}
	if !found {
		t.Fatalf("no progress log line:\n%s", stderr)
	}
	if line.Step == nil {
		t.Fatalf("the progress line has no step:\n%s", stderr)
	}
	if *line.Step != 2 || line.StepsDone != 3 || line.Steps != 3 {
		t.Fatalf("last progress line: step %d, steps_done %d, steps %d; want step 2 (the last of 0–2), 3 done of 3", *line.Step, line.StepsDone, line.Steps)
	}
	want := regexp.MustCompile(`(?m)^step 2: loss ([0-9.]+),`).FindStringSubmatch(stdout)
	if want == nil {
		t.Fatalf("no loss line for step 2:\n%s", stdout)
	}
	if got := strconv.FormatFloat(line.Loss, 'f', 6, 64); got != want[1] {
		t.Errorf("the log line's loss %s is not step 2's (%s):\n%s", got, want[1], stdout)
	}
}

// Ranges dropped while recording are warned about once, at the first
// step that sees any, with the count and the step.
func TestDroppedRangesWarnOnce(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var drops uint64
	pr := newProgress("off", io.Discard, zap.New(core), pipeline.Config{Steps: 4}, time.Hour, false, func() liveCounts { return liveCounts{drops: drops} })
	step := func(n int) { pr.stepDone(pipeline.StepResult{Step: n, Loss: 1, Wall: time.Millisecond}) }
	step(0)
	if n := logs.FilterLevelExact(zap.WarnLevel).Len(); n != 0 {
		t.Fatalf("%d warnings before any drop", n)
	}
	drops = 5
	step(1)
	drops = 9
	step(2)
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want one: %v", len(warns), warns)
	}
	if msg := warns[0].Message; !strings.HasPrefix(msg, "ranges are being dropped while recording (5 by step 1)") {
		t.Errorf("warning %q does not give the drops and the step", msg)
	}
}
