package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// syncBuffer is a bytes.Buffer safe to read while others write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// More usage errors of the built-in trainer's flags: each names its flag,
// on one line, exit 2 (TestUsageErrorsAreOneLineAndExitTwo's rules). Each
// was taken before, and did nothing or failed without naming the flag.
func TestMoreUsageErrorsNameTheirFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		// The exporter refused these once the run directory was made,
		// naming an "endpoint" but not the flag.
		{"otlp endpoint not host:port", []string{"-otlp-endpoint", "bad url"}, []string{`-otlp-endpoint "bad url"`, "HOST:PORT"}},
		{"otlp endpoint without a port", []string{"-otlp-endpoint", "collector"}, []string{`-otlp-endpoint "collector"`, "missing port"}},
		{"otlp endpoint of another scheme", []string{"-otlp-endpoint", "ftp://collector:4318"}, []string{"-otlp-endpoint", `scheme "ftp"`}},
		{"otlp endpoint without a host", []string{"-otlp-endpoint", "http://"}, []string{"-otlp-endpoint", "no host"}},
		// Without profiling nothing is recorded, so /metrics is not
		// served: these did nothing, silently.
		{"metrics linger without profiling", []string{"-profile", "off", "-metrics-linger", "2s"}, []string{"-metrics-linger", "-profile is off"}},
		{"metrics address without profiling", []string{"-profile", "off", "-metrics-addr", "127.0.0.1:0"}, []string{"-metrics-addr", "-profile is off"}},
		{"metrics detail without profiling", []string{"-profile", "off", "-metrics-detail"}, []string{"-metrics-detail", "-profile is off"}},
		// The call logs go beside the report: none were written, and
		// nothing said so.
		{"call log size with report off", []string{"-report", "off", "-call-log-size", "5"}, []string{"-call-log-size 5", "-report is off"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			code, stdout, stderr := runCmd(t, append([]string{"-out", out}, c.args...)...)
			if code != exitUsage {
				t.Fatalf("exit code %d, want %d; stderr %q", code, exitUsage, stderr)
			}
			if n := strings.Count(strings.TrimRight(stderr, "\n"), "\n"); n != 0 {
				t.Errorf("error is %d lines, want one: %q", n+1, stderr)
			}
			if !strings.HasSuffix(stderr, " (see profile-run -h)\n") {
				t.Errorf("error %q does not end with the hint (see profile-run -h)", stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("error %q does not mention %q", stderr, w)
				}
			}
			if strings.Contains(stdout, "training on") {
				t.Errorf("training started:\n%s", stdout)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("left in -out: %v", ents)
			}
		})
	}
	// The same flags at their defaults, or off, are no mistake; flags
	// that only shape what profiling records are said to have no effect
	// without it (they did nothing, silently), and the run goes on, so
	// that one command line compares -profile on and off.
	for _, c := range []struct {
		args []string
		warn []string // flags said to have no effect
	}{
		{[]string{"-profile", "off", "-metrics-addr", "off"}, nil},
		{[]string{"-profile", "off"}, nil},
		{[]string{"-report", "off", "-call-log-size", "0", "-metrics-addr", "off"}, nil},
		{[]string{"-profile", "off", "-trace-steps", "1", "-call-log-size", "5", "-device-depth", "0", "-sort", "name"}, []string{"-trace-steps", "-call-log-size", "-device-depth", "-sort"}},
	} {
		code, _, stderr := runCmd(t, append(append([]string{"-out", t.TempDir()}, small...), c.args...)...)
		if code != exitOK {
			t.Errorf("%q: exit %d: %s", c.args, code, stderr)
		}
		if got := strings.Count(stderr, "has no effect: -profile is off"); got != len(c.warn) {
			t.Errorf("%q: %d flags said to have no effect, want %d:\n%s", c.args, got, len(c.warn), stderr)
		}
		for _, f := range c.warn {
			if !strings.Contains(stderr, f+" has no effect") {
				t.Errorf("%q: %s not said to have no effect:\n%s", c.args, f, stderr)
			}
		}
	}
	// The environment's OTLP endpoint asks for spans too: without
	// profiling none are sent, and the run says so.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	code, _, stderr := runCmd(t, append(append([]string{"-out", t.TempDir()}, small...), "-profile", "off")...)
	if code != exitOK || !strings.Contains(stderr, "the OTLP endpoint of the environment (http://127.0.0.1:1) has no effect: -profile is off") {
		t.Errorf("-profile off with OTEL_EXPORTER_OTLP_ENDPOINT set: exit %d, stderr:\n%s", code, stderr)
	}
}

// A -out that exists, but where no run directory can be made (here: its
// name would be too long; for a user other than root, a directory without
// write permission fails the same way), is an error naming -out, before
// training.
func TestRunDirectoryErrorNamesOut(t *testing.T) {
	out := t.TempDir()
	// A path that can be made, under PATH_MAX (4096 with its NUL), whose
	// run directory (another 23 bytes) cannot.
	for len(out) < 4080 {
		out = filepath.Join(out, strings.Repeat("d", min(200, 4080-len(out)-1)))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Skipf("cannot make a %d-byte path here: %v", len(out), err)
	}
	code, stdout, stderr := runCmd(t, append([]string{"-out", out, "-metrics-addr", "off"}, small...)...)
	if code != exitFail {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitFail, stderr)
	}
	if !strings.Contains(stderr, "output directory -out "+out) {
		t.Errorf("the error does not name -out %s:\n%s", out, stderr)
	}
	if strings.Contains(stdout, "training on") {
		t.Errorf("training started before the run directory was made")
	}
}

// The ETA of a run too long to count in a Duration is the longest one,
// never negative (float64(math.MaxInt64) is 2⁶³: converted back it
// wrapped to the most negative Duration, "-2562047h47m16s").
func TestETANeverNegative(t *testing.T) {
	for _, steps := range []int{math.MaxInt, math.MaxInt / 2, 1 << 40} {
		pr := &progress{steps: steps, done: 1}
		if eta := pr.eta(time.Second); eta <= 0 {
			t.Errorf("-steps %d, 1 done in 1s: ETA %v", steps, eta)
		}
	}
	pr := &progress{steps: 10, done: 5}
	if eta := pr.eta(5 * time.Second); eta != 5*time.Second {
		t.Errorf("5 of 10 steps in 5s: ETA %v, want 5s", eta)
	}
}

// A -call-log-size beyond what 63 bits of bytes hold caps nothing: shifted
// into bytes, 2⁴⁴+1 MiB wrapped to a cap of 1 MiB, while the summary
// spoke of the cap as typed.
func TestCallLogLimitDoesNotWrap(t *testing.T) {
	for mib, want := range map[int]int64{
		0:                      0,
		1:                      1 << 20,
		64:                     64 << 20,
		math.MaxInt64 >> 20:    math.MaxInt64 >> 20 << 20,
		math.MaxInt64>>20 + 1:  math.MaxInt64,
		1<<44 + 1:              math.MaxInt64,
		math.MaxInt:            math.MaxInt64,
		math.MaxInt64>>20 + 99: math.MaxInt64,
	} {
		if got := callLogLimit(mib); got != want {
			t.Errorf("callLogLimit(%d) = %d, want %d", mib, got, want)
		}
	}
}

// blockingSink holds the profiler, as its collector does while it
// delivers a batch, from its first Consume until release is closed.
type blockingSink struct {
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (b *blockingSink) Consume([]profiler.Record) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
}

// A signal after training (here: it ends -metrics-linger) cuts the
// exporters' shutdown short, and a Profiler.Close cut short shuts no sink
// down when its collector holds the profiler at that instant (one run in
// fifty, under load). The call logs are files all the same: they are
// closed whole, never left empty or without their end while the summary
// lists them.
func TestCallLogsWholeWhenTheShutdownIsCutShort(t *testing.T) {
	in := newInterrupt(context.Background())
	release := make(chan struct{})
	released := sync.OnceFunc(func() { close(release) })
	t.Cleanup(released)
	orig := closeProfiler
	closeProfiler = func(ctx context.Context, p *profiler.Profiler) error {
		in.deliver(syscall.SIGTERM) // after training: every wait left ends, ctx too
		b := &blockingSink{entered: make(chan struct{}), release: release}
		if err := p.AddSink(b); err != nil {
			t.Error(err)
			return p.Close(ctx)
		}
		ingested := make(chan error, 1)
		go func() {
			ingested <- p.Ingest(context.Background(), []profiler.Record{{Name: "late", Rank: 0, ID: math.MaxUint32, HostStart: time.Millisecond, HostEnd: 2 * time.Millisecond}})
		}()
		<-b.entered // the profiler is held, delivering
		err := p.Close(ctx)
		released()
		if err := <-ingested; err != nil {
			t.Error(err)
		}
		return err
	}
	t.Cleanup(func() { closeProfiler = orig })
	out := t.TempDir()
	var stdout, stderr syncBuffer
	args := append([]string{"-out", out, "-metrics-addr", "off"}, small...)
	code := runWith(in, args, &stdout, &stderr)
	if code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, stderr.String())
	}
	lines := regexp.MustCompile(`(?m)^  calls: (\d+) → (\S+)`).FindAllStringSubmatch(stdout.String(), -1)
	if len(lines) != 2 {
		t.Fatalf("%d call logs in the summary, want 2:\n%s", len(lines), stdout.String())
	}
	for _, m := range lines {
		want, _ := strconv.Atoi(m[1])
		f, err := os.Open(m[2])
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n := 0
		zr, err := gzip.NewReader(f)
		if err == nil {
			sc := bufio.NewScanner(zr)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if !strings.HasPrefix(sc.Text(), "#") { // the header
					n++
				}
			}
			err = sc.Err()
		}
		if err != nil || n != want {
			t.Errorf("%s: %d calls read (%v); the summary says %d", m[2], n, err, want)
		}
	}
}

// Ending -metrics-linger with a signal, as its log line invites, is no
// shutdown cut short: the files are whole and no span was waiting, so
// nothing warns that it was (it did, nearly every time).
func TestSignalDuringLingerWarnsOfNothing(t *testing.T) {
	in := newInterrupt(context.Background())
	stderr := &lineWaiter{re: regexp.MustCompile(`serving final metrics`), seen: make(chan struct{})}
	go func() {
		select {
		case <-stderr.seen:
			in.deliver(syscall.SIGTERM)
		case <-time.After(time.Minute):
		}
	}()
	var stdout syncBuffer
	args := append([]string{"-out", t.TempDir(), "-metrics-addr", "127.0.0.1:0", "-metrics-linger", "1h"}, small...)
	if code := runWith(in, args, &stdout, stderr); code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, stderr.buf.String())
	}
	if s := stderr.buf.String(); strings.Contains(s, "cut short") || strings.Contains(s, "WARN") {
		t.Errorf("a warning after ending the linger:\n%s", s)
	}
}

// A second signal while a wait that no signal reaches holds the run (a
// rank's queued device work: -action-delay on the CPU backend is one)
// ends profile-run once its grace is over, its outputs unfinished. Before
// it ends it says so, and removes the files it made that are still empty,
// and the run directory with them when nothing else is left in it: they
// would only look like a result (0-byte report.txt, trace.json,
// profile.pb.gz, calls.rank<N>.gz).
func TestHardExitSaysWhatItLeaves(t *testing.T) {
	out := t.TempDir()
	in := newInterrupt(context.Background())
	var stderr syncBuffer
	type exit struct {
		code   int
		files  map[string]int64 // what -out held at the exit, by path: size
		runs   []string         // the run directories in -out then
		stderr string
	}
	exited := make(chan exit, 1)
	gone := make(chan struct{})
	go exitAfterAbort(in, 0, time.Hour, func(code int) {
		e := exit{code: code, files: map[string]int64{}, stderr: stderr.String()}
		e.runs, _ = filepath.Glob(filepath.Join(out, "*"))
		_ = filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					e.files[path] = fi.Size()
				}
			}
			return nil
		})
		exited <- e
		close(gone)
	})
	stepFault = func(step int) error {
		if step == 1 {
			in.deliver(syscall.SIGTERM) // stops training at the next action
			in.deliver(syscall.SIGTERM) // cuts every wait short
			<-gone                      // a wait no signal reaches, until profile-run has exited
		}
		return nil
	}
	t.Cleanup(func() { stepFault = nil })
	// After the exit the run goes on here (a process would be gone): what
	// it does then is of no interest.
	runWith(in, append([]string{"-out", out, "-metrics-addr", "off"}, small...), &syncBuffer{}, &stderr)
	e := <-exited
	if e.code != 143 {
		t.Errorf("exit %d, want 143", e.code)
	}
	said := regexp.MustCompile(`(?m)^.*exiting without finishing the outputs.*$`).FindString(e.stderr)
	if said == "" {
		t.Fatalf("nothing said of the outputs left unfinished; stderr:\n%s", e.stderr)
	}
	for path, size := range e.files {
		if size == 0 {
			t.Errorf("left behind empty: %s", path)
		}
		if !strings.Contains(said, filepath.Base(path)) {
			t.Errorf("left behind and not named: %s (%d bytes)", path, size)
		}
	}
	for _, r := range e.runs {
		if !strings.Contains(said, r) {
			t.Errorf("run directory %s not named", r)
		}
	}
	if len(e.runs) == 0 && !strings.Contains(said, "is removed") {
		t.Errorf("the run directory is gone, and that is not said: %s", said)
	}
}

// A collector that takes connections and never answers holds the spans
// at the end of the run, each wait up to its deadline: the run says it is
// waiting for them, and how to end the wait (it was silent for 15 s), and
// a signal ends it.
func TestWaitingForSpansIsSaid(t *testing.T) {
	l := silentListener(t)
	in := newInterrupt(context.Background())
	stderr := &lineWaiter{re: regexp.MustCompile(`waiting for the OTLP endpoint to take \d+ queued spans .*a signal ends it`), seen: make(chan struct{})}
	go func() {
		select {
		case <-stderr.seen:
			in.deliver(syscall.SIGTERM)
		case <-time.After(time.Minute):
		}
	}()
	var stdout syncBuffer
	args := append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-otlp-endpoint", l.Addr().String(), "-otlp-protocol", "grpc"}, small...)
	if code := runWith(in, args, &stdout, stderr); code != 143 {
		t.Fatalf("exit %d, want 143 (the signal sent once the wait was said); stderr:\n%s", code, stderr.buf.String())
	}
	if m := regexp.MustCompile(`(\d+) spans delivered, (\d+) dropped, (\d+) failed`).FindStringSubmatch(stdout.String()); m == nil || m[3] == "0" && m[2] == "0" {
		t.Errorf("the summary does not count the undelivered spans:\n%s", stdout.String())
	}
}

// Interrupted without profiling, the run says it stops, not that it
// writes what was recorded: nothing was.
func TestInterruptWithoutProfiling(t *testing.T) {
	in := newInterrupt(context.Background())
	stepFault = func(step int) error {
		if step == 1 {
			in.deliver(syscall.SIGTERM)
		}
		return nil
	}
	t.Cleanup(func() { stepFault = nil })
	var stdout, stderr syncBuffer
	out := t.TempDir()
	code := runWith(in, append([]string{"-out", out, "-profile", "off"}, small...), &stdout, &stderr)
	if code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, stderr.String())
	}
	s := stderr.String()
	if !strings.Contains(s, "SIGTERM: stopping training") || !strings.Contains(s, "interrupted by SIGTERM at step 1 (1 of 2 steps complete)") {
		t.Errorf("stderr does not say training stopped at step 1:\n%s", s)
	}
	if strings.Contains(s, "what was recorded is written") || strings.Contains(s, "writing what was recorded") {
		t.Errorf("stderr speaks of writing what was recorded, with -profile off:\n%s", s)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("left in -out: %v", ents)
	}
}

func TestCountNamesOneInTheSingular(t *testing.T) {
	for n, want := range map[int]string{0: "0 steps", 1: "1 step", 2: "2 steps", 1000: "1000 steps"} {
		if got := count(n, "step", "steps"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
