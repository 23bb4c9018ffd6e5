package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// closedPipe returns the write end of a pipe whose read end is closed.
func closedPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close() })
	return w
}

func TestOutputFileDropsAfterTheReaderHasGone(t *testing.T) {
	// The pipe is not stdout or stderr, so the write fails with EPIPE
	// without the signal that would end the test binary.
	gone := 0
	o := &outputFile{f: closedPipe(t), gone: func() { gone++ }}
	for i := range 3 {
		if n, err := o.Write([]byte("step 1\n")); n != 7 || err != nil {
			t.Fatalf("write %d: %d, %v; want 7 bytes taken and no error", i, n, err)
		}
	}
	if gone != 1 {
		t.Errorf("gone called %d times, want once", gone)
	}
	if fileOf(o) == nil || childOutput(o) != io.Writer(o.f) {
		t.Errorf("the file behind the writer is not what a wrapped command gets")
	}
	// Any other failure is the caller's to see.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	o = &outputFile{f: f, gone: func() { t.Error("gone called for a closed file") }}
	if _, err := o.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write to a closed file: %v, want os.ErrClosed", err)
	}
}

func TestReaderGoneStopsOnlyTraining(t *testing.T) {
	in := newInterrupt(context.Background())
	in.readerGone()
	if !in.stopped() || in.exitCode() != 141 {
		t.Fatalf("training: stopped %v, exit %d; want stopped, 141", in.stopped(), in.exitCode())
	}
	if in.abort.Err() != nil {
		t.Error("the first SIGPIPE cut the waits short; it should stop training only")
	}
	in.readerGone() // stderr too: `profile-run 2>&1 | head`
	if in.abort.Err() != nil {
		t.Error("stdout and stderr closing together cut the waits short, as a second signal")
	}

	in = newInterrupt(context.Background())
	in.wrapping()
	in.readerGone()
	if in.stop.Err() != nil || in.signal() != nil {
		t.Error("a wrapped run stopped because its own output closed")
	}

	in = newInterrupt(context.Background())
	in.trainingDone()
	in.readerGone()
	if in.abort.Err() != nil || in.signal() != nil {
		t.Error("writing the outputs was cut short because stdout closed")
	}
}

// `profile-run | head -1`: the run stops at the next action once its
// stdout is closed, writes everything it recorded, and exits 141.
func TestStdoutClosedMidRun(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-out", dir, "-metrics-addr", "off", "-steps", "100000", "-layers", "4", "-width", "16", "-microbatch-size", "4")
	cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	first, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "profile-run: training on") {
		t.Fatalf("first line %q, %v", first, err)
	}
	out.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after its stdout closed; stderr:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 141 {
		t.Fatalf("exit %d (%v), want 141; stderr:\n%s", code, cmd.ProcessState, stderr.String())
	}
	if !strings.Contains(stderr.String(), "the reader of profile-run's output has gone (SIGPIPE): stopping training") {
		t.Errorf("stderr does not say why training stopped:\n%s", stderr.String())
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(runs) != 1 {
		t.Fatalf("%d run directories", len(runs))
	}
	b, err := os.ReadFile(filepath.Join(runs[0], "report.txt"))
	if err != nil || !strings.HasPrefix(string(b), "partial run: interrupted by SIGPIPE at step ") {
		t.Errorf("report.txt (%v) does not start with the partial-run line:\n%.200s", err, b)
	}
	f, err := os.Open(filepath.Join(runs[0], "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := profile.Parse(f); err != nil || len(p.Sample) == 0 {
		t.Errorf("profile.pb.gz: %v", err)
	}
	b, err = os.ReadFile(filepath.Join(runs[0], "trace.json"))
	var tr struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err != nil || json.Unmarshal(b, &tr) != nil || len(tr.TraceEvents) == 0 {
		t.Errorf("trace.json: %v, %d events", err, len(tr.TraceEvents))
	}
}

// A wrapped command writes to profile-run's own stdout and stderr, not to
// pipes profile-run would copy from: its terminal stays a terminal.
func TestWrappedCommandGetsTheFiles(t *testing.T) {
	noPlugin(t)
	if _, err := os.Stat("/proc/self/fd/1"); err != nil {
		t.Skipf("skipped: no /proc to read the command's descriptors from: %v", err)
	}
	outPath := filepath.Join(t.TempDir(), "stdout")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-out", t.TempDir(), "-metrics-addr", "off", "--",
		"sh", "-c", `echo "fd1=$(readlink /proc/$$/fd/1)"; echo "fd2=$(readlink /proc/$$/fd/2)" >&2`)
	cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range []string{"fd1=", "fd2="} {
		if !strings.Contains(string(b), fd+outPath+"\n") {
			t.Errorf("the command's %s is not profile-run's own file %s:\n%s", strings.TrimSuffix(fd, "="), outPath, b)
		}
	}
}
