package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// reportRun trains the built-in model with a known pipeline shape into a
// temporary directory and returns its run directory.
func reportRun(t *testing.T, args ...string) string {
	t.Helper()
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, append([]string{"-out", out, "-metrics-addr", "off", "-backend", "cpu", "-quiet", "-progress", "off", "-no-step-lines"}, args...)...)
	if code != exitOK {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	dirs := runDirs(t, out)
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	return dirs[0]
}

// chromium finds the browser or skips the test, saying why.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it): the page is not checked in a browser")
	return ""
}

// browse runs headless Chromium on the page with args and returns its
// stdout and the console messages the page produced.
func browse(t *testing.T, browser, page string, args ...string) (stdout string, console []string) {
	t.Helper()
	return browseURL(t, browser, "file://"+page, args...)
}

// browseURL is browse for any URL.
func browseURL(t *testing.T, browser, url string, args ...string) (stdout string, console []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A profile directory of its own, so runs do not share state.
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + t.TempDir(), "--window-size=1300,1700"}, args...)
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, errb.String())
	}
	for _, line := range strings.Split(errb.String(), "\n") {
		// Every console message, error or not, is logged as
		// "…:CONSOLE:…] "text", source: …"; the page logs nothing.
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return out.String(), console
}

// TestReportHTMLInChromium trains pp=2, vpp=2, 4 microbatches, keeps
// steps 1–2 in the trace, writes the HTML report and opens it in headless
// Chromium: the page lays out 2 ranks × 2 steps × 4 microbatches × 2
// chunks = 32 forward and 32 backward blocks, logs nothing to the console
// and fetches nothing; a screenshot is saved ($TRAINSCOPE_ARTIFACTS, else
// the test's temporary directory).
func TestReportHTMLInChromium(t *testing.T) {
	const ranks, steps, microbatches, chunks = 2, 2, 4, 2
	dir := reportRun(t, "-pp", "2", "-vpp", strconv.Itoa(chunks), "-layers", "8", "-width", "16", "-microbatch-size", "4",
		"-microbatches", strconv.Itoa(microbatches), "-steps", "4", "-trace-steps", "1-2")
	code, stdout, stderr := runCmd(t, "report", dir, "--html")
	if code != exitOK {
		t.Fatalf("report: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if stderr != "" {
		t.Errorf("report wrote to stderr: %s", stderr)
	}
	want := ranks * steps * microbatches * chunks
	if !strings.Contains(stdout, fmt.Sprintf("2 steps (steps 1–2), %d forward and %d backward blocks", want, want)) {
		t.Errorf("report said %q, want %d forward and %d backward blocks of steps 1–2", stdout, want, want)
	}
	page := filepath.Join(dir, "report.html")
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: nothing that makes a browser fetch.
	if m := regexp.MustCompile(`(?i)(\ssrc=|<link|@import|url\((?:["']?)(?:https?:|//))`).Find(html); m != nil {
		t.Errorf("the page refers to something outside it: %q", m)
	}
	if !bytes.Contains(html, []byte("steps 1–2")) {
		t.Error("the page does not say which steps it covers")
	}
	if n := len(html); n > 1<<20 {
		t.Errorf("the page is %d bytes for 2 steps of 2 ranks", n)
	}

	browser := chromium(t)
	dom, console := browse(t, browser, page, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	// Counted by the browser: the blocks in the DOM, and those its layout
	// gave a width (the page's script writes that count).
	for _, phase := range []string{"fwd", "bwd"} {
		if n := len(regexp.MustCompile(`<rect class="blk `+phase+` m\d+"`).FindAllString(dom, -1)); n != want {
			t.Errorf("%d %s blocks in the DOM, want %d", n, phase, want)
		}
	}
	m := regexp.MustCompile(`<output id="drawn" data-forward="(\d+)" data-backward="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's script did not count the blocks drawn:\n%.2000s", dom)
	}
	if m[1] != strconv.Itoa(want) || m[2] != strconv.Itoa(want) {
		t.Errorf("the browser drew %s forward and %s backward blocks, want %d each", m[1], m[2], want)
	}
	if n := strings.Count(dom, `<svg class="gantt"`); n != steps {
		t.Errorf("%d charts, want one per step (%d)", n, steps)
	}

	shots := os.Getenv("TRAINSCOPE_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(shots, "report-html.png")
	if _, console := browse(t, browser, page, "--screenshot="+shot); len(console) > 0 {
		t.Errorf("console messages while taking the screenshot:\n%s", strings.Join(console, "\n"))
	}
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 10<<10 {
		t.Errorf("screenshot %s: %d bytes, not a PNG of a page", shot, len(png))
	}
	t.Logf("screenshot: %s", shot)
}

// The console check is not blind: a page with a script error is caught.
func TestBrowserConsoleCheck(t *testing.T) {
	browser := chromium(t)
	page := filepath.Join(t.TempDir(), "bad.html")
	if err := os.WriteFile(page, []byte(`<!DOCTYPE html><p>x</p><script>nosuchFunction();</script>`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, console := browse(t, browser, page, "--dump-dom")
	if len(console) != 1 || !strings.Contains(console[0], "nosuchFunction") {
		t.Errorf("console %q, want the one ReferenceError", console)
	}
}

func TestReportErrors(t *testing.T) {
	tmp := t.TempDir()
	mkdir := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(dir, text string) {
		if err := os.WriteFile(filepath.Join(dir, "trace.json"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	empty := mkdir("empty")
	cut := mkdir("cut")
	head := `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope","steps":"steps 0–1"},` + "\n" + `"traceEvents":[` + "\n"
	write(cut, head+`{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cpu:0)"}},`+"\n"+`{"ph":"X","name":"st`)
	blank := mkdir("blank")
	write(blank, "")
	nosteps := mkdir("nosteps")
	write(nosteps, head+`{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cpu:0)"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},
{"ph":"X","name":"setup","cat":"host","ts":1.0005,"dur":2.0005,"pid":1,"tid":1,"args":{}}
]}`)
	kineto := mkdir("kineto")
	k, err := os.ReadFile(kinetoDir + "rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	write(kineto, string(k))
	// An -out directory: two runs begun in the same second, the one named
	// ...-ffffff written first; a directory without a trace is no run.
	outdir := mkdir("outdir")
	for i, name := range []string{"20260101-000000-ffffff", "20260101-000000-aaaaaa"} {
		run := mkdir(filepath.Join("outdir", name))
		write(run, head+"]}")
		at := time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		if err := os.Chtimes(filepath.Join(run, "trace.json"), at, at); err != nil {
			t.Fatal(err)
		}
	}
	mkdir(filepath.Join("outdir", "notes"))
	oneRun := mkdir("onerun")
	write(mkdir(filepath.Join("onerun", "20260101-000000-cccccc")), head+"]}")
	file := filepath.Join(tmp, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // regexp on stderr
	}{
		{"no run directory", []string{"--html"}, exitUsage, `no run directory \(profile-run report RUN_DIR \[--html\]\) \(see profile-run report -h\)`},
		{"no text report", []string{blank}, exitFail, `blank/report\.txt: no such file: the run wrote no text report \(was it made with -report off, or -report PATH\?\); profile-run report \S+/blank --html draws its trace$`},
		{"no report, no trace", []string{empty}, exitFail, `empty/report\.txt: no such file: the directory holds neither report\.txt nor trace\.json`},
		{"-o without --html", []string{empty, "-o", filepath.Join(tmp, "page.html")}, exitUsage, `-o names the HTML page: add --html`},
		{"an -out directory, text", []string{outdir}, exitFail,
			`outdir is an output directory holding 2 run directories \(latest first: 20260101-000000-aaaaaa, 20260101-000000-ffffff\), not a run directory: name one, e\.g\. the latest: profile-run report \S+/outdir/20260101-000000-aaaaaa$`},
		{"two directories", []string{empty, cut, "--html"}, exitUsage, regexp.QuoteMeta("one run directory at a time, not 2 (" + empty + ", " + cut + "); for one job's runs on several hosts, import their traces together first (profile-run import " + filepath.Join(empty, "trace.json") + " " + filepath.Join(cut, "trace.json") + "; run each host with -trace-steps all for every step)")},
		{"unknown flag", []string{empty, "--pdf"}, exitUsage, `flag provided but not defined: -pdf`},
		{"missing directory", []string{filepath.Join(tmp, "absent"), "--html"}, exitFail, `absent: no such run directory`},
		{"not a directory", []string{file, "--html"}, exitFail, `afile: not a run directory`},
		{"no trace", []string{empty, "--html"}, exitFail, `empty/trace\.json: no such file: .*-trace off`},
		{"an -out directory", []string{outdir, "--html"}, exitFail,
			`outdir is an output directory holding 2 run directories \(latest first: 20260101-000000-aaaaaa, 20260101-000000-ffffff\), not a run directory: name one, e\.g\. the latest: profile-run report \S+/outdir/20260101-000000-aaaaaa --html`},
		{"an -out directory of one run", []string{oneRun, "--html"}, exitFail,
			`onerun is an output directory holding one run directory, not a run directory: profile-run report \S+/onerun/20260101-000000-cccccc --html`},
		{"empty trace", []string{blank, "--html"}, exitFail, `blank/trace\.json: empty file: the run wrote no trace .*-trace-steps`},
		{"truncated trace", []string{cut, "--html"}, exitFail, `cut/trace\.json: byte \d+: unexpected end of input \(truncated\?\)`},
		{"no steps", []string{nosteps, "--html"}, exitFail, `nosteps/trace\.json: no records with a step label`},
		{"a Kineto trace", []string{kineto, "--html"}, exitFail, `kineto/trace\.json: a Chrome/Kineto trace, not a trace trainscope wrote`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append([]string{"report"}, tc.args...)...)
			if code != tc.code || !regexp.MustCompile(tc.want).MatchString(strings.TrimSuffix(stderr, "\n")) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and one line matching %q", code, stderr, tc.code, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
	for _, dir := range []string{empty, blank, cut, nosteps, kineto} {
		if left, _ := filepath.Glob(filepath.Join(dir, "*.html")); len(left) > 0 {
			t.Errorf("a failed report left %v", left)
		}
	}
}

// report RUN_DIR prints the text report the run wrote, as it wrote it.
func TestReportPrintsTheTextReport(t *testing.T) {
	out := t.TempDir()
	if code, _, stderr := runCmd(t, "-out", out, "-metrics-addr", "off", "-steps", "2", "-layers", "4", "-width", "16", "-microbatch-size", "4"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	runs, _ := filepath.Glob(filepath.Join(out, "*"))
	if len(runs) != 1 {
		t.Fatalf("%d run directories", len(runs))
	}
	want, err := os.ReadFile(filepath.Join(runs[0], "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, "report", runs[0])
	if code != 0 || stderr != "" {
		t.Fatalf("report: exit %d, stderr %q", code, stderr)
	}
	if stdout != string(want) || !strings.Contains(stdout, "=== rank 0 · all steps ===") {
		t.Errorf("printed %d bytes, not the run's report.txt (%d bytes):\n%.300s", len(stdout), len(want), stdout)
	}
}

// -o replaces only a page this command wrote: refreshing report.html
// works, and the run's trace, its text report or any other file is left
// as it was, with an error naming it.
func TestReportNeverReplacesOtherFiles(t *testing.T) {
	dir := reportRun(t, append([]string{"-pp", "2", "-steps", "2"}, "-layers", "4", "-width", "16", "-microbatch-size", "4", "-microbatches", "4")...)
	page := filepath.Join(dir, "report.html")
	for i := range 2 { // the second run refreshes the first's page
		code, _, stderr := runCmd(t, "report", dir, "--html")
		if code != exitOK {
			t.Fatalf("run %d: exit %d: %s", i+1, code, stderr)
		}
		if b, err := os.ReadFile(page); err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
			t.Fatalf("run %d: %s: %v %.40q", i+1, page, err, b)
		}
	}
	notes := filepath.Join(dir, "notes.html")
	if err := os.WriteFile(notes, []byte("<!DOCTYPE html>\n<html><title>my notes</title>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"trace.json", "report.txt", "notes.html"} {
		path := filepath.Join(dir, name)
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCmd(t, "report", dir, "--html", "-o", path)
		want := "-o " + path + ": exists and is not an HTML report profile-run report wrote: not replaced"
		if code != exitUsage || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("-o %s: exit %d, stdout %q, stderr %q; want exit %d and %q", name, code, stdout, stderr, exitUsage, want)
		}
		if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
			t.Errorf("%s was changed (%v)", name, err)
		}
	}
	other := filepath.Join(t.TempDir(), "page.html")
	if code, _, stderr := runCmd(t, "report", dir, "--html", "-o", other); code != exitOK {
		t.Fatalf("-o a new path: exit %d: %s", code, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".report-*")); len(left) > 0 {
		t.Errorf("temporary pages left: %v", left)
	}
}

// TestReportHTMLOfWrappedKernels: a wrapped pipeline's trace — step
// ranges, traced kernels with no host range (CUPTI's), sends between the
// stages — read back by `report --html`: every kernel returns (none left
// out as a device event without a host one), each 1 ms kernel 2 ms from
// the next is a box of its own, and the browser lays out as many. The
// same kernels labelled with the NVTX ranges they were launched in (the
// first five of a step forward, microbatches 0–4, the rest backward)
// come back as forward and backward blocks instead, as many of each.
func TestReportHTMLOfWrappedKernels(t *testing.T) {
	const ranks, steps, perStep = 2, 2, 10
	for _, labelled := range []bool{false, true} {
		dir := t.TempDir()
		writeTrace(t, filepath.Join(dir, "trace.json"), wrappedKernels(ranks, steps, perStep, labelled))
		code, stdout, stderr := runCmd(t, "report", dir, "--html")
		n, half := ranks*steps*perStep, ranks*steps*perStep/2
		want := fmt.Sprintf("%d traced kernels drawn as %d boxes", n, n)
		if labelled {
			want = fmt.Sprintf("%d forward and %d backward blocks, %s", half, half, want)
		}
		if code != exitOK || !strings.Contains(stdout, want) || strings.Contains(stderr, "left out") {
			t.Fatalf("labelled %v: report --html: exit %d, want %q, no warning\nstdout %s\nstderr %s", labelled, code, want, stdout, stderr)
		}
		browser := chromium(t)
		dom, console := browse(t, browser, filepath.Join(dir, "report.html"), "--dump-dom")
		if len(console) > 0 {
			t.Errorf("labelled %v: console messages:\n%s", labelled, strings.Join(console, "\n"))
		}
		m := regexp.MustCompile(`<output id="drawn"[^>]* data-forward="(\d+)" data-backward="(\d+)" data-kernels="(\d+)"`).FindStringSubmatch(dom)
		wantDrawn := []string{"0", "0", strconv.Itoa(n)}
		if labelled {
			wantDrawn = []string{strconv.Itoa(half), strconv.Itoa(half), "0"}
		}
		if m == nil || !slices.Equal(m[1:], wantDrawn) {
			t.Errorf("labelled %v: the browser drew forward, backward and kernel boxes %v, want %v", labelled, m, wantDrawn)
		}
	}
}

// wrappedKernels is a wrapped two-stage pipeline's records: per rank and
// step, a step range, perStep kernels of 1 ms 2 ms apart (labelled: the
// first half forward, microbatch k, the rest backward), and a send from
// rank 0 to rank 1.
func wrappedKernels(ranks, steps, perStep int, labelled bool) []profiler.Record {
	var recs []profiler.Record
	add := func(r profiler.Record) {
		r.ID = uint64(len(recs) + 1)
		recs = append(recs, r)
	}
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	dev := runtime.Device{Type: runtime.CUDA, Index: 0}
	for rank := range ranks {
		for step := range steps {
			base := ms(float64(step) * 50)
			l := profiler.NoLabels
			l.Step, l.Stage = int32(step), int16(rank)
			add(profiler.Record{Name: profiler.StepName, Kind: profiler.KindHost, Rank: rank, Device: dev, Labels: l, HostStart: base, HostEnd: base + ms(45)})
			for k := range perStep {
				at := base + ms(1+2*float64(k)+float64(rank))
				kl := l
				if labelled {
					kl.Phase, kl.Chunk, kl.Microbatch = profiler.Forward, 0, int32(k)
					if k >= perStep/2 {
						kl.Phase, kl.Microbatch = profiler.Backward, int32(perStep-1-k)
					}
				}
				add(profiler.Record{Name: "sm90_xmma_gemm", Kind: profiler.KindKernel, Rank: rank, Device: dev, Stream: 7, Labels: kl,
					HostStart: at, HostEnd: at, HasDevice: true, DeviceStart: at, DeviceEnd: at + ms(1)})
			}
			op, peer := "Send", 1
			if rank == 1 {
				op, peer = "Recv", 0
			}
			at := base + ms(40)
			add(profiler.Record{Name: op, Kind: profiler.KindP2P, Rank: rank, Device: dev, Stream: 9, Labels: l, HostStart: at, HostEnd: at + ms(0.01),
				HasDevice: true, DeviceStart: at, DeviceEnd: at + ms(1),
				Collective: profiler.Collective{Op: op, Bytes: 1 << 20, Count: 1 << 18, DType: "float32", Peer: int32(peer), Root: -1, Group: "nccl:00000000000000aa", GroupSize: 2, GroupRank: int32(rank), Seq: uint64(step)}})
		}
	}
	return recs
}

// writeTrace writes recs as a Chrome trace to path.
func writeTrace(t *testing.T, path string, recs []profiler.Record) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chrometrace.Write(f, recs); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A page whose -o directory is missing: the error names the page, not
// the temporary file it is written through.
func TestReportPageInAMissingDirectory(t *testing.T) {
	out := t.TempDir()
	if code, _, stderr := runCmd(t, append([]string{"-out", out, "-metrics-addr", "off", "-quiet"}, small...)...); code != exitOK {
		t.Fatalf("training: exit %d: %s", code, stderr)
	}
	runs, err := os.ReadDir(out)
	if err != nil || len(runs) != 1 {
		t.Fatalf("run directories %v, %v", runs, err)
	}
	page := filepath.Join(out, "absent", "page.html")
	code, _, stderr := runCmd(t, "report", filepath.Join(out, runs[0].Name()), "--html", "-o", page)
	want := page + ": cannot write the page in " + filepath.Dir(page) + ": no such file or directory\n"
	if code != exitFail || !strings.HasSuffix(stderr, want) || strings.Contains(stderr, ".report-") {
		t.Errorf("exit %d, stderr %q; want exit %d ending %q", code, stderr, exitFail, want)
	}
}

// TestSummaryNamesTheHTMLCommand: a run's summary names the command that
// draws its trace as a page, and that command, run as printed, writes
// RUN_DIR/report.html. A trace written elsewhere (-trace PATH), which
// profile-run report does not look for, gets no such line.
func TestSummaryNamesTheHTMLCommand(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "-out", out, "-metrics-addr", "off", "-backend", "cpu", "-quiet", "-progress", "off", "-no-step-lines", "-steps", "3")
	if code != exitOK {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`(?m)^\s*html: profile-run (report \S+ --html) `).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no html: line in the summary:\n%s", stdout)
	}
	args := strings.Fields(m[1])
	dirs := runDirs(t, out)
	if len(dirs) != 1 || args[1] != dirs[0] {
		t.Fatalf("the html: line names %q; the run directories are %v", args[1], dirs)
	}
	if code, so, se := runCmd(t, args...); code != exitOK {
		t.Fatalf("profile-run %s: exit %d\n%s\n%s", m[1], code, so, se)
	}
	if fi, err := os.Stat(filepath.Join(dirs[0], "report.html")); err != nil || fi.Size() == 0 {
		t.Fatalf("report.html after the command the summary names: %v", err)
	}

	elsewhere := filepath.Join(t.TempDir(), "t.json")
	code, stdout, stderr = runCmd(t, "-out", t.TempDir(), "-trace", elsewhere, "-metrics-addr", "off", "-backend", "cpu", "-quiet", "-progress", "off", "-no-step-lines", "-steps", "3")
	if code != exitOK {
		t.Fatalf("training with -trace %s: exit %d\n%s\n%s", elsewhere, code, stdout, stderr)
	}
	if !strings.Contains(stdout, elsewhere) || strings.Contains(stdout, "html: ") {
		t.Errorf("with -trace elsewhere, want the trace named and no html: line:\n%s", stdout)
	}
}

// TestManyRanksSummedOnScreen: with 9 ranks (pp 3 × dp 3) the summary on
// stdout holds one table for all ranks, whose step row counts 9 ranks × 3
// steps, and says each rank's table is in the report file, which holds
// all 9; with 8 ranks (pp 2 × dp 4) stdout keeps a table per rank.
func TestManyRanksSummedOnScreen(t *testing.T) {
	for _, c := range []struct {
		ranks  int
		layout []string
	}{
		{9, []string{"-pp", "3", "-dp", "3", "-layers", "6", "-microbatches", "6"}},
		{8, []string{"-pp", "2", "-dp", "4", "-layers", "4"}},
	} {
		stdout, file := screenAndReport(t, c.layout...)
		if n := strings.Count(file, "=== rank "); n != c.ranks {
			t.Errorf("%d ranks: report.txt has %d rank tables", c.ranks, n)
		}
		perRank := strings.Count(stdout, "=== rank ")
		if c.ranks <= 8 {
			if perRank != c.ranks || strings.Contains(stdout, "=== all ") {
				t.Errorf("%d ranks: stdout has %d rank tables (want %d) and no summed one:\n%.2000s", c.ranks, perRank, c.ranks, stdout)
			}
			continue
		}
		m := regexp.MustCompile(`(?m)^=== all (\d+) ranks · all steps ===\n.*\nstep +(\d+) `).FindStringSubmatch(stdout)
		if m == nil || m[1] != strconv.Itoa(c.ranks) || m[2] != strconv.Itoa(3*c.ranks) || perRank != 0 {
			t.Errorf("%d ranks: want one table of all ranks whose step row counts %d, and no rank's table on stdout; got %q, %d rank tables:\n%.3000s", c.ranks, 3*c.ranks, m, perRank, stdout)
		}
		if !strings.Contains(stdout, "each rank's is in the report file") {
			t.Errorf("%d ranks: stdout does not say where each rank's table is", c.ranks)
		}
	}
}

// TestWideJobScreenShowsStandouts: with 36 ranks (pp 6 × dp 6) the
// per-rank tables on stdout hold 16 ranks' lines, said so above each;
// those of the step breakdown are the ranks with the longest mean steps
// and those of the pipeline analysis the ranks that caused the most
// waiting, checked against report.txt, which holds every rank's line.
func TestWideJobScreenShowsStandouts(t *testing.T) {
	stdout, file := screenAndReport(t, "-pp", "6", "-dp", "6", "-layers", "12", "-microbatches", "6")
	for _, c := range []struct {
		section, intro string
		col            int // the column the shown ranks lead in
	}{
		{"=== where the steps went", "the 16 of 36 ranks with the longest mean step", 3},
		{"=== pipeline analysis", "the 16 of 36 ranks that caused the most waiting", 7},
	} {
		shown := rankRows(t, stdout, c.section, "  Rank  Stage")
		all := rankRows(t, file, c.section, "  Rank  Stage")
		if len(all) != 36 || len(shown) != 16 {
			t.Fatalf("%s: %d rows on stdout, %d in report.txt; want 16 and 36", c.section, len(shown), len(all))
		}
		if !strings.Contains(stdout, c.intro) {
			t.Errorf("stdout lacks %q", c.intro)
		}
		least := math.Inf(1)
		for rank, row := range shown {
			if all[rank] == nil || all[rank][c.col] != row[c.col] {
				t.Errorf("%s: rank %d on stdout %v, in report.txt %v", c.section, rank, row, all[rank])
			}
			least = min(least, num(t, row[c.col]))
		}
		for rank, row := range all {
			if _, ok := shown[rank]; !ok && num(t, row[c.col]) > least {
				t.Errorf("%s: rank %d (%s) left out, but a rank shown has %.3f", c.section, rank, row[c.col], least)
			}
		}
	}
}

// TestDeepPipelineScreenBandsStages: with 17 stages (pp 17, no data
// parallelism) the pipeline analysis on stdout sums the stages in bands
// of two (nine lines, the last of stage 16 alone) and, no rank having
// waited at a collective, keeps the ranks that communicated the most;
// report.txt keeps a line per stage.
func TestDeepPipelineScreenBandsStages(t *testing.T) {
	stdout, file := screenAndReport(t, "-pp", "17", "-vpp", "1", "-layers", "17")
	if !strings.Contains(stdout, "17 stages, summed in bands of 2 consecutive") ||
		!strings.Contains(stdout, "no rank waited at a collective; the 16 of 17 ranks with the most communication per step") {
		t.Errorf("stdout lacks the bands' or the rank lines' heading:\n%s", stdout)
	}
	bands := stageLines(t, stdout)
	want := []string{"0–1 6", "2–3 6", "4–5 6", "6–7 6", "8–9 6", "10–11 6", "12–13 6", "14–15 6", "16 3"}
	if !slices.Equal(bands, want) {
		t.Errorf("stdout's stage lines (stages, ranks×steps) %q, want %q", bands, want)
	}
	stages := stageLines(t, file)
	if len(stages) != 17 || stages[0] != "0 3" || stages[16] != "16 3" || strings.Contains(file, "summed in bands") {
		t.Errorf("report.txt's stage lines %q, want 17, unbanded", stages)
	}
}

// stageLines is the first two fields, stages and ranks×steps, of each
// line of the pipeline analysis' per-stage table in text.
func stageLines(t *testing.T, text string) []string {
	t.Helper()
	i := strings.Index(text, "=== pipeline analysis")
	j := strings.Index(text[max(i, 0):], "  Stage  Ranks×steps")
	if i < 0 || j < 0 {
		t.Fatalf("no per-stage table in the pipeline analysis")
	}
	var lines []string
	stage := regexp.MustCompile(`^\d+(–\d+)?$`)
	for _, line := range strings.Split(text[i+j:], "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || !stage.MatchString(f[0]) {
			break
		}
		lines = append(lines, f[0]+" "+f[1])
	}
	return lines
}

// screenAndReport trains 3 steps on the CPU with layout (profile-run
// flags) and returns what it printed and its report.txt.
func screenAndReport(t *testing.T, layout ...string) (stdout, report string) {
	t.Helper()
	stdout, dir := trainOnCPU(t, append([]string{"-steps", "3"}, layout...)...)
	file, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return stdout, string(file)
}

// trainOnCPU runs profile-run on the CPU backend with args after
// -out (a temporary directory), -metrics-addr off, -backend cpu,
// -progress off and -no-step-lines, and returns what it printed and its
// run directory.
func trainOnCPU(t *testing.T, args ...string) (stdout, runDir string) {
	t.Helper()
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, append(cpuRunFlags(out), args...)...)
	if code != exitOK {
		t.Fatalf("%v: exit %d\n%s\n%s", args, code, stdout, stderr)
	}
	dirs := runDirs(t, out)
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	return stdout, dirs[0]
}

// cpuRunFlags are trainOnCPU's flags before its own, out the -out
// directory.
func cpuRunFlags(out string) []string {
	return []string{"-out", out, "-metrics-addr", "off", "-backend", "cpu", "-progress", "off", "-no-step-lines"}
}

// rankRows parses the rows of the table headed by header in the section
// of text that starts with section: rank → its fields.
func rankRows(t *testing.T, text, section, header string) map[int][]string {
	t.Helper()
	i := strings.Index(text, section)
	if i < 0 {
		t.Fatalf("no %q section", section)
	}
	text = text[i:]
	j := strings.Index(text, header)
	if j < 0 {
		t.Fatalf("%s: no table headed %q", section, header)
	}
	rows := map[int][]string{}
	for _, line := range strings.Split(text[j:], "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 {
			break
		}
		r, err := strconv.Atoi(f[0])
		if err != nil {
			break
		}
		rows[r] = f
	}
	return rows
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// TestReportPageSaysWhatTheRunRanOn: the page names what the run ran on,
// from its summary.json; a summary.json that does not read is warned of,
// and the page is written without it.
func TestReportPageSaysWhatTheRunRanOn(t *testing.T) {
	run := reportRun(t, "-pp", "2", "-vpp", "1", "-layers", "4", "-width", "16", "-microbatches", "2", "-microbatch-size", "2", "-steps", "2")
	page := filepath.Join(run, "report.html")
	code, _, stderr := runCmd(t, "report", run, "--html")
	if code != exitOK {
		t.Fatalf("report --html: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	hostname, _ := os.Hostname()
	line := regexp.MustCompile(`<p class="sub" id="environment">ran on ([^<]*)</p>`).FindSubmatch(b)
	if line == nil || !strings.Contains(string(line[1]), "host "+hostname) || !strings.HasSuffix(string(line[1]), "profile-run (devel)") {
		t.Errorf("environment line %q; want this host and the test's build", line)
	}
	if model := cpuModel("/proc/cpuinfo"); model != "" && line != nil && !strings.HasPrefix(string(line[1]), model+" (") {
		t.Errorf("environment line %q does not start with the host's processor %q", line[1], model)
	}
	if err := os.WriteFile(filepath.Join(run, "summary.json"), []byte(`{"schema": "trainscope.summary/v1", "steps": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(page); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, "report", run, "--html")
	if b, err := os.ReadFile(page); code != exitOK || err != nil || bytes.Contains(b, []byte(`id="environment"`)) ||
		!strings.Contains(stderr, "summary.json") || !strings.Contains(stderr, "the page does not say what the run ran on") {
		t.Errorf("a broken summary.json: exit %d, %v, stderr %q", code, err, stderr)
	}
}
