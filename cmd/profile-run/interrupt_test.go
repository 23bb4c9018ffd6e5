package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestMain lets the tests run this test binary as profile-run itself, to
// send it real signals.
func TestMain(m *testing.M) {
	if os.Getenv("PROFILE_RUN_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestInterruptSignals(t *testing.T) {
	// During training: the first signal stops training only, the second
	// cuts every wait.
	in := newInterrupt(context.Background())
	in.deliver(syscall.SIGTERM)
	if in.stop.Err() == nil || in.abort.Err() != nil || !in.stopped() {
		t.Fatalf("first signal: stop %v, abort %v; want stop ended only", in.stop.Err(), in.abort.Err())
	}
	in.deliver(os.Interrupt)
	if in.abort.Err() == nil {
		t.Fatal("second signal: abort not ended")
	}
	if c := in.exitCode(); c != 143 {
		t.Errorf("exit code %d, want 143 (the first signal, SIGTERM)", c)
	}
	// After training, the first signal cuts the waits at once.
	in = newInterrupt(context.Background())
	in.trainingDone()
	in.deliver(os.Interrupt)
	if in.abort.Err() == nil {
		t.Error("a signal after training does not end the waits")
	}
	if c := in.exitCode(); c != 130 {
		t.Errorf("exit code %d, want 130", c)
	}
	// No signal: a cancelled parent is not an interruption.
	ctx, cancel := context.WithCancel(context.Background())
	in = newInterrupt(ctx)
	cancel()
	if in.stopped() {
		t.Error("a cancelled parent counts as a signal")
	}
}

// lineWaiter is an io.Writer that reports when a line matching re has
// been written.
type lineWaiter struct {
	re   *regexp.Regexp
	buf  bytes.Buffer
	seen chan struct{}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.re.Match(w.buf.Bytes()) {
		select {
		case <-w.seen:
		default:
			close(w.seen)
		}
	}
	return len(p), nil
}

// SIGINT in the middle of a run: training stops at the next action
// boundary, every output (summary.json too) is written, valid and marked
// partial, and the exit status is 130.
func TestInterruptMidRunWritesPartialOutputs(t *testing.T) {
	dir := t.TempDir()
	in := newInterrupt(context.Background())
	stdout := &lineWaiter{re: regexp.MustCompile(`(?m)^step 2: loss`), seen: make(chan struct{})}
	go func() {
		select {
		case <-stdout.seen:
			in.deliver(os.Interrupt)
		case <-time.After(time.Minute):
		}
	}()
	var stderr bytes.Buffer
	args := []string{"-out", dir, "-metrics-addr", "off", "-steps", "100000", "-layers", "4", "-width", "16", "-microbatch-size", "4"}
	code := runWith(in, args, stdout, &stderr)
	if code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, stderr.String())
	}
	out := stdout.buf.String()
	m := regexp.MustCompile(`partial run: interrupted by SIGINT at step (\d+) \((\d+) of 100000 steps complete\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the summary does not say the run is partial:\n%s", out)
	}
	if strings.Contains(stderr.String(), "Timeout") || strings.Contains(stderr.String(), "gave up waiting") {
		t.Errorf("stderr speaks of timeouts, not the interruption:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted by SIGINT") {
		t.Errorf("stderr does not say interrupted:\n%s", stderr.String())
	}
	// Said at the signal, before the ranks' queued device work is done.
	if i, j := strings.Index(stderr.String(), "SIGINT: stopping training at the next pipeline action"), strings.Index(stderr.String(), "interrupted by SIGINT at step"); i < 0 || j < i {
		t.Errorf("stderr does not say at the signal that training stops:\n%s", stderr.String())
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(runs) != 1 {
		t.Fatalf("%d run directories", len(runs))
	}
	run := runs[0]
	for _, name := range []string{"report.txt", "report.rank0", "report.rank1"} {
		b, err := os.ReadFile(filepath.Join(run, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(m[0])) {
			t.Errorf("%s does not start with %q", name, m[0])
		}
	}
	f, err := os.Open(filepath.Join(run, "profile.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("profile: %v", err)
	}
	if !strings.Contains(strings.Join(p.Comments, "\n"), m[0]) || len(p.Sample) == 0 {
		t.Errorf("profile: %d samples, comments %q", len(p.Sample), p.Comments)
	}
	b, err := os.ReadFile(filepath.Join(run, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		OtherData   map[string]string `json:"otherData"`
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace.json: %v", err)
	}
	if tr.OtherData["partial"] != m[0] || len(tr.TraceEvents) == 0 {
		t.Errorf("trace: %d events, otherData %v", len(tr.TraceEvents), tr.OtherData)
	}
	b, err = os.ReadFile(filepath.Join(run, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Partial string           `json:"partial"`
		Steps   []map[string]any `json:"steps"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if sum.Partial != m[0] || len(sum.Steps) != 2 {
		t.Errorf("summary.json: partial %q, %d ranks' steps; want %q and 2", sum.Partial, len(sum.Steps), m[0])
	}
}

// process is this test binary run as profile-run.
type process struct {
	cmd    *exec.Cmd
	stderr *bufio.Reader
	mu     sync.Mutex
	stdout bytes.Buffer
	exited chan int // the exit status, once
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// startMain runs this test binary as profile-run with args.
func startMain(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(os.Args[0], args...), exited: make(chan int, 1)}
	// Under the race detector a process sleeps a second before it exits,
	// unless told not to.
	p.cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	p.cmd.Stdout = p
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	p.stderr = bufio.NewReader(pr)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		pw.Close()
		p.exited <- p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// waitLine reads r until a line contains s, or fails after a minute.
func waitLine(t *testing.T, r *bufio.Reader, s string) {
	t.Helper()
	found := make(chan error, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if strings.Contains(line, s) {
				found <- nil
				go func() { _, _ = io.Copy(io.Discard, r) }()
				return
			}
			if err != nil {
				found <- fmt.Errorf("stderr ended without %q: %w", s, err)
				return
			}
		}
	}()
	select {
	case err := <-found:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no %q on stderr within a minute", s)
	}
}

// exitWithin waits for p's exit for at most d and returns its status.
func exitWithin(t *testing.T, p *process, d time.Duration) int {
	t.Helper()
	select {
	case code := <-p.exited:
		return code
	case <-time.After(d):
		t.Fatalf("still running %v after the signal", d)
		return 0
	}
}

// SIGTERM while /metrics lingers after training ends the linger at once.
func TestSIGTERMDuringLinger(t *testing.T) {
	args := append([]string{"-out", t.TempDir(), "-metrics-addr", "127.0.0.1:0", "-metrics-linger", "1h"}, small...)
	p := startMain(t, args...)
	waitLine(t, p.stderr, "serving final metrics")
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := exitWithin(t, p, 5*time.Second)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("exited %v after SIGTERM, want within 1s", d)
	}
	// Training had finished: the run is complete, and the signal still
	// sets the status.
	if code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if !strings.Contains(p.output(), "outputs:") {
		t.Errorf("no summary:\n%s", p.output())
	}
}

// Two signals while spans are being delivered to a collector that
// accepts connections and never answers: profile-run exits within a
// second, and the summary says how many spans were not delivered.
func TestTwoSignalsDuringOTLPShutdown(t *testing.T) {
	l := silentListener(t)
	args := append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-otlp-endpoint", l.Addr().String(), "-otlp-protocol", "grpc"}, small...)
	p := startMain(t, args...)
	waitLine(t, p.stderr, "sending spans")
	// Training is short; once its last step is printed the exporter is
	// stuck on a collector that never answers.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(p.output(), "step 1: loss"); {
		if time.Now().After(deadline) {
			t.Fatalf("training did not finish: %s", p.output())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	sent := time.Now()
	_ = p.cmd.Process.Signal(os.Interrupt)
	time.Sleep(50 * time.Millisecond)
	_ = p.cmd.Process.Signal(os.Interrupt)
	code := exitWithin(t, p, 10*time.Second)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("exited %v after two signals, want within 1s", d)
	}
	if code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	m := regexp.MustCompile(`(\d+) spans delivered, (\d+) dropped, (\d+) failed`).FindStringSubmatch(p.output())
	if m == nil || m[3] == "0" && m[2] == "0" {
		t.Errorf("the summary does not count the undelivered spans:\n%s", p.output())
	}
}

// Once a signal has cut the waits short, the process ends within the
// grace period even if something keeps waiting (a backend call that no
// signal reaches); an ending that was not a signal leaves it alone.
func TestExitAfterAbort(t *testing.T) {
	in := newInterrupt(context.Background())
	exited := make(chan int, 1)
	go exitAfterAbort(in, 10*time.Millisecond, time.Second, func(code int) { exited <- code })
	in.deliver(syscall.SIGTERM) // during training: stop only
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) after one signal during training", code)
	case <-time.After(50 * time.Millisecond):
	}
	sent := time.Now()
	in.deliver(syscall.SIGTERM)
	select {
	case code := <-exited:
		if code != 143 {
			t.Errorf("exit %d, want 143", code)
		}
		if d := time.Since(sent); d < 10*time.Millisecond {
			t.Errorf("exited after %v, before the grace period", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after the second signal")
	}

	ctx, cancel := context.WithCancel(context.Background())
	in = newInterrupt(ctx)
	exited = make(chan int, 1)
	go exitAfterAbort(in, time.Millisecond, time.Second, func(code int) { exited <- code })
	cancel()
	select {
	case code := <-exited:
		t.Errorf("exited (%d) when no signal came", code)
	case <-time.After(50 * time.Millisecond):
	}
}

// import and report have nothing to stop gracefully: a signal, even one
// that came before they began, ends them with its status, and they leave
// nothing behind.
func TestImportAndReportInterrupted(t *testing.T) {
	dir := t.TempDir()
	in := newInterrupt(context.Background())
	in.deliver(os.Interrupt)
	var stdout, stderr bytes.Buffer
	code := runWith(in, []string{"import", "-out", dir, "../../internal/importer/testdata/kineto/rank0.json"}, &stdout, &stderr)
	if code != 130 {
		t.Fatalf("import: exit %d, want 130; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted by SIGINT: nothing written") {
		t.Errorf("import's stderr does not say it was interrupted and wrote nothing:\n%s", stderr.String())
	}
	if runs, _ := filepath.Glob(filepath.Join(dir, "*")); len(runs) != 0 {
		t.Errorf("import left %v", runs)
	}

	run := reportRun(t, "-layers", "4", "-width", "16", "-microbatch-size", "4", "-steps", "2")
	in = newInterrupt(context.Background())
	in.deliver(syscall.SIGTERM)
	stdout.Reset()
	stderr.Reset()
	code = runWith(in, []string{"report", run, "--html"}, &stdout, &stderr)
	if code != 143 {
		t.Fatalf("report: exit %d, want 143; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted by SIGTERM: nothing written") {
		t.Errorf("report's stderr does not say it was interrupted and wrote nothing:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(run, "report.html")); !os.IsNotExist(err) {
		t.Errorf("report.html after an interrupted report: %v", err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(run, ".report-*")); len(tmps) != 0 {
		t.Errorf("report left %v", tmps)
	}
}

// A profile-run started with SIGHUP and SIGINT ignored (nohup, a
// background job of a script) leaves them ignored: the command inherits
// that, as it would unwrapped, and profile-run passes on no hang-up the
// user meant nothing to get.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc here (%v): cannot read a process's ignored signals", err)
	}
	noPlugin(t)
	cmd := exec.Command("sh", "-c", `trap "" HUP INT; exec "$0" "$@"`, os.Args[0],
		"-out", t.TempDir(), "-metrics-addr", "off", "--", "sh", "-c", `grep '^SigIgn:' /proc/self/status`)
	cmd.Env = append(os.Environ(), "PROFILE_RUN_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\nstdout %s\nstderr %s", err, out, stderr.String())
	}
	m := regexp.MustCompile(`(?m)^SigIgn:\s*([0-9a-f]+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the command did not say which signals it ignores:\n%s", out)
	}
	mask, err := strconv.ParseUint(string(m[1]), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if mask&(1<<(uint(sig)-1)) == 0 {
			t.Errorf("the command does not ignore %s, which profile-run was started ignoring (SigIgn %s)", signalName(sig), m[1])
		}
	}
}

// silentListener accepts connections on loopback, reads them and never
// answers: an OTLP collector that holds every export to its deadline.
// It is closed at the test's end.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return l
}
