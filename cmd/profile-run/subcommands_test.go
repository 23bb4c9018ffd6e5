package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A directory of links to the traces (a tensorboard_trace_handler
// directory gathered from several hosts by symlinks) stands for the traces
// the links name, as a directory of the files themselves does; a link to
// a trace of the directory itself is not one more file.
func TestImportDirectoryOfLinks(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(kinetoDir + "rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rank0.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	target, err := filepath.Abs(kinetoDir + "rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"rank1.json":    target,
		"latest.json":   "rank0.json",
		"adir.json":     t.TempDir(), // links to what is no file are no traces
		"dangling.json": filepath.Join(dir, "absent"),
	} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-quiet", "-out", out, dir)
	if code != exitOK {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitOK, stdout, stderr)
	}
	for _, want := range []string{
		"importing 2 file(s)",
		filepath.Join(dir, "rank0.json") + ": Chrome/Kineto trace, rank 0",
		filepath.Join(dir, "rank1.json") + ": Chrome/Kineto trace, rank 1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	for _, name := range []string{"latest.json", "adir.json", "dangling.json"} {
		if strings.Contains(stdout+stderr, name) {
			t.Errorf("%s was read:\n%s\n%s", name, stdout, stderr)
		}
	}
}

// -pushgateway is checked by import as by a run: a value that is no
// http(s) URL is a usage mistake, found before any file is read.
func TestImportBadPushgatewayIsAUsageError(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runCmd(t, "import", "-out", out, "-pushgateway", "ftp://127.0.0.1:1", kinetoDir+"rank0.json")
	if code != exitUsage || !strings.Contains(stderr, `-pushgateway: "ftp://127.0.0.1:1" is not an http(s) URL`) {
		t.Errorf("exit %d, stderr %q; want exit %d naming -pushgateway", code, stderr, exitUsage)
	}
	if strings.Contains(stdout, "records:") {
		t.Errorf("the import ran:\n%s", stdout)
	}
	if dirs := runDirs(t, out); len(dirs) != 0 {
		t.Errorf("a usage mistake left %v", dirs)
	}
}

// A signal while an import's /metrics lingers ends the linger, and sets
// the exit status, as it does after a training run: the outputs stay.
func TestImportSignalDuringLinger(t *testing.T) {
	out := t.TempDir()
	in := newInterrupt(context.Background())
	stderr := &lineWaiter{re: regexp.MustCompile(`serving final metrics`), seen: make(chan struct{})}
	done := make(chan int, 1)
	var stdout strings.Builder
	go func() {
		done <- runWith(in, []string{"import", "-quiet", "-out", out, "-metrics-addr", "127.0.0.1:0", "-metrics-linger", "1h", kinetoDir + "rank0.json"}, &stdout, stderr)
	}()
	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("import ended (exit %d) before lingering:\n%s", code, stdout.String())
	}
	in.deliver(syscall.SIGTERM)
	var code int
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatal("import still lingering a minute after SIGTERM")
	}
	if code != 143 {
		t.Errorf("exit %d after SIGTERM, want 143", code)
	}
	if dirs := runDirs(t, out); len(dirs) != 1 || !fileExists(filepath.Join(dirs[0], "report.txt")) {
		t.Errorf("run directories %v: want one holding report.txt", dirs)
	}
}

// A run killed before its end leaves the report.txt it made at its start
// empty: report says so, naming the file, and fails.
func TestReportTextOfAKilledRun(t *testing.T) {
	run := filepath.Join(t.TempDir(), "20260101-000000-abcdef")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.txt", "trace.json", "profile.pb.gz"} {
		if err := os.WriteFile(filepath.Join(run, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runCmd(t, "report", run)
	if code != exitFail || !strings.HasPrefix(stderr, "profile-run: report: "+filepath.Join(run, "report.txt")+": empty file") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want exit %d and one line naming the empty report.txt", code, stderr, exitFail)
	}
	if stdout != "" {
		t.Errorf("stdout %q", stdout)
	}
}

// Given the -out directory, report names the runs in it that hold what
// it reads: for the text report, runs made with -trace off too; for the
// page, not a run whose trace is still empty (one being made, or one
// killed).
func TestReportOutDirSuggestsRunsItCanRead(t *testing.T) {
	out := t.TempDir()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mkrun := func(name string, files map[string]string) string {
		run := filepath.Join(out, name)
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, text := range files {
			if err := os.WriteFile(filepath.Join(run, f), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(filepath.Join(run, f), at, at); err != nil {
				t.Fatal(err)
			}
		}
		at = at.Add(time.Minute)
		return run
	}
	head := `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope","steps":"steps 0–1"},` + "\n" + `"traceEvents":[` + "\n"
	traced := mkrun("20260101-000000-aaaaaa", map[string]string{"trace.json": head + "]}", "report.txt": "=== rank 0 · all steps ===\n"})
	untraced := mkrun("20260101-000100-bbbbbb", map[string]string{"report.txt": "=== rank 0 · all steps ===\n"})
	mkrun("20260101-000200-cccccc", map[string]string{"trace.json": "", "report.txt": ""})

	code, _, stderr := runCmd(t, "report", out)
	want := out + " is an output directory holding 2 run directories (latest first: 20260101-000100-bbbbbb, 20260101-000000-aaaaaa), not a run directory: name one, e.g. the latest: profile-run report " + untraced + "\n"
	if code != exitFail || !strings.HasSuffix(stderr, want) {
		t.Errorf("text: exit %d, stderr %q; want exit %d ending %q", code, stderr, exitFail, want)
	}
	code, _, stderr = runCmd(t, "report", out, "--html")
	want = out + " is an output directory holding one run directory, not a run directory: profile-run report " + traced + " --html\n"
	if code != exitFail || !strings.HasSuffix(stderr, want) {
		t.Errorf("html: exit %d, stderr %q; want exit %d ending %q", code, stderr, exitFail, want)
	}
}

// -metrics-detail shapes the metrics served or pushed: with neither (the
// import's default, -metrics-addr off) it has nothing to shape, and is a
// usage mistake, as -metrics-linger is.
func TestMetricsDetailWithoutMetricsIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"import", "-metrics-detail", kinetoDir + "rank0.json"},
		append([]string{"-metrics-addr", "off", "-metrics-detail"}, small...),
	} {
		out := filepath.Join(t.TempDir(), "out")
		code, stdout, stderr := runCmd(t, append(args, "-out", out)...)
		if code != exitUsage || !strings.Contains(stderr, "-metrics-detail") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming -metrics-detail", args, code, stderr, exitUsage)
		}
		if strings.Contains(stdout, "records:") {
			t.Errorf("%q ran:\n%s", args, stdout)
		}
	}
}

// -pipeline-schedule gives the ideal bubble of a pipeline's stages: where
// no imported record carries a stage (the C++ framework's call logs never
// do) it has nothing to apply to, and a warning says so.
func TestImportPipelineScheduleWithoutStagesWarns(t *testing.T) {
	code, stdout, stderr := runCmd(t, "import", "-quiet", "-out", t.TempDir(), "-pipeline-schedule", "microbatches=4", seedDir+"calls.rank0", seedDir+"calls.rank1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "-pipeline-schedule microbatches=4 has no effect") {
		t.Errorf("no warning that -pipeline-schedule applies to nothing:\n%s", stderr)
	}
}

// An import takes a training run's output flags, and their rules:
// -call-log-size with -report off, whose call logs would go beside a
// report that is not written, is a usage error, not silently nothing.
func TestImportCallLogSizeWithReportOffIsAUsageError(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runCmd(t, "import", "-out", out, "-report", "off", "-call-log-size", "5", kinetoDir+"rank0.json")
	if code != exitUsage || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 ||
		!strings.Contains(stderr, "-call-log-size 5") || !strings.Contains(stderr, "-report is off") {
		t.Errorf("exit %d, stderr %q; want exit %d and one line naming -call-log-size 5 and -report off", code, stderr, exitUsage)
	}
	if strings.Contains(stdout, "records:") {
		t.Errorf("the import ran:\n%s", stdout)
	}
	if dirs := runDirs(t, out); len(dirs) != 0 {
		t.Errorf("a usage mistake left %v", dirs)
	}
	// -call-log-size 0 asks for no call log: nothing to refuse.
	if code, _, stderr := runCmd(t, "import", "-quiet", "-out", out, "-report", "off", "-call-log-size", "0", kinetoDir+"rank0.json"); code != 0 {
		t.Errorf("-call-log-size 0 -report off: exit %d\n%s", code, stderr)
	}
}

// setupFailed ends a run on -h quietly with 0, on a usage mistake with 2
// and the help to read, on any other setup error with 1 and the error;
// no error goes on.
func TestSetupFailed(t *testing.T) {
	cases := []struct {
		err    error
		code   int
		failed bool
		said   string
	}{
		{nil, exitOK, false, ""},
		{errHelp, exitOK, true, ""},
		{fmt.Errorf("parsing: %w", usagef("-steps: must be positive")), exitUsage, true, "profile-run: -steps: must be positive (see profile-run import -h)\n"},
		{errors.New("disk gone"), exitFail, true, "profile-run: disk gone\n"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		code, failed := setupFailed(c.err, &stderr, "profile-run import")
		if code != c.code || failed != c.failed || stderr.String() != c.said {
			t.Errorf("setupFailed(%v) = %d, %v, said %q; want %d, %v, %q", c.err, code, failed, stderr.String(), c.code, c.failed, c.said)
		}
	}
}
