package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// noPlugin makes the wrapped runs of a test find no NCCL plugin, so that
// they neither build one nor depend on a compiler.
func noPlugin(t *testing.T) {
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", filepath.Join(t.TempDir(), "absent.so"))
}

// runWrap is runCmd with writers the command's output and profile-run's
// logs can share: exec copies a command's output from goroutines of its
// own when the writer is not a file, as it is in tests.
func runWrap(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	out, errb := newWatchWriter(""), newWatchWriter("")
	code = run(context.Background(), args, out, errb)
	return code, out.String(), errb.String()
}

func TestWrapExitStatus(t *testing.T) {
	noPlugin(t)
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A script without a #! line runs under /bin/sh, as a shell or
	// execvp runs it.
	noShebang := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noShebang, []byte("exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		cmd      []string
		want     int
		killedBy string
		ran      bool
	}{
		{"success", []string{"true"}, 0, "", true},
		{"failure", []string{"sh", "-c", "exit 3"}, 3, "", true},
		{"killed by SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, "SIGTERM", true},
		{"killed by SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9, "SIGKILL", true},
		{"not found", []string{"trainscope-no-such-command"}, exitNotFound, "", false},
		{"a flag after --", []string{"-steps", "3"}, exitNotFound, "", false},
		{"not executable", []string{notExec}, exitCannotExecute, "", false},
		{"script without #!", []string{noShebang}, 3, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			code, stdout, stderr := runWrap(t, append([]string{"-out", out, "-metrics-addr", "off", "--"}, c.cmd...)...)
			if code != c.want {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, c.want, stdout, stderr)
			}
			// Without the plugin the run says why nothing was recorded,
			// and leaves no empty run directory behind.
			if c.ran && !strings.Contains(stdout, "nccl: not recorded: ") {
				t.Errorf("stdout does not say why nothing was recorded:\n%s", stdout)
			}
			if strings.Contains(stdout, "device timing:") {
				t.Errorf("stdout describes the device timing of nothing:\n%s", stdout)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("run directory left behind: %v", ents)
			}
			// The directory announced at the start is said to be gone at
			// the end.
			if c.ran {
				m := regexp.MustCompile(`"outputs": "([^"]+)"`).FindStringSubmatch(stderr)
				if m == nil {
					t.Fatalf("the start does not announce where the outputs go:\n%s", stderr)
				}
				if want := "files: nothing was recorded, so none were written, and the run directory " + m[1] + " was removed"; !strings.Contains(stdout, want) {
					t.Errorf("stdout does not say %q:\n%s", want, stdout)
				}
			}
			if !c.ran && !strings.Contains(stderr, "cannot run "+c.cmd[0]) {
				t.Errorf("stderr does not name the command that could not run:\n%s", stderr)
			}
			hint := "(everything after -- is the command to run; profile-run's own flags go before the --)"
			if flag := strings.HasPrefix(c.cmd[0], "-"); flag != strings.Contains(stderr, hint) {
				t.Errorf("command %q: the hint that flags go before -- is there: %v, want %v:\n%s", c.cmd[0], !flag, flag, stderr)
			}
			if c.killedBy != "" && !strings.Contains(stdout, "the wrapped command was killed by "+c.killedBy) {
				t.Errorf("stdout does not say the command was killed by %s:\n%s", c.killedBy, stdout)
			}
		})
	}
}

func TestWrapUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--"}, []string{"nothing after --"}},
		{[]string{"-pp", "4", "-steps", "3", "--", "true"}, []string{"-pp, -steps", "built-in trainer"}},
		{[]string{"-straggler-delay", "5ms", "--", "true"}, []string{"-straggler-delay sets up the built-in trainer"}},
		{[]string{"-straggler-rank", "1", "--", "true"}, []string{"-straggler-rank sets up the built-in trainer"}},
		{[]string{"-action-delay", "1ms", "--", "true"}, []string{"-action-delay sets up the built-in trainer"}},
		{[]string{"-profile", "off", "--", "true"}, []string{"-profile off", "without profile-run"}},
		{[]string{"-step-range", "iter"}, []string{`-step-range "iter"`, "wrapped command", "-- CMD"}},
		{[]string{"torchrun", "train.py"}, []string{"-- torchrun train.py"}},
		{[]string{"-kernel-labels=false"}, []string{"-kernel-labels", "wrapped command", "-- CMD"}},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, append([]string{"-out", t.TempDir()}, c.args...)...)
		if code != exitUsage || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line", c.args, code, stderr, exitUsage)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: %q does not mention %q", c.args, stderr, w)
			}
		}
	}
}

// emptyPlugin is an empty file named as the plugin, which profile-run is
// told to use: enough for a command that never loads NCCL.
func emptyPlugin(t *testing.T) string {
	t.Helper()
	lib := filepath.Join(t.TempDir(), "libtrainscope-nccl.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	return lib
}

func TestWrapEnvironment(t *testing.T) {
	lib := emptyPlugin(t)
	t.Setenv("NCCL_PROFILER_PLUGIN", "/opt/other/libnccl-profiler.so")
	t.Setenv("TRAINSCOPE_WRAP_TEST", "kept")
	code, stdout, stderr := runWrap(t, "-out", t.TempDir(), "-metrics-addr", "off", "--",
		"sh", "-c", `echo "plugin=$NCCL_PROFILER_PLUGIN"; echo "socket=$TRAINSCOPE_NCCL_SOCKET"; echo "other=$TRAINSCOPE_WRAP_TEST"; test -S "$TRAINSCOPE_NCCL_SOCKET"`)
	if code != 0 {
		t.Fatalf("exit %d (the socket should exist while the command runs)\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	for _, want := range []string{"plugin=" + lib + "\n", "other=kept\n", "socket=/"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the command's environment lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "/opt/other/libnccl-profiler.so") {
		t.Errorf("replacing the user's NCCL_PROFILER_PLUGIN is not reported:\n%s", stderr)
	}
	if !strings.Contains(stdout, "no process loaded the plugin") {
		t.Errorf("a command that never loaded the plugin is not explained:\n%s", stdout)
	}
}

// TestWrapEnvironmentNVTX: the command's NVTX ranges go to the plugin,
// unless the user already gave them to another tool (Nsight Systems),
// which keeps them, and the summary says no steps were accounted.
func TestWrapEnvironmentNVTX(t *testing.T) {
	lib := emptyPlugin(t)
	show := []string{"sh", "-c", `echo "nvtx=$NVTX_INJECTION64_PATH"`}
	t.Setenv("NVTX_INJECTION64_PATH", "")
	code, stdout, stderr := runWrap(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "--"}, show...)...)
	if code != 0 || !strings.Contains(stdout, "nvtx="+lib+"\n") {
		t.Errorf("exit %d; the command's NVTX_INJECTION64_PATH is not the plugin %s:\n%s\n%s", code, lib, stdout, stderr)
	}
	t.Setenv("NVTX_INJECTION64_PATH", "/opt/nsight/libToolsInjection64.so")
	code, stdout, stderr = runWrap(t, append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "--"}, show...)...)
	if code != 0 || !strings.Contains(stdout, "nvtx=/opt/nsight/libToolsInjection64.so\n") {
		t.Errorf("exit %d; the user's NVTX tool was replaced:\n%s", code, stdout)
	}
	if !strings.Contains(stderr, "/opt/nsight/libToolsInjection64.so") || !strings.Contains(stderr, "no steps") {
		t.Errorf("keeping the user's NVTX tool is not reported:\n%s", stderr)
	}
}

// TestWrapEnvironmentCUPTI: the plugin traces the command's kernels (it
// is the CUDA injection library) and labels them unless told not to;
// -kernels=false and -kernel-labels=false turn each off, whatever the
// user's environment said of the plugin's switches.
func TestWrapEnvironmentCUPTI(t *testing.T) {
	lib := emptyPlugin(t)
	t.Setenv("CUDA_INJECTION64_PATH", "")
	t.Setenv("TRAINSCOPE_CUPTI", "0")
	t.Setenv("TRAINSCOPE_CUPTI_LABELS", "0")
	show := []string{"sh", "-c", `echo "cuda=$CUDA_INJECTION64_PATH cupti=$TRAINSCOPE_CUPTI labels=$TRAINSCOPE_CUPTI_LABELS"`}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "cuda=" + lib + " cupti= labels=\n"},
		{[]string{"-kernel-labels=false"}, "cuda=" + lib + " cupti= labels=0\n"},
		{[]string{"-kernels=false"}, "cuda= cupti=0 labels=\n"},
	} {
		args := append(append([]string{"-out", t.TempDir(), "-metrics-addr", "off"}, c.flags...), "--")
		code, stdout, stderr := runWrap(t, append(args, show...)...)
		if code != 0 || !strings.Contains(stdout, c.want) {
			t.Errorf("%q: exit %d; want the command's environment %q in\n%s\n%s", c.flags, code, c.want, stdout, stderr)
		}
	}
}

// watchWriter is a goroutine-safe writer that signals when a line
// starting with prefix has been written.
type watchWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	prefix string
	seen   chan string // the rest of the first such line
}

func newWatchWriter(prefix string) *watchWriter {
	return &watchWriter{prefix: prefix, seen: make(chan string, 1)}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	s := w.buf.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && w.prefix != "" {
		for _, line := range strings.Split(s[:i], "\n") {
			if rest, ok := strings.CutPrefix(line, w.prefix); ok {
				select {
				case w.seen <- rest:
				default:
				}
			}
		}
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// wrapUntilReady runs script under profile-run until it prints
// "ready <pid>", then returns that process group and the run's result.
func wrapUntilReady(t *testing.T, in *interrupt, script string) (pgid int, result <-chan int, stdout, stderr *watchWriter) {
	t.Helper()
	stdout, stderr = newWatchWriter("ready "), newWatchWriter("")
	res := make(chan int, 1)
	go func() {
		res <- runWith(in, []string{"-out", t.TempDir(), "-metrics-addr", "off", "--", "sh", "-c", script}, stdout, stderr)
	}()
	select {
	case s := <-stdout.seen:
		pid, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("ready line %q", s)
		}
		return pid, res, stdout, stderr
	case code := <-res:
		t.Fatalf("ended (%d) before it was ready\nstdout %s\nstderr %s", code, stdout, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("not ready after 30 s\nstdout %s\nstderr %s", stdout, stderr)
	}
	return 0, nil, nil, nil
}

func waitCode(t *testing.T, res <-chan int, stdout, stderr *watchWriter) int {
	t.Helper()
	select {
	case code := <-res:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("profile-run did not end 30 s after the signal\nstdout %s\nstderr %s", stdout, stderr)
	}
	return 0
}

// groupGone reports whether no process of group pgid is left within 10 s
// (a dead process lingers until its parent, or init, reaps it).
func groupGone(pgid int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func TestWrapForwardsSignalsToTheProcessGroup(t *testing.T) {
	noPlugin(t)
	// The shell starts a child of its own in the background (as torchrun
	// starts workers); both are in the command's process group. The
	// shell exits 7 on SIGTERM, as a trainer that saves a checkpoint
	// might. The child says it is ready once it runs a fresh sh, whose
	// SIGTERM is the default: until its exec it would hold the shell's
	// trap, and a signal caught then is lost at the exec.
	in := newInterrupt(context.Background())
	pgid, res, stdout, stderr := wrapUntilReady(t, in,
		`trap 'wait; exit 7' TERM; sh -c 'echo "ready $PPID"; exec sleep 300' & while :; do sleep 0.05; done`)
	in.deliver(syscall.SIGTERM)
	if code := waitCode(t, res, stdout, stderr); code != 7 {
		t.Errorf("exit %d, want the command's own 7\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !groupGone(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("the background child did not get the signal: process group %d still has processes", pgid)
	}
	if !strings.Contains(stderr.String(), "passing SIGTERM on to the command") {
		t.Errorf("stderr does not say the signal was passed on:\n%s", stderr)
	}
	if !strings.Contains(stdout.String(), "the wrapped command exited with status 7") {
		t.Errorf("stdout does not give the command's status:\n%s", stdout)
	}
}

func TestWrapSecondSignalKills(t *testing.T) {
	noPlugin(t)
	// A command that ignores SIGINT: the second one kills its group.
	in := newInterrupt(context.Background())
	pgid, res, stdout, stderr := wrapUntilReady(t, in,
		`trap '' INT; echo "ready $$"; while :; do sleep 0.05; done`)
	in.deliver(os.Interrupt)
	// The first signal has been passed on when profile-run says so.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "passing SIGINT on") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case code := <-res:
		t.Fatalf("ended with %d on the first SIGINT, which the command ignores\nstdout %s\nstderr %s", code, stdout, stderr)
	case <-time.After(200 * time.Millisecond):
	}
	in.deliver(os.Interrupt)
	if code := waitCode(t, res, stdout, stderr); code != 128+9 {
		t.Errorf("exit %d, want %d (killed)\nstdout %s\nstderr %s", code, 128+9, stdout, stderr)
	}
	if !groupGone(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("process group %d still has processes", pgid)
	}
}

func TestWrapProgressLines(t *testing.T) {
	noPlugin(t)
	code, _, stderr := runWrap(t, "-out", t.TempDir(), "-metrics-addr", "off", "-progress", "log", "-progress-every", "20ms", "--", "sleep", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^profile-run: \d+s: not recording NCCL \(`).MatchString(stderr) {
		t.Errorf("no progress line on stderr:\n%s", stderr)
	}
	// Not on a terminal, the default is quiet.
	code, _, stderr = runWrap(t, "-out", t.TempDir(), "-metrics-addr", "off", "-progress-every", "20ms", "--", "sleep", "0.2")
	if code != 0 || strings.Contains(stderr, "not recording NCCL (") {
		t.Errorf("exit %d; progress lines off a terminal by default:\n%s", code, stderr)
	}
}

// buildPlugin builds the NCCL plugin, its C test driver and the more make
// targets named, or skips the test, and returns their directory and the
// plugin's path.
func buildPlugin(t *testing.T, more ...string) (dir, lib string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds C code")
	}
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine (%v): the C plugin cannot be built here", tool, err)
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "plugins", "nccl"))
	if err != nil {
		t.Fatal(err)
	}
	targets := append([]string{"-C", dir, "libtrainscope-nccl.so", "test_plugin"}, more...)
	if out, err := exec.Command("make", targets...).CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	return dir, filepath.Join(dir, "libtrainscope-nccl.so")
}

// TestWrapRecordsThePluginsStream wraps the plugin's C test driver, which
// makes the calls NCCL would (an AllReduce with two kernel channels, a
// Broadcast, two Sends and a Recv on a communicator named
// "pg-data-parallel" where it is rank 1 of 4), and checks what reaches
// the outputs.
func TestWrapRecordsThePluginsStream(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	t.Setenv("RANK", "2") // as torchrun sets it
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--", filepath.Join(dir, "test_plugin"), "--drive", lib)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// The driver stands in for NCCL 2.28.9 (its ncclGetVersion says 22809).
	if !strings.Contains(stdout, "nccl: 5 collectives and p2p from 1 process(es) of NCCL 2.28.9, 1 timed on the device, 1 p2p with their network transfer's end; 2 dropped in the plugin") {
		t.Errorf("summary line missing or wrong:\n%s", stdout)
	}
	if !strings.Contains(stdout, "device timing: each NCCL operation from its first kernel channel's start to its last one's stop, on the GPU's timer; kernels, memory copies and memsets from CUPTI's activity records\n") {
		t.Errorf("the device timing line is missing or wrong:\n%s", stdout)
	}
	// What profile-run itself took: some CPU (it decoded the stream), and
	// the few MB any Go process holds at least.
	m := regexp.MustCompile(`cost: profile-run used ([0-9.]+ s|[0-9]+ ms) of CPU while the command ran for ([0-9.]+) s( \([0-9.]+% of one core\))?, at most ([0-9]+) MB of memory\n`).FindStringSubmatch(stdout)
	if m == nil {
		t.Errorf("no cost line:\n%s", stdout)
	} else if mb, _ := strconv.Atoi(m[4]); mb < 2 || mb > 4096 {
		t.Errorf("cost line %q: %d MB of memory is not a Go process's", m[0], mb)
	}
	runs, err := filepath.Glob(filepath.Join(out, "*", "report.rank2"))
	if err != nil || len(runs) != 1 {
		t.Fatalf("want one report.rank2 (the launcher's rank) in a run directory: %v %v\nstdout %s", runs, err, stdout)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(runs[0]), "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	// The summary names the NCCL the process reported, and the host.
	var doc struct {
		Environment struct {
			Host      struct{ Name string }
			Libraries []struct{ Name, Version, Path string }
		}
	}
	if sj, err := os.ReadFile(filepath.Join(filepath.Dir(runs[0]), "summary.json")); err != nil {
		t.Error(err)
	} else if err := json.Unmarshal(sj, &doc); err != nil {
		t.Error(err)
	} else if hostname, _ := os.Hostname(); doc.Environment.Host.Name != hostname || len(doc.Environment.Libraries) != 1 ||
		doc.Environment.Libraries[0].Name != "NCCL" || doc.Environment.Libraries[0].Version != "2.28.9" {
		t.Errorf("environment %+v; want host %q and NCCL 2.28.9", doc.Environment, hostname)
	}
	if !strings.Contains(report, "=== rank 2 · whole run ===") {
		t.Errorf("report has no whole-run table for rank 2:\n%s", report)
	}
	// No CUPTI here: no allocation was seen, so no figure either.
	if !strings.Contains(report, "Peak device memory (rank 2): not measured\n") {
		t.Errorf("report does not say rank 2's peak memory was not measured:\n%s", report)
	}
	for _, name := range []string{"AllReduce", "Broadcast", "Send", "Recv"} {
		if !strings.Contains(report, name) {
			t.Errorf("report lacks %s:\n%s", name, report)
		}
	}
	// One process of a communicator of 4: its two collectives cannot be
	// matched across ranks, and the collectives section says so.
	for _, line := range []string{
		"=== collectives across ranks: skew, waiting, stragglers, clocks (docs/analysis.md) ===",
		"collectives: 0 matched across ranks, 2 not recorded by every rank of their group (left out of the figures)",
		"1 of 4 ranks recorded it (ranks 2)",
	} {
		if !strings.Contains(report, line) {
			t.Errorf("report lacks %q:\n%s", line, report)
		}
	}
	for _, f := range []string{"profile.pb.gz", "trace.json"} {
		if st, err := os.Stat(filepath.Join(filepath.Dir(runs[0]), f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestWrapDeviceMemory wraps the C driver acting as the CUDA driver with
// a stand-in CUPTI (plugins/nccl/fake_cupti.c): it allocates 1 and 2 MiB
// of device memory, releases 1 MiB and allocates 4 MiB, so its process
// held at most 6 MiB, and the report says what that figure counts.
func TestWrapDeviceMemory(t *testing.T) {
	dir, lib := buildPlugin(t, "libfakecupti.so")
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	t.Setenv("RANK", "3")
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--",
		filepath.Join(dir, "test_plugin"), "--drive-cupti", lib, filepath.Join(dir, "libfakecupti.so"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	want := "Peak device memory (rank 3): 6.00 MB (held through CUDA allocation calls: the framework's cached pool and NCCL's and libraries' buffers, not only tensors)\n"
	if report := onlyRunReport(t, out); !strings.Contains(report, want) {
		t.Errorf("report lacks %q:\n%s", want, report)
	}
	// No NCCL in this process, but what its plugin lost is said all the
	// same: the stand-in CUPTI drops two kernel records and cannot time a
	// third.
	if want := "nccl: no collectives seen: 1 process(es) loaded the plugin but issued no collective or p2p operation; 3 dropped in the plugin (0 ring full, 0 refused, 0 unsent, 3 kernel records by CUPTI)\n"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
}

// TestWrapMatchesCollectivesAcrossProcesses wraps four processes of the
// plugin's test driver, ranks 0 to 3 of one communicator: each makes the
// driver's AllReduce and Broadcast, so both are matched across the four
// processes, and the report's collectives section covers every rank.
func TestWrapMatchesCollectivesAcrossProcesses(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	script := fmt.Sprintf(`for r in 0 1 2 3; do RANK=$r %q --drive %q $r 4 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	reportPath, report := oneReport(t, out)
	i := strings.Index(report, "=== collectives across ranks")
	if i < 0 {
		t.Fatalf("no collectives section:\n%s", report)
	}
	section := report[i:]
	if !strings.Contains(section, "collectives: 2 matched across ranks;") || strings.Contains(section, "not recorded by every rank") {
		t.Errorf("want the AllReduce and the Broadcast matched, nothing incomplete:\n%s", section)
	}
	for r := range 4 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+2\s`, r)).MatchString(section) {
			t.Errorf("rank %d's row does not show its 2 calls:\n%s", r, section)
		}
	}
	// One host's processes: one clock, nothing shifted; the departures
	// shown as they were.
	if !strings.Contains(section, "clocks: every rank on one clock (one host's processes, or records aligned before), none shifted; departures from collectives against their median, by rank: 0 ") {
		t.Errorf("no one-clock line:\n%s", section)
	}
	// Its trace reads back (devices NCCL did not name included), and the
	// HTML report draws its operations without steps: the four processes'
	// 5 operations each (an AllReduce and a Broadcast, two Sends and a
	// Recv) fit in one window.
	code, stdout, stderr = runCmd(t, "report", filepath.Dir(reportPath), "--html")
	if code != exitOK || !strings.Contains(stdout, "operations without steps to account, 1 window of operations drawn, 20 transfers") {
		t.Fatalf("report --html: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	page := filepath.Join(filepath.Dir(reportPath), "report.html")
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"trainscope collectives report", "operations 1–20 of 20", "collectives: 2 matched across ranks;"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("the page lacks %q", want)
		}
	}
	browser := chromium(t)
	dom, console := browse(t, browser, page, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if coll, p2p := strings.Count(dom, `<rect class="xfer coll"`), strings.Count(dom, `<rect class="xfer p2p"`); coll != 8 || p2p != 12 {
		t.Errorf("the browser's DOM holds %d collectives and %d p2p, want 4 × 2 and 4 × 3", coll, p2p)
	}
}

func TestWrapEndsWhatTheCommandLeftBehind(t *testing.T) {
	noPlugin(t)
	// A launcher killed by SIGKILL leaves its workers running; so does
	// this shell, which exits at once leaving a sleep behind.
	in := newInterrupt(context.Background())
	stdout, stderr := newWatchWriter("ready "), newWatchWriter("")
	code := runWith(in, []string{"-out", t.TempDir(), "-metrics-addr", "off", "--", "sh", "-c", `sleep 300 >/dev/null 2>&1 & echo "ready $$"`}, stdout, stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var pgid int
	select {
	case s := <-stdout.seen:
		pgid, _ = strconv.Atoi(strings.TrimSpace(s))
	default:
		t.Fatalf("no ready line:\n%s", stdout)
	}
	if !groupGone(pgid) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		t.Errorf("the sleep left behind is still running in group %d", pgid)
	}
	if !strings.Contains(stderr.String(), "left processes behind") {
		t.Errorf("stderr does not say processes were left behind:\n%s", stderr)
	}
}

func TestWrapEndsOrphansInSessionsOfTheirOwn(t *testing.T) {
	noPlugin(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skipf("no setsid here (%v): cannot start a process in a session of its own", err)
	}
	grace := leftoverGrace
	leftoverGrace = time.Second
	t.Cleanup(func() { leftoverGrace = grace })
	// As torchrun's workers are: in a session of their own, left running
	// when the launcher dies. This one ignores SIGTERM, and says its pid
	// in a file (its output would hold the test's pipe).
	pidFile := filepath.Join(t.TempDir(), "pid")
	code, stdout, stderr := runWrap(t, "-out", t.TempDir(), "-metrics-addr", "off", "--", "sh", "-c",
		`setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 300' "$0" >/dev/null 2>&1 </dev/null &
		 while [ ! -s "$0" ]; do sleep 0.01; done`, pidFile)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// It ignored SIGTERM, so SIGKILL ended it; and it was reaped.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("process %d left behind in its own session: kill(0) = %v\nstderr %s", pid, err, stderr)
	}
	if !strings.Contains(stderr, "1 orphaned") {
		t.Errorf("stderr does not report the orphan:\n%s", stderr)
	}
}

// The progress line of a wrapped run names the straggler once one stands
// out among the collectives matched so far, and says nothing of them
// before any is matched.
func TestWrapProgressStraggler(t *testing.T) {
	if got := stragglerText(analysis.Summary{Straggler: profiler.None}); got != "" {
		t.Errorf("nothing matched: %q, want nothing", got)
	}
	s := analysis.Summary{Straggler: profiler.None, Collectives: analysis.CollectiveTotals{Matched: 12},
		Ranks: []analysis.RankTotals{{Rank: 0, Score: 0.4}, {Rank: 1, Score: 0.6}}}
	if got, want := stragglerText(s), ", 12 matched across ranks"; got != want {
		t.Errorf("no straggler: %q, want %q", got, want)
	}
	s.Straggler, s.Ranks[1].Score, s.Ranks[0].Score = 1, 0.9, 0.1
	if got, want := stragglerText(s), ", 12 matched across ranks, straggler rank 1 (caused 90% of the waiting)"; got != want {
		t.Errorf("rank 1 stands out: %q, want %q", got, want)
	}
}

// TestWrapAccountsNVTXSteps wraps two processes of the plugin's driver in
// its NVTX mode: each pushes "step" (with a nested "forward" of about
// 1 ms and the driver's NCCL calls inside), then a second "step" of about
// 2 ms. The report accounts two steps per rank, says busy time was not
// measured (nothing computed is timed in a wrapped job) rather than 0 %,
// gives no ideal bubble (the job's schedule is not known), and the
// summary counts the ranges.
func TestWrapAccountsNVTXSteps(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-nvtx %q $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, `nvtx: 6 ranges, 4 of them steps ("step")`) {
		t.Errorf("summary lacks the NVTX line (2 processes × 2 steps and a forward):\n%s", stdout)
	}
	if strings.Contains(stdout, "repeat a cycle") || strings.Contains(stdout, "no repeating cycle") {
		t.Errorf("a line of the collectives' cycle where the job marks its steps:\n%s", stdout)
	}
	_, report := oneReport(t, out)
	i := strings.Index(report, "=== where the steps went")
	if i < 0 {
		t.Fatalf("no step breakdown:\n%s", report)
	}
	section := report[i:]
	for r := range 2 {
		// Rank, stage, 2 steps, a mean of at least 1 ms, busy and idle "-".
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+-\s+2\s+([0-9.]+)\s+-\s+-\s*$`, r)).FindStringSubmatch(section)
		if m == nil {
			t.Errorf("rank %d's step row is not 2 steps with busy and idle unknown:\n%s", r, section)
			continue
		}
		if ms, _ := strconv.ParseFloat(m[1], 64); ms < 1 {
			t.Errorf("rank %d: mean step %s ms; its steps hold sleeps of 1 and 2 ms", r, m[1])
		}
	}
	if !strings.Contains(section, "busy: not measured on ranks 0, 1") {
		t.Errorf("the breakdown does not say busy time was not measured:\n%s", section)
	}
	if strings.Contains(report, "ideal pipeline bubble") {
		t.Errorf("an ideal bubble for a wrapped job, whose schedule is not known:\n%s", report)
	}
	// The ranks' files list the steps -trace-steps keeps (both, by
	// default, on a run of 2) and say so.
	path, _ := oneReport(t, out)
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), fmt.Sprintf("report.rank%d", r)))
		if err != nil {
			t.Fatal(err)
		}
		want := "the wrapped command's NCCL operations, kernels and NVTX ranges of steps 0–1 (-trace-steps 1-5,last:5) and outside every step; 0 records of other steps left out (all ranks')\n"
		if !strings.HasPrefix(string(b), want) {
			t.Errorf("report.rank%d does not begin %q:\n%.300s", r, want, b)
		}
	}
}

// TestWrapFindsTheStepFromTheCycleOfCollectives: two processes of the
// plugin's driver issue a data-parallel loop's all-reduces and mark no
// steps: two of a first step, then 12 steps of three (4000, 4000 and 1000
// floats: 36,000 bytes) 5 ms apart with a 35 ms pause, 50 ms a step. The
// summary says the cycle, after the NVTX line saying no steps were
// marked, and summary.json holds it.
func TestWrapFindsTheStepFromTheCycleOfCollectives(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q 12 $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`(?m)^  nvtx: no ranges seen, so no steps: .*\n  cycle: every rank \(2\) repeats a cycle of 3 collectives \(AllReduce ×3, 35\.2 KiB\) every ([0-9.]+) ms \(median over ([0-9]+) or more cycles a rank; p90 ([0-9.]+) ms; the collectives on the device 300 µs of it\): the step, most likely\n`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no cycle line after the NVTX line:\n%s", stdout)
	}
	// Sleeps last at least what they ask, more on a loaded machine.
	if p50, _ := strconv.ParseFloat(m[1], 64); p50 < 49.5 || p50 > 80 {
		t.Errorf("median cycle %s ms; the driver's step sleeps 50 ms", m[1])
	}
	if cycles, _ := strconv.Atoi(m[2]); cycles != 12 {
		t.Errorf("%s cycles; the driver ran 12 steps after a different first", m[2])
	}
	path, report := oneReport(t, out)
	// The report file's collectives section ends with the same line.
	if !regexp.MustCompile(`(?s)=== collectives across ranks.*\ncycle: every rank \(2\) repeats a cycle of 3 collectives \(AllReduce ×3, 35\.2 KiB\) every [0-9.]+ ms`).MatchString(report) {
		t.Errorf("report.txt's collectives section lacks the cycle:\n%s", report)
	}
	var doc struct {
		Cycle *struct {
			Found      bool
			Ranks      int
			Agreeing   int `json:"agreeing_ranks"`
			Operations int
			Ops        []struct {
				Op    string
				Count int
				Bytes int64
			}
			Bytes  int64
			Cycles int
			P50    *float64 `json:"p50_s"`
			Device *float64 `json:"device_s"`
		} `json:"collective_cycle"`
	}
	b := summaryBeside(t, path, &doc)
	c := doc.Cycle
	if c == nil || !c.Found || c.Ranks != 2 || c.Agreeing != 2 || c.Operations != 3 || c.Bytes != 36000 || c.Cycles != 12 ||
		len(c.Ops) != 1 || c.Ops[0].Op != "AllReduce" || c.Ops[0].Count != 3 || c.P50 == nil || *c.P50 < 0.0495 || *c.P50 > 0.08 || c.Device == nil || math.Abs(*c.Device-0.0003) > 1e-9 {
		t.Errorf("summary.json's collective_cycle: %s", b[bytes.Index(b, []byte(`"collective_cycle"`)):])
	}
	// The same job again, 40 steps, with progress lines: once the cycle
	// is found (the line searches every second until then), they say it.
	// Then compare's gate on the cycle: neither run marks steps. Both
	// cycles sleep 50 ms; the bound is wide, for a loaded machine's late
	// wake-ups.
	out2 := t.TempDir()
	long := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q 40 $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	code, stdout, stderr = runWrap(t, "-out", out2, "-metrics-addr", "off", "-quiet", "-progress", "log", "-progress-every", "100ms", "--", "bash", "-c", long)
	if code != 0 {
		t.Fatalf("second run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !regexp.MustCompile(`(?m)^profile-run: [0-9.]+s: [0-9]+ collectives and p2p from 2 processes, 0 dropped, no steps marked: a cycle of 3 collectives every [0-9.]+ ms`).MatchString(stderr) {
		t.Errorf("no progress line with the cycle:\n%s", stderr)
	}
	path2, _ := oneReport(t, out2)
	code, stdout, stderr = runCmd(t, "compare", "-fail-above", "50%", filepath.Dir(path), filepath.Dir(path2))
	if code != exitOK || !regexp.MustCompile(`(?m)^collectives' cycle p50\s+[0-9.]+ ms\s+[0-9.]+ ms`).MatchString(stdout) ||
		!regexp.MustCompile(`\nthe collectives' cycle p50 \(neither run marks steps\) [+−][0-9.]+ %: within the 50 % allowed by -fail-above\n`).MatchString(stdout) {
		t.Errorf("compare -fail-above 50%%: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// TestWrapCycleGPUBusy: the same two processes with a stand-in CUPTI,
// each launching a 10 ms kernel in every step's pause (the kernel's
// times are the stand-in's, exact): the cycle line says the GPU was busy
// 10.0 ms of each cycle, summary.json's collective_cycle.busy_s 0.010,
// and the progress line the share of the cycle.
func TestWrapCycleGPUBusy(t *testing.T) {
	dir, lib := buildPlugin(t, "libfakecupti.so")
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	t.Setenv("TEST_PLUGIN_FAKE_CUPTI", filepath.Join(dir, "libfakecupti.so"))
	// 40 steps, 2 s or more: the progress line searches every second
	// until it finds the cycle.
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q 40 $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "-trace", "off", "-pprof", "off",
		"-progress", "log", "-progress-every", "100ms", "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// The progress line says it too, as a share of the cycle (10 ms of a
	// step the driver's sleeps make 50 ms or more).
	if m := regexp.MustCompile(`(?m)no steps marked: a cycle of 3 collectives every [0-9.]+ ms, the GPU busy ([0-9]+)% of it(,|$)`).FindStringSubmatch(stderr); m == nil {
		t.Errorf("no progress line with the GPU's busy share:\n%s", stderr)
	} else if pct, _ := strconv.Atoi(m[1]); pct < 12 || pct > 20 {
		t.Errorf("the progress line's busy share %d%%; want 10 ms of a 50–80 ms cycle", pct)
	}
	if !regexp.MustCompile(`(?m)^  cycle: every rank \(2\) repeats a cycle of 3 collectives .*; the collectives on the device 300 µs of it; the GPU busy 10\.0 ms of it\): the step, most likely$`).MatchString(stdout) {
		t.Errorf("no cycle line with the GPU's busy time:\n%s", stdout)
	}
	path, _ := oneReport(t, out)
	var doc struct {
		Cycle *struct {
			Found bool
			Busy  *float64 `json:"busy_s"`
		} `json:"collective_cycle"`
	}
	b := summaryBeside(t, path, &doc)
	if c := doc.Cycle; c == nil || !c.Found || c.Busy == nil || math.Abs(*c.Busy-0.010) > 1e-9 {
		t.Errorf("summary.json's collective_cycle: %s", b[bytes.Index(b, []byte(`"collective_cycle"`)):])
	}
}

// TestWrapCycleStalls: the plugin's driver, two processes of 140 steps
// of about 50 ms whose every 20th step pauses 300 ms longer (a
// checkpoint): every cycle of the run is timed, and the five longest of
// the six stalls timed (the seventh is the last step, with no next) are
// named with when they happened, on the screen and in summary.json; the
// progress line says the longest so far.
func TestWrapCycleStalls(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	t.Setenv("TEST_PLUGIN_STALL_EVERY", "20")
	t.Setenv("TEST_PLUGIN_STALL_MS", "300")
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q 140 $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
	out := t.TempDir()
	code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "-trace", "off", "-pprof", "off",
		"-progress", "log", "-progress-every", "100ms", "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	// Steps 0–138 are timed up to the next one's first all-reduce (step
	// 139 has none after it); steps 19, 39, …, 119 took 300 ms longer.
	stall := `([0-9.]+) ms at [0-9.]+ s \(rank [01]\)`
	m := regexp.MustCompile(`(?m)^  cycles over the run: 139 on rank 0 from [0-9.]+ s to [0-9.]+ s, p50 ([0-9.]+) ms, .*, max ([0-9.]+) ms; the longest of 2× the median or more: ` +
		strings.Repeat(stall+", ", 4) + stall + `$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no line of the run's cycles with five stalls:\n%s", stdout)
	}
	if p50 := f(m[1]); p50 < 49.5 || p50 > 80 {
		t.Errorf("p50 %v ms; want the driver's 50 ms step or a little more", p50)
	}
	// A little more: on a loaded 2-core machine under the race detector
	// the driver's sleeps overran to 460 ms. Below 600 ms a stall is
	// still one step and its pause, not two of them.
	for _, s := range m[2:] {
		if v := f(s); v < 349 || v > 600 {
			t.Errorf("a stall of %v ms; want 350 ms or a little more", v)
		}
	}
	// While the job ran, the progress line said the longest so far.
	if p := regexp.MustCompile(`no steps marked: a cycle of 3 collectives every [0-9.]+ ms, the longest ([0-9]+)ms \(at [0-9]+s\)`).FindStringSubmatch(stderr); p == nil {
		t.Errorf("no progress line with the longest cycle:\n%s", stderr)
	} else if v := f(p[1]); v < 349 || v > 600 {
		t.Errorf("the progress line's longest %v ms; want 350 ms or a little more", v)
	}
	path, report := oneReport(t, out)
	// The report file has each rank's cycles over the run in a table.
	for rank := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^=== cycles of the collectives over the run, by rank .*\n(.*\n)*?\s+%d\s+139\s+[0-9.]+\s+[0-9.]+\s+(\s+[0-9.]+){5}\s+0\s+0$`, rank)).MatchString(report) {
			t.Errorf("report.txt has no row of rank %d's 139 cycles over the run:\n%s", rank, report)
		}
	}
	var doc struct {
		Cycle *struct {
			Run []struct {
				Rank, Cycles, Breaks, Missed int
				From                         float64 `json:"from_s"`
			}
			Stalls []struct {
				Rank int
				At   float64 `json:"at_s"`
				S    float64 `json:"s"`
			}
		} `json:"collective_cycle"`
	}
	b := summaryBeside(t, path, &doc)
	c := doc.Cycle
	if c == nil || len(c.Run) != 2 || len(c.Stalls) != cycle.LongestKept {
		t.Fatalf("summary.json's collective_cycle: %s", b[bytes.Index(b, []byte(`"collective_cycle"`)):])
	}
	for i, r := range c.Run {
		if r.Rank != i || r.Cycles != 139 || r.Breaks != 0 || r.Missed != 0 {
			t.Errorf("run of rank %d: %+v; want 139 cycles, no break, none missed", i, r)
		}
	}
	// Stalls come 20 steps and a stall apart (20 × 50 ms + 0.3 s: the
	// driver's sleeps, less a few milliseconds where the clocks of the
	// operations' records read them), or twice that where the five
	// longest leave one of the six out — in each process's own time:
	// the longest of a stall on both ranks is kept, and the processes
	// start apart (60 ms once on a loaded machine), so each is taken from
	// its rank's first cycle.
	at := make([]float64, len(c.Stalls))
	for i, s := range c.Stalls {
		if s.Rank < 0 || s.Rank >= len(c.Run) {
			t.Fatalf("a stall of rank %d", s.Rank)
		}
		at[i] = s.At - c.Run[s.Rank].From
	}
	slices.Sort(at)
	for i := 1; i < len(at); i++ {
		gap := at[i] - at[i-1]
		if lo, hi := 0.97*(20*0.050+0.3), 20*0.080+0.3; !(gap >= lo && gap <= hi || gap >= 2*lo && gap <= 2*hi) {
			t.Errorf("stalls at %v s: %v s apart; want 20 steps and a stall apart, or twice that", at, gap)
		}
	}
}

// summaryBeside reads the summary.json beside the report at path into doc
// and returns its bytes.
func summaryBeside(t *testing.T, path string, doc any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, doc); err != nil {
		t.Fatal(err)
	}
	return b
}

// oneReport is the path and text of the one report.txt under out.
func oneReport(t *testing.T, out string) (string, string) {
	t.Helper()
	reports, err := filepath.Glob(filepath.Join(out, "*", "report.txt"))
	if err != nil || len(reports) != 1 {
		t.Fatalf("want one report.txt: %v %v", reports, err)
	}
	b, err := os.ReadFile(reports[0])
	if err != nil {
		t.Fatal(err)
	}
	return reports[0], string(b)
}

// TestWrapStagesFromThePipelineCommunicator: the plugin's driver in its
// NVTX mode, two processes whose communicator, rank 0 and 1 of 2, is
// named as Megatron-LM names its pipeline's, or has no name: each is
// staged by its rank in it (the unnamed one because they send and receive
// over it), the summary says which communicator did it, and the report's
// rows carry the stages; with -pipeline-group none they carry none.
func TestWrapStagesFromThePipelineCommunicator(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	for _, c := range []struct {
		name, comm, summary string
		flags               []string
		staged              bool
	}{
		{name: "named", comm: "PIPELINE_MODEL_PARALLEL_GROUP", staged: true,
			summary: `pipeline: 2 process(es) staged by their sends and receives over communicators of two ranks named as the pipeline's ("PIPELINE_MODEL_PARALLEL_GROUP") (2 stages)`},
		// PyTorch up to 2.11 names no communicator: the one the
		// processes send and receive over stages them.
		{name: "unnamed", comm: "-", staged: true,
			summary: "pipeline: 2 process(es) staged by their sends and receives (2 stages), no communicator's name saying which is the pipeline's: bubbles per stage from their kernels; -pipeline-group none if those sends are not a pipeline's\n"},
		{name: "turned off", comm: "-", flags: []string{"-pipeline-group", "none"},
			summary: "pipeline: not staged (-pipeline-group none)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("TEST_PLUGIN_COMM_NAME", c.comm)
			script := fmt.Sprintf(`for r in 0 1; do RANK=$((r+4)) %q --drive-nvtx %q $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib)
			out := t.TempDir()
			args := append(append([]string{"-out", out, "-metrics-addr", "off"}, c.flags...), "--", "bash", "-c", script)
			code, stdout, stderr := runWrap(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, c.summary) {
				t.Errorf("summary lacks %q:\n%s", c.summary, stdout)
			}
			_, report := oneReport(t, out)
			i := strings.Index(report, "=== where the steps went")
			if i < 0 {
				t.Fatalf("no step breakdown:\n%s", report)
			}
			// Launcher ranks 4 and 5, at the stages of their communicator
			// ranks, or at none ("-").
			for rank, stage := range map[int]string{4: "0", 5: "1"} {
				if !c.staged {
					stage = "-"
				}
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+%s\s+2\s+[0-9.]+`, rank, stage)).MatchString(report[i:]) {
					t.Errorf("rank %d's step row is not at stage %s:\n%s", rank, stage, report[i:])
				}
			}
		})
	}
}

// TestImportTwoWrappedHosts: one job's four processes (the plugin's
// driver, a communicator of 4) wrapped by two profile-runs, as on two
// hosts: ranks 0 and 1 by one, 2 and 3 by the other. Each run sees half of
// every collective and says so; their traces imported together match
// both collectives across all four ranks (their communicator's id read
// back from each trace), and with 2 collectives shared, too few to align
// on, the second file's clock is left as recorded, which its line says.
func TestImportTwoWrappedHosts(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	var traces []string
	for host, ranks := range [][2]int{{0, 1}, {2, 3}} {
		script := fmt.Sprintf(`for r in %d %d; do RANK=$r %q --drive %q $r 4 & done; wait`, ranks[0], ranks[1], filepath.Join(dir, "test_plugin"), lib)
		out := t.TempDir()
		code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "--", "bash", "-c", script)
		if code != 0 {
			t.Fatalf("host %d: exit %d\nstdout %s\nstderr %s", host, code, stdout, stderr)
		}
		path, report := oneReport(t, out)
		if !strings.Contains(report, "not recorded by every rank") {
			t.Errorf("host %d sees half of each collective, and its report does not say so:\n%s", host, report)
		}
		traces = append(traces, filepath.Join(filepath.Dir(path), "trace.json"))
	}
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, append([]string{"import", "-out", out}, traces...)...)
	if code != exitOK {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"trainscope trace, ranks 0, 1, 10 ranges, the reference clock",
		"trainscope trace, ranks 2, 3, 10 ranges, clock left as recorded (only 2 collectives or sends shared with the other files' ranks; alignment needs 8)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("import's summary lacks %q:\n%s", want, stdout)
		}
	}
	report := onlyRunReport(t, out)
	i := strings.Index(report, "=== collectives across ranks")
	if i < 0 {
		t.Fatalf("no collectives section:\n%s", report)
	}
	section := report[i:]
	if !strings.Contains(section, "collectives: 2 matched across ranks;") || strings.Contains(section, "not recorded by every rank") {
		t.Errorf("want both collectives matched across the four ranks, nothing incomplete:\n%s", section)
	}
	if !strings.Contains(section, "clocks not aligned: only 2 collectives matched across ranks, and alignment needs a rank in at least 8") {
		t.Errorf("the section does not say why the clocks were left as recorded:\n%s", section)
	}
	// The import's trace says its clocks are not one, and its HTML page
	// does not claim one clock.
	dirs := runDirs(t, out)
	code, stdout, stderr = runCmd(t, "report", dirs[0], "--html")
	if code != exitOK {
		t.Fatalf("report --html: exit %d\n%s\n%s", code, stdout, stderr)
	}
	html, err := os.ReadFile(filepath.Join(dirs[0], "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("clocks not aligned: ranks 2, 3 as recorded")) || bytes.Contains(html, []byte("every rank on one clock")) {
		t.Errorf("the page of a trace on two clocks claims one, or does not say which ranks kept theirs")
	}
}

// TestImportTwoWrappedHostsCycle: a loop that marks no steps, wrapped by
// one profile-run per host (ranks 0–1 and 2–3, 12 steps each), then the
// two runs' traces imported together: the import says the cycle of every
// rank's collectives, as each run's summary did, and its summary.json
// holds it.
func TestImportTwoWrappedHostsCycle(t *testing.T) {
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	var traces []string
	for host, ranks := range [][2]int{{0, 1}, {2, 3}} {
		script := fmt.Sprintf(`for r in %d %d; do RANK=$r %q --drive-steps %q 12 $r 4 & done; wait`, ranks[0], ranks[1], filepath.Join(dir, "test_plugin"), lib)
		out := t.TempDir()
		if code, stdout, stderr := runWrap(t, "-out", out, "-metrics-addr", "off", "-quiet", "--", "bash", "-c", script); code != 0 {
			t.Fatalf("host %d: exit %d\nstdout %s\nstderr %s", host, code, stdout, stderr)
		}
		path, _ := oneReport(t, out)
		traces = append(traces, filepath.Join(filepath.Dir(path), "trace.json"))
	}
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, append([]string{"import", "-out", out, "-quiet"}, traces...)...)
	if code != exitOK {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`(?m)^  cycle: every rank \(4\) repeats a cycle of 3 collectives \(AllReduce ×3, 35\.2 KiB\) every ([0-9.]+) ms`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("the import does not say the cycle:\n%s", stdout)
	}
	if p50, _ := strconv.ParseFloat(m[1], 64); p50 < 49.5 || p50 > 80 {
		t.Errorf("median cycle %s ms; the driver's step sleeps 50 ms", m[1])
	}
	b, err := os.ReadFile(filepath.Join(runDirs(t, out)[0], "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"collective_cycle": {`)) || !bytes.Contains(b, []byte(`"agreeing_ranks": 4`)) {
		t.Errorf("the import's summary.json lacks the cycle of its 4 ranks:\n%s", b)
	}
}

// procState is the state letter of /proc/PID/stat ('T' stopped), or 0.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Ctrl-Z (SIGTSTP) stops the wrapped command with profile-run, though the
// command runs in a process group of its own, and SIGCONT (fg, bg)
// continues both.
func TestWrapStopAndContinue(t *testing.T) {
	noPlugin(t)
	if procState(os.Getpid()) == 0 {
		t.Skip("skipped: no /proc to read process states from")
	}
	p := startMain(t, "-out", t.TempDir(), "-metrics-addr", "off", "-progress", "off", "--",
		"sh", "-c", `echo "child $$"; while :; do sleep 0.05; done`)
	go func() { _, _ = io.Copy(io.Discard, p.stderr) }() // exec waits for it to be read
	var child int
	deadline := time.Now().Add(time.Minute)
	for child == 0 && time.Now().Before(deadline) {
		if m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(p.output()); m != nil {
			child, _ = strconv.Atoi(m[1])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child == 0 {
		t.Fatalf("the command never said its pid; stdout %q", p.output())
	}
	pr := p.cmd.Process.Pid
	waitState := func(what string, stopped bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if (procState(pr) == 'T') == stopped && (procState(child) == 'T') == stopped {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: profile-run state %q, the command's %q after 30 s", what, procState(pr), procState(child))
	}
	if err := syscall.Kill(pr, syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitState("after SIGTSTP, both stopped", true)
	if err := syscall.Kill(pr, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState("after SIGCONT, both running", false)
	if err := syscall.Kill(pr, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitWithin(t, p, time.Minute); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d (the command's, killed by the SIGTERM passed on)", code, 128+int(syscall.SIGTERM))
	}
}

// TestWrappedAnalysisKeepsHeldStepsOpen: the collector holds a wrapped
// command's step ranges back until their kernels have come, half a
// second of GPU time or more, while the kernels of later steps flow on.
// The step analysis must keep that many steps open: with the 16 it keeps
// otherwise, steps of 13 ms were analysed without their ranges (16 of 20
// complete, on an H200). Here two ranks' kernels of 40 steps come before
// any step range; every step is then analysed complete, none forced.
func TestWrappedAnalysisKeepsHeldStepsOpen(t *testing.T) {
	const steps = 40
	var analysed int
	pipe := newPipeAnalysis(&options{command: []string{"train"}}, func(*analysis.Step) { analysed++ })
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	var kernels, ranges []profiler.Record
	id := uint64(0)
	for s := range steps {
		for r := range 2 {
			at := float64(13 * s)
			id++
			kernels = append(kernels, profiler.Record{ID: id, Name: "gemm", Kind: profiler.KindKernel, Rank: r, Stream: 7,
				Labels:    profiler.Labels{Step: int32(s), Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None},
				HostStart: ms(at + 1), HostEnd: ms(at + 1), HasDevice: true, DeviceStart: ms(at + 1), DeviceEnd: ms(at + 11)})
			id++
			ranges = append(ranges, profiler.Record{ID: id, Name: profiler.StepName, Kind: profiler.KindHost, Rank: r,
				Labels:    profiler.Labels{Step: int32(s), Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None},
				HostStart: ms(at), HostEnd: ms(at + 13)})
		}
	}
	pipe.Consume(kernels)
	pipe.Consume(ranges)
	pipe.Flush()
	sink := pipe.(*stepsOrCalls).steps
	sum, st := sink.Summary(), sink.Stats()
	if sum.Complete != steps || st.Forced != 0 || st.Late != 0 || analysed != steps {
		t.Errorf("%d of %d steps complete, %d forced, %d records late, %d analysed; want all %d complete, none forced or late",
			sum.Complete, sum.Steps, st.Forced, st.Late, analysed, steps)
	}
}

// TestCostSummary: the share of a core is given for a command that ran a
// second or more, not for a moment's (where it reads as noise: 225 %).
func TestCostSummary(t *testing.T) {
	cpu, _, ok := cpuTime()
	if !ok {
		t.Skip("getrusage says nothing here")
	}
	// From now: a few milliseconds of CPU at most, said in them rather
	// than as 0.0 s beside a share of a core.
	long := costSummary(2*time.Second, cpu)
	if !regexp.MustCompile(`^cost: profile-run used [0-9]+ ms of CPU while the command ran for 2\.0 s \([0-9.]+% of one core\), at most [0-9]+ MB of memory$`).MatchString(long) {
		t.Errorf("%q", long)
	}
	// From the process's start: the test binary's CPU so far, whatever
	// it is, in the unit that suits it.
	if all := costSummary(2*time.Second, 0); !regexp.MustCompile(`^cost: profile-run used ([0-9]+\.[0-9] s|[0-9]+ ms) of CPU while`).MatchString(all) {
		t.Errorf("%q", all)
	}
	short := costSummary(300*time.Millisecond, cpu)
	if strings.Contains(short, "of one core") || !strings.HasPrefix(short, "cost: profile-run used ") {
		t.Errorf("%q", short)
	}
}

func TestLossTextCutShortIsNoBadStream(t *testing.T) {
	cut := lossText(ncclplugin.Stats{CutShort: 2, PluginUnsent: 5})
	if !strings.Contains(cut, "2 stream(s) ended inside a record") || strings.Contains(cut, "bad streams") {
		t.Errorf("streams cut short: %q", cut)
	}
	bad := lossText(ncclplugin.Stats{DecodeErrors: 1, LastError: "version 9"})
	if !strings.Contains(bad, "1 bad stream, 0 records refused (last: version 9)") || strings.Contains(bad, "inside a record") {
		t.Errorf("a malformed stream: %q", bad)
	}
	if got := lossText(ncclplugin.Stats{}); got != "" {
		t.Errorf("nothing lost: %q", got)
	}
	pxn := lossText(ncclplugin.Stats{PluginForeignProxyOps: 12})
	if !strings.Contains(pxn, "12 proxy operations of other processes (PXN)") || strings.Contains(pxn, "dropped in the plugin") {
		t.Errorf("other processes' proxy operations: %q", pxn)
	}
}

// A process the command orphans (a daemon started with a double fork)
// becomes profile-run's child, profile-run being the subreaper: when it
// exits while the command still runs, profile-run reaps it then, not only
// once the command has ended, so that a long job that orphans processes
// again and again does not fill the process table with zombies.
func TestWrapReapsOrphansWhileTheCommandRuns(t *testing.T) {
	noPlugin(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	done := pidFile + ".done"
	stdout, stderr := newWatchWriter(""), newWatchWriter("")
	res := make(chan int, 1)
	go func() {
		res <- runWith(newInterrupt(context.Background()), []string{"-out", t.TempDir(), "-metrics-addr", "off", "--", "sh", "-c",
			`( sh -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"' "$0" & )
			 while [ ! -e "$0.done" ]; do sleep 0.01; done`, pidFile}, stdout, stderr)
	}()
	defer func() {
		_ = os.WriteFile(done, nil, 0o644)
		if code := waitCode(t, res, stdout, stderr); code != 0 {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
	}()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan did not write its pid in 30 s\nstdout %s\nstderr %s", stdout, stderr)
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// It exits right after writing its pid; a zombie still answers kill 0.
	deadline := time.Now().Add(20 * time.Second)
	for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d, exited (state %c), was not reaped while the command ran", pid, procState(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A second signal stops every wait at once, the wait for the processes
// the command left behind included: they are killed then, not after the
// grace a first ending gives them, which profile-run would not live to
// see (it exits abortGrace after the second signal), leaving them
// running.
func TestWrapSecondSignalKillsLeftoversAtOnce(t *testing.T) {
	noPlugin(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skipf("no setsid here (%v): cannot start a process in a session of its own", err)
	}
	grace := leftoverGrace
	leftoverGrace = 10 * time.Minute
	t.Cleanup(func() { leftoverGrace = grace })
	// The launcher ignores SIGINT; its worker, in a session of its own
	// as torchrun's are, ignores SIGTERM.
	pidFile := filepath.Join(t.TempDir(), "pid")
	in := newInterrupt(context.Background())
	_, res, stdout, stderr := wrapUntilReady(t, in, fmt.Sprintf(`trap '' INT
		setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 300' '%s' >/dev/null 2>&1 </dev/null &
		while [ ! -s '%s' ]; do sleep 0.01; done
		echo "ready $$"
		while :; do sleep 0.05; done`, pidFile, pidFile))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	in.deliver(os.Interrupt)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "passing SIGINT on") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	in.deliver(os.Interrupt)
	select {
	case code := <-res:
		if code != 128+9 {
			t.Errorf("exit %d, want %d (killed)\nstdout %s\nstderr %s", code, 128+9, stdout, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("profile-run did not end 30 s after the second signal: it waits for the worker left behind\nstderr %s", stderr)
		_ = syscall.Kill(worker, syscall.SIGKILL)
		<-res
	}
	if err := syscall.Kill(worker, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(worker, syscall.SIGKILL)
		t.Errorf("worker %d left running: kill(0) = %v", worker, err)
	}
	// What it says is what it does: no grace of 10 minutes.
	if s := stderr.String(); !strings.Contains(s, "left processes behind (1 orphaned") || !strings.Contains(s, "killing them (SIGKILL): a signal cut the grace short") || strings.Contains(s, "SIGKILL after") {
		t.Errorf("stderr does not say the worker left behind is killed at once:\n%s", s)
	}
}

// A signal that comes before the command has started (while the plugin is
// being built, say) means the user does not want it run: it is not
// started, and profile-run ends as the signal asks.
func TestWrapSignalBeforeTheCommandStarts(t *testing.T) {
	noPlugin(t)
	marker := filepath.Join(t.TempDir(), "ran")
	out := t.TempDir()
	in := newInterrupt(context.Background())
	in.deliver(syscall.SIGTERM)
	stdout, stderr := newWatchWriter(""), newWatchWriter("")
	code := runWith(in, []string{"-out", out, "-metrics-addr", "off", "--", "sh", "-c", `trap '' TERM; touch "$0"`, marker}, stdout, stderr)
	if code != 128+15 {
		t.Errorf("exit %d, want %d\nstdout %s\nstderr %s", code, 128+15, stdout, stderr)
	}
	if strings.Contains(stderr.String(), "profiling sh") {
		t.Errorf("the command was started after the signal:\n%s", stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran after the signal")
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("run directory left behind: %v", ents)
	}
}

// A second signal while the killed command is slow to go (a GPU's
// teardown holds a process unkillable for seconds) outlasts the grace,
// and profile-run exits without finishing its outputs. As for the
// built-in trainer, it says so first, removes the files it made at the
// start that are still empty, and the run directory with them; and it
// leaves no socket directory of its collector in the temporary directory.
func TestWrapHardExitSaysWhatItLeaves(t *testing.T) {
	emptyPlugin(t)
	out := t.TempDir()
	in := newInterrupt(context.Background())
	type exit struct {
		code   int
		files  map[string]int64 // what -out held at the exit, by path: size
		runs   []string         // the run directories in -out then
		socket error            // os.Stat of the collector's socket directory then
		stderr string
	}
	stdout, stderr := newWatchWriter("ready "), newWatchWriter("")
	var socketDir string
	exited := make(chan exit, 1)
	// Grace 0: the exit comes as the second signal's grace is over, the
	// command not yet reaped.
	go exitAfterAbort(in, 0, time.Hour, func(code int) {
		e := exit{code: code, files: map[string]int64{}, stderr: stderr.String()}
		e.runs, _ = filepath.Glob(filepath.Join(out, "*"))
		_ = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					e.files[path] = fi.Size()
				}
			}
			return nil
		})
		_, e.socket = os.Stat(socketDir)
		exited <- e
	})
	res := make(chan int, 1)
	go func() {
		res <- runWith(in, []string{"-out", out, "-metrics-addr", "off", "--", "sh", "-c",
			`trap '' INT; echo "ready $TRAINSCOPE_NCCL_SOCKET"; while :; do sleep 0.05; done`}, stdout, stderr)
	}()
	select {
	case s := <-stdout.seen:
		socketDir = filepath.Dir(strings.TrimSpace(s))
	case code := <-res:
		t.Fatalf("ended (%d) before it was ready\nstdout %s\nstderr %s", code, stdout, stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("not ready after 30 s\nstdout %s\nstderr %s", stdout, stderr)
	}
	if !filepath.IsAbs(socketDir) {
		t.Fatalf("the command got no socket path (%q): no collector to test", socketDir)
	}
	in.deliver(os.Interrupt)
	in.deliver(os.Interrupt)
	var e exit
	select {
	case e = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30 s after the second signal\nstderr %s", stderr)
	}
	waitCode(t, res, stdout, stderr) // the run goes on here; a process would be gone
	if e.code != 130 {
		t.Errorf("exit %d, want 130 (128 + SIGINT)", e.code)
	}
	if e.socket == nil {
		t.Errorf("the collector's socket directory %s is left behind", socketDir)
	}
	said := regexp.MustCompile(`(?m)^.*exiting without finishing the outputs.*$`).FindString(e.stderr)
	if said == "" {
		t.Fatalf("nothing said of the outputs left unfinished; stderr:\n%s", e.stderr)
	}
	for path, size := range e.files {
		if size == 0 {
			t.Errorf("left behind empty: %s", path)
		}
	}
	if len(e.runs) != 0 {
		t.Errorf("run directories left behind, nothing being in them: %v", e.runs)
	}
	if !strings.Contains(said, "is removed") {
		t.Errorf("the run directory is gone, and that is not said: %s", said)
	}
}

// A flag whose value is left out before -- (profile-run -out -- CMD)
// takes -- as its value: the flags did not end there, and the command
// would run with its outputs in a directory named "--". It is a usage
// error naming the flag, and nothing runs or is made.
func TestWrapFlagValueIsTheSeparator(t *testing.T) {
	noPlugin(t)
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"-metrics-addr", "off", "-out", "--", "touch", "ran"},
		{"-metrics-addr", "off", "-report", "--", "touch", "ran"},
	} {
		code, _, stderr := runWrap(t, args...)
		if code != exitUsage || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line", args, code, stderr, exitUsage)
		}
		flagName := args[len(args)-4]
		if !strings.Contains(stderr, flagName+" --") {
			t.Errorf("%q: %q does not name %s", args, stderr, flagName)
		}
		if ents, _ := os.ReadDir("."); len(ents) != 0 {
			t.Errorf("%q: made or ran something: %v", args, ents)
		}
	}
}

// Processes that ended with the command — killed with its process group
// by a second signal, or exiting as it exited — are zombies until reaped:
// they are reaped, not reported as left behind, nor sent signals.
func TestWrapLeftoversThatAlreadyExitedAreNotReported(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(20 * time.Second); procState(pid) != 'Z'; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d did not exit (state %c)", pid, procState(pid))
		}
	}
	var logs bytes.Buffer
	log, err := newLogger(&logs, logConsole, "info")
	if err != nil {
		t.Fatal(err)
	}
	w := &wrapper{in: newInterrupt(context.Background()), log: log}
	start := time.Now()
	w.endLeftovers(pid)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %v for a process that had exited", took)
	}
	if logs.Len() != 0 {
		t.Errorf("a process that had exited is reported:\n%s", logs.String())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("zombie %d not reaped: kill(0) = %v (state %c)", pid, err, procState(pid))
	}
}

// The nccl: line tells what the collector could not place: a GPU timer
// that stepped, clock bounds that crossed (counted per GPU), and
// channel or proxy records whose operation never came.
func TestNCCLLineSaysWhatWasNotPlaced(t *testing.T) {
	st := ncclplugin.Stats{Processes: 2, Communicating: 2, Records: 40, HostOnly: 3,
		ClockSteps: 1, ClockConflicts: 2, ClockConflict: "rank 1's AllReduce …", Orphans: 5}
	line := ncclLine(st, "/x/libtrainscope-nccl.so")
	for _, want := range []string{
		"nccl: 40 collectives and p2p from 2 process(es), 37 timed on the device",
		"stepped 1 time(s)",
		"2 GPU(s) whose clock bounds crossed",
		"first: rank 1's AllReduce …",
		"5 kernel-channel and proxy records found no operation",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("nccl line lacks %q:\n%s", want, line)
		}
	}
	if line := ncclLine(ncclplugin.Stats{Processes: 1, Communicating: 1, Records: 4}, ""); strings.Contains(line, "GPU timer") || strings.Contains(line, "no operation") {
		t.Errorf("a clean run's nccl line speaks of trouble: %s", line)
	}
}

// The nccl: line names the NCCL versions the processes reported, and the
// GPUs they shared; the stage balance's caveat says the same.
func TestNCCLLineVersionsAndSharedGPUs(t *testing.T) {
	st := ncclplugin.Stats{Processes: 4, Communicating: 4, Records: 40, NCCLVersions: []int32{22803, 22809}, SharedGPUs: 1, SharingProcesses: 4}
	line := ncclLine(st, "")
	for _, want := range []string{
		"nccl: 40 collectives and p2p from 4 process(es) of NCCL 2.28.3 and 2.28.9, 40 timed on the device",
		"; 4 processes sharing 1 GPU (MPS, or taking turns): each one's device times include waits for the others' work",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("nccl line lacks %q:\n%s", want, line)
		}
	}
	if got := sharedGPUs(st); got != "4 processes sharing 1 GPU" {
		t.Errorf("sharedGPUs = %q", got)
	}
	st.SharedGPUs, st.SharingProcesses, st.NCCLVersions = 0, 0, nil
	if line := ncclLine(st, ""); strings.Contains(line, "sharing") || strings.Contains(line, "of NCCL") || sharedGPUs(st) != "" {
		t.Errorf("nothing shared, no version: %s", line)
	}
}

// Progress lines a few times a second tell their times apart; at the
// default 10 s, whole seconds.
func TestProgressElapsedText(t *testing.T) {
	for _, c := range []struct {
		d, every time.Duration
		want     string
	}{
		{1234 * time.Millisecond, 250 * time.Millisecond, "1.2s"},
		{300 * time.Millisecond, 250 * time.Millisecond, "300ms"},
		{1234 * time.Millisecond, 10 * time.Second, "1s"},
		{61500 * time.Millisecond, time.Second, "1m1s"},
	} {
		if got := elapsedText(c.d, c.every).String(); got != c.want {
			t.Errorf("elapsedText(%v, every %v) = %s, want %s", c.d, c.every, got, c.want)
		}
	}
}
