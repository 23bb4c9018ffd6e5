package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	kinetoDir = "../../internal/importer/testdata/kineto/"
	seedDir   = "../../internal/importer/testdata/seed/"
)

// runDirs lists the run directories under out.
func runDirs(t *testing.T, out string) []string {
	t.Helper()
	entries, err := os.ReadDir(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, filepath.Join(out, e.Name()))
	}
	return dirs
}

// onlyRunReport returns the report.txt of the one run directory under out.
func onlyRunReport(t *testing.T, out string) string {
	t.Helper()
	dirs := runDirs(t, out)
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	report, err := os.ReadFile(filepath.Join(dirs[0], "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(report)
}

// reportRow finds name's row in the report's table of rank and returns
// its fields after the name.
func reportRow(t *testing.T, report, rank, name string) []string {
	t.Helper()
	_, section, ok := strings.Cut(report, "=== rank "+rank+" · all steps ===\n")
	if !ok {
		t.Fatalf("no table of rank %s in\n%s", rank, report)
	}
	section, _, _ = strings.Cut(section, "\n\n")
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.Fields(strings.TrimPrefix(line, name))
		}
	}
	t.Fatalf("no row %q for rank %s in\n%s", name, rank, section)
	return nil
}

func TestImportKinetoTraces(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, kinetoDir+"rank0.json", kinetoDir+"rank1.json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"rank0.json: Chrome/Kineto trace, rank 0, 10 ranges", "rank1.json: Chrome/Kineto trace, rank 1, 10 ranges", "records: 20 collected"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	report := onlyRunReport(t, out)
	dirs := runDirs(t, out)
	// The all-reduce kernels ran 400 µs on rank 0 and 410 µs on rank 1;
	// their launches took 8 µs of host time.
	ar := "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
	for rank, dev := range map[string]string{"0": "400.000", "1": "410.000"} {
		f := reportRow(t, report, rank, ar)
		if f[0] != "1" || f[1] != "8.000" || f[3] != dev {
			t.Errorf("rank %s all-reduce row %q, want count 1, host 8.000, device %s", rank, f, dev)
		}
	}
	// The step encloses everything on the host: 2000 µs, 100%.
	if f := reportRow(t, report, "0", "step"); f[1] != "2000.000" || f[2] != "100.00" {
		t.Errorf("step row %q", f)
	}
	// Each rank's all-reduce and all-gather on group "0" (without a
	// "Seq": numbered in order) are matched across the two files; rank 1's
	// trace starts 50 µs later, so it arrives last at both.
	_, section, ok := strings.Cut(report, "=== collectives across ranks: skew, waiting, stragglers, clocks")
	if !ok || !strings.Contains(section, "collectives: 2 matched across ranks; arrival skew p50 0.050 ms") ||
		!strings.Contains(section, "straggler: rank 1 caused 100% of the waiting") {
		t.Errorf("report's collectives section:\n%s", section)
	}
	// ProfilerStep#3 is each rank's step range, but the 2 collectives the
	// ranks share are too few to align their clocks on (docs/analysis.md:
	// a rank must be in 8), so the step is left out of the figures,
	// which the section says, and the collectives are matched without it.
	for _, want := range []string{
		"the step analysis found no complete step of 1 (first problem: step 3: clock alignment: rank 1 shares fewer than 8 complete collectives",
		"clocks not aligned: only 2 collectives matched across ranks, and alignment needs a rank in at least 8; departures",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("collectives section lacks %q:\n%s", want, section)
		}
	}
	// Its HTML page draws the step: each rank's kernel and its
	// all-reduce and all-gather.
	code, stdout, stderr = runCmd(t, "report", dirs[0], "--html")
	if code != exitOK || !strings.Contains(stdout, "1 step (step 3), 2 traced kernels drawn as 2 boxes, 4 transfers") {
		t.Errorf("report --html: exit %d\n%s\n%s", code, stdout, stderr)
	}
	raw, err := os.ReadFile(filepath.Join(dirs[0], "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []struct {
			Ph   string  `json:"ph"`
			Name string  `json:"name"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &trace); err != nil {
		t.Fatal(err)
	}
	durs := map[int64]int{} // whole microseconds (the exporter adds a quarter of a nanosecond)
	for _, ev := range trace.TraceEvents {
		if ev.Ph == "X" && ev.Name == ar {
			durs[int64(ev.Dur)]++
		}
	}
	// Each all-reduce is drawn on the host (8 µs launch) and the device.
	if durs[8] != 2 || durs[400] != 1 || durs[410] != 1 {
		t.Errorf("all-reduce slices in the trace by duration: %v", durs)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "profile.pb.gz")); err != nil {
		t.Error(err)
	}
	// A second import never overwrites the first.
	if code, _, stderr := runCmd(t, "import", "-out", out, kinetoDir+"rank0.json"); code != exitOK {
		t.Fatalf("second import: exit %d: %s", code, stderr)
	}
	if dirs := runDirs(t, out); len(dirs) != 2 {
		t.Errorf("run directories after two imports: %v", dirs)
	}
}

// TestImportKinetoNestedSteps: traces whose ProfilerStep#N lie inside a
// range of the loop's own label their steps without a step range to
// measure them by; one line says the steps cannot be accounted, not a
// "no step range" per step and rank.
func TestImportKinetoNestedSteps(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"rank0.json", "rank1.json"} {
		raw, err := os.ReadFile(kinetoDir + name)
		if err != nil {
			t.Fatal(err)
		}
		// A "train_loop" range on the step's thread, around the step.
		loop := `"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "train_loop", "pid": 4001, "tid": 4001, "ts": 50.000, "dur": 3000.000},`
		if name == "rank1.json" {
			loop = strings.ReplaceAll(loop, "4001", "4002")
		}
		text := strings.Replace(string(raw), `"traceEvents": [`, loop, 1)
		if text == string(raw) {
			t.Fatal("fixture has no traceEvents")
		}
		files = append(files, filepath.Join(dir, name))
		if err := os.WriteFile(files[len(files)-1], []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, files[0], files[1])
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	_, section, _ := strings.Cut(onlyRunReport(t, out), "=== collectives across ranks")
	want := "the steps cannot be accounted: the records label 1 step but carry no pipeline phase (forward, backward or optimizer) on their device work and no \"step\" range to measure a step by, as in a Kineto trace whose ProfilerStep#N ranges lie inside another range (they label the steps; a step range is top-level); the collectives are matched without steps"
	if !strings.Contains(section, want) || strings.Contains(section, "no step range") {
		t.Errorf("collectives section, want %q and no \"no step range\":\n%s", want, section)
	}
}

// One report of one table is counted as one, in the file's line and in
// the check against the call log.
func TestImportSeedLogWithOneReportTable(t *testing.T) {
	code, stdout, stderr := runCmd(t, "import", "-out", t.TempDir(), "-quiet", seedDir+"calls.rank1", seedDir+"report.rank1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"report.rank1: framework profiler text, rank 1, 0 ranges, 1 report table\n",
		"  the report table agrees with the call log (counts and totals)\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

func TestImportSeedLogWithReport(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, "-quiet",
		seedDir+"calls.rank0", seedDir+"report.rank0", seedDir+"calls.rank1", seedDir+"report.rank1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "the 3 report tables agree with the call log") || strings.Contains(stderr, "disagree") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// The call log marks no steps and holds no collective: the trace has
	// nothing profile-run report --html could draw, so no command to
	// draw it is suggested.
	if !strings.Contains(stdout, "trace: ") || strings.Contains(stdout, "html: ") {
		t.Errorf("want a trace and no html: line:\n%s", stdout)
	}
	// A report holds no ranges; its summary line names the rank of its
	// tables ("=== Profiler Report for Rank N ===").
	for _, want := range []string{
		"report.rank0: framework profiler text, rank 0, 0 ranges, 2 report tables",
		"report.rank1: framework profiler text, rank 1, 0 ranges, 1 report table\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	report := onlyRunReport(t, out)
	// matmul_backward: 3000 + 2000 µs host, 2950 + 1990 µs device.
	if f := reportRow(t, report, "0", "matmul_backward"); f[0] != "2" || f[1] != "5000.000" || f[3] != "4940.000" {
		t.Errorf("matmul_backward row %q", f)
	}
	// Rank 1: two matmuls on cuda:1, 1900 + 1700 µs.
	if f := reportRow(t, report, "1", "matmul"); f[0] != "2" || f[1] != "3600.000" || f[3] != "3500.000" {
		t.Errorf("rank 1 matmul row %q", f)
	}
	if !strings.Contains(report, "Peak device memory (rank 0): 640.00 MB") {
		t.Errorf("report lacks rank 0's peak of 640 MB:\n%s", report)
	}
}

// TestImportRepeatedRank: a file named twice is a usage mistake, and a
// copy of a rank's file adds nothing: its records are left out with a
// warning naming both files, so the step and its ranges count once.
func TestImportRepeatedRank(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(kinetoDir + "rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "copy.json")
	if err := os.WriteFile(dup, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(dup, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // regexp on stderr
	}{
		{"one path twice", []string{kinetoDir + "rank0.json", kinetoDir + "rank0.json"}, `kineto/rank0\.json is given twice: give each file once`},
		{"two paths to one file", []string{dup, kinetoDir + "rank1.json", link}, `copy\.json and .*link\.json are the same file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "-"))
			code, _, stderr := runCmd(t, append([]string{"import", "-out", out}, tc.args...)...)
			if code != exitUsage || !regexp.MustCompile(tc.want).MatchString(stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d matching %q", code, stderr, exitUsage, tc.want)
			}
			if dirs := runDirs(t, out); len(dirs) != 0 {
				t.Errorf("a refused import left %v", dirs)
			}
		})
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runCmd(t, "import", "-out", out, kinetoDir+"rank0.json", kinetoDir+"rank1.json", dup)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	warn := "rank 0 is in both " + kinetoDir + "rank0.json and " + dup + ", over the same time or steps: " + dup + "'s 10 ranges of rank 0 are left out"
	if !strings.Contains(stderr, warn) {
		t.Errorf("stderr lacks %q:\n%s", warn, stderr)
	}
	for _, want := range []string{
		"importing 3 file(s), 20 ranges",
		dup + ": Chrome/Kineto trace, 0 ranges (rank 0 left out: an earlier file holds them",
		"records: 20 collected",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// The step counts once: one ProfilerStep#3 of 2000 µs on rank 0.
	report := onlyRunReport(t, out)
	if f := reportRow(t, report, "0", "step"); f[0] != "1" || f[1] != "2000.000" {
		t.Errorf("rank 0's step row %q, want count 1, 2000 µs", f)
	}
}

func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full, err := os.ReadFile(kinetoDir + "rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	truncated := write("cut.json", string(full[:2000]))
	badLog := write("calls.txt", "=== Kernel Call Log for Rank 0 ===\n\nTag: a\nIdx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)\n0 2026-02-25 13:05:07 matmul cpu x 0 0\n")
	unknown := write("notes.txt", "hello\n")
	empty := write("empty.json", "")
	numbers := write("numbers.json", "[1, 2]")
	ownLog := write("calls.rank0", "# end_us step rank depth kind name device host_us device_us peak_mb (one line per range, in the order ranges finished)\n10.5 0 0 1 host linear cpu:0 2.2 - 0.00\n")
	ownReport := write("report.txt", "=== rank 0 · all steps ===\nName Count\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // regexp on stderr
	}{
		{"no files", nil, exitUsage, `no files to import \(see profile-run import -h\)`},
		{"unknown flag", []string{"-bogus", truncated}, exitUsage, `flag provided but not defined`},
		{"bad sort", []string{"-sort", "nope", truncated}, exitUsage, `-sort`},
		{"linger without metrics", []string{"-metrics-linger", "5s", truncated}, exitUsage, `-metrics-linger 5s keeps /metrics up, but -metrics-addr is off \(see profile-run import -h\)`},
		{"bad otlp protocol", []string{"-otlp-protocol", "bogus", truncated}, exitUsage, `-otlp-protocol: unknown protocol "bogus"`},
		{"truncated JSON", []string{kinetoDir + "rank1.json", truncated}, exitFail, `cut\.json: byte 2000: unexpected end of input`},
		{"bad call log row", []string{badLog}, exitFail, `calls\.txt:5: not a call log row`},
		{"report alone", []string{seedDir + "report.rank1"}, exitFail, `report\.rank1:4: rank 1's summary report holds totals.*Kernel Call Log for Rank 1`},
		{"unknown format", []string{unknown}, exitFail, `notes\.txt:1: not a profile`},
		{"empty file", []string{empty}, exitFail, `empty\.json:1: empty file\n$`},
		{"JSON of the wrong shape", []string{numbers}, exitFail, `numbers\.json: byte 1: want an object, found number\n$`},
		{"trainscope's call log", []string{ownLog}, exitFail, `calls\.rank0:1: not a profile .*: this is a trainscope call log .*import its run's trace\.json instead`},
		{"trainscope's report", []string{ownReport}, exitFail, `report\.txt:1: not a profile .*: this is a trainscope report`},
		{"missing file", []string{filepath.Join(dir, "absent.json")}, exitFail, `absent\.json: no such file`},
		{"trace steps match none", []string{"-trace-steps", "99", kinetoDir + "rank0.json"}, exitFail, `-trace-steps 99 keeps none of the steps the files hold \(step 3\)`},
		{"trace steps match none, trace off", []string{"-trace", "off", "-trace-steps", "0-2,4", kinetoDir + "rank0.json"}, exitFail, `-trace-steps 0-2,4 keeps none of the steps the files hold \(step 3\)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "-"))
			code, _, stderr := runCmd(t, append([]string{"import", "-out", out}, tc.args...)...)
			if code != tc.code || !regexp.MustCompile(tc.want).MatchString(stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d matching %q", code, stderr, tc.code, tc.want)
			}
			if dirs := runDirs(t, out); len(dirs) != 0 {
				t.Errorf("a failed import left %v", dirs)
			}
		})
	}
}

// The files beside -report are never written over, the files being
// imported least of all: -report report.txt beside report.rank0 fails
// before anything is written, naming it.
func TestImportNeverReplacesInputs(t *testing.T) {
	dir := t.TempDir()
	names := []string{"calls.rank0", "calls.rank1", "report.rank0", "report.rank1"}
	before := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(seedDir + n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
		before[n] = b
	}
	report := filepath.Join(dir, "report.txt")
	args := []string{"import", "-out", filepath.Join(dir, "out"), "-report", report}
	for _, n := range names {
		args = append(args, filepath.Join(dir, n))
	}
	for i := range 2 { // the first attempt changes nothing the second sees
		code, stdout, stderr := runCmd(t, args...)
		want := "-report " + report + ": " + filepath.Join(dir, "report.rank0") + " exists"
		if code != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "(see profile-run import -h)") {
			t.Fatalf("attempt %d: exit %d, stderr %q; want exit %d and %q", i+1, code, stderr, exitUsage, want)
		}
		if strings.Contains(stdout, "records:") {
			t.Errorf("attempt %d: the import ran:\n%s", i+1, stdout)
		}
	}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(b) != string(before[n]) {
			t.Errorf("%s was changed (%v)", n, err)
		}
	}
	for _, n := range []string{"report.txt", "calls.rank0.gz"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s left behind", n)
		}
	}
}

// Flags may follow the files, as with report RUN_DIR --html; after --
// every argument is a file, even one named like a flag.
func TestImportFlagsAfterFiles(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", seedDir+"calls.rank0", "-out", out, seedDir+"calls.rank1", "-quiet")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "Host Total(us)") {
		t.Errorf("-quiet after the files was not taken: the tables are on stdout:\n%s", stdout)
	}
	if report := onlyRunReport(t, out); !strings.Contains(report, "=== rank 1") {
		t.Errorf("the report in -out %s lacks rank 1, the file after -out:\n%s", out, report)
	}
	code, _, stderr = runCmd(t, "import", "-out", out, "--", "-quiet")
	if code != exitFail || !strings.Contains(stderr, "-quiet") {
		t.Errorf("a file named -quiet after --: exit %d, stderr %q; want exit %d naming the file", code, stderr, exitFail)
	}
}
