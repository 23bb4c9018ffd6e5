package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestImportRunDirectory: a run directory stands for its trace.json,
// whatever else the run wrote beside it: summary.json, which the import
// used to read as a trace and fail on ("summary.json: byte 5262: no
// traceEvents"), is left alone, and every range the run collected is
// imported. Each other file of the directory named on its own says what
// it is and that the run's trace.json is what to import; so does a
// directory holding only summary.json.
func TestImportRunDirectory(t *testing.T) {
	stdout, run := trainOnCPU(t, small...)
	m := regexp.MustCompile(`records: (\d+) collected`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("the run's stdout counts no records:\n%s", stdout)
	}
	collected := m[1]
	if code, stdout, stderr := runCmd(t, "report", run, "--html"); code != exitOK {
		t.Fatalf("report --html: exit %d\n%s\n%s", code, stdout, stderr)
	}

	out := t.TempDir()
	code, istdout, istderr := runCmd(t, "import", "-quiet", "-out", out, run)
	if code != exitOK {
		t.Fatalf("import %s: exit %d\n%s\n%s", run, code, istdout, istderr)
	}
	want := "importing 1 file(s), " + collected + " ranges:\n  " + filepath.Join(run, "trace.json") + ": trainscope trace, ranks 0, 1, " + collected + " ranges"
	if !bytes.Contains([]byte(istdout), []byte(want)) {
		t.Errorf("import's stdout lacks %q:\n%s", want, istdout)
	}
	if summary := filepath.Join(run, "summary.json"); bytes.Contains([]byte(istdout+istderr), []byte(summary)) {
		t.Errorf("the import read %s:\n%s\n%s", summary, istdout, istderr)
	}
	// The import's summary names the build that imported, and no host:
	// its records come from elsewhere.
	if dirs := runDirs(t, out); len(dirs) != 1 {
		t.Errorf("the import made run directories %v", dirs)
	} else if b, err := os.ReadFile(filepath.Join(dirs[0], "summary.json")); err != nil {
		t.Error(err)
	} else {
		var doc struct {
			Environment map[string]json.RawMessage `json:"environment"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if _, ok := doc.Environment["profile_run"]; !ok || len(doc.Environment) != 1 {
			t.Errorf("the import's environment has %d fields (%v); want profile_run alone", len(doc.Environment), doc.Environment)
		}
	}

	// What each file of the run directory is, after "PATH:1: not a
	// profile this command reads (…): ".
	const report = `this is a trainscope report; import its run's trace\.json instead`
	const calls = `this is a trainscope call log \(calls\.rank<N>\.gz\); import its run's trace\.json instead`
	says := map[string]string{
		"summary.json":   `this is a trainscope run summary \(summary\.json: the run's figures, for profile-run compare, not its ranges\); import its run's trace\.json instead`,
		"report.txt":     report,
		"report.rank0":   report,
		"report.rank1":   report,
		"calls.rank0.gz": calls,
		"calls.rank1.gz": calls,
		"profile.pb.gz":  `this is a pprof profile \(a run's profile\.pb\.gz: .*\); import its run's trace\.json instead \(go tool pprof reads the profile\)`,
		"report.html":    `this is a trainscope HTML report \(profile-run report --html\); import its run's trace\.json instead`,
	}
	entries, err := os.ReadDir(run)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == "trace.json" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			what, ok := says[name]
			if !ok {
				t.Fatalf("the run directory holds %s, which this test does not name: say what importing it says", name)
			}
			path := filepath.Join(run, name)
			out := filepath.Join(t.TempDir(), "out")
			code, _, stderr := runCmd(t, "import", "-out", out, path)
			re := regexp.MustCompile(`^profile-run: import: ` + regexp.QuoteMeta(path) + `:1: not a profile this command reads \([^)]*\): ` + what)
			if code != exitFail || !re.MatchString(stderr) {
				t.Errorf("exit %d, stderr %q\nwant exit %d matching %q", code, stderr, exitFail, re)
			}
			if dirs := runDirs(t, out); len(dirs) != 0 {
				t.Errorf("a failed import left %v", dirs)
			}
		})
	}

	only := t.TempDir()
	b, err := os.ReadFile(filepath.Join(run, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(only, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, "import", "-out", filepath.Join(t.TempDir(), "out"), only)
	re := regexp.MustCompile(regexp.QuoteMeta(filepath.Join(only, "summary.json")) + `:1: .*: ` + says["summary.json"])
	if code != exitFail || !re.MatchString(stderr) {
		t.Errorf("a directory holding only summary.json: exit %d, stderr %q\nwant exit %d matching %q", code, stderr, exitFail, re)
	}
}

// A gzipped trace cut short (gzip -c trace.json | head -c 5000) is said
// to be truncated, at a byte of its decompressed content: the offset
// lies past the 5000 bytes of the file, and the message says it is not
// one of them. It used to read "byte 64323: unexpected end of input
// (truncated?)", as if the 5000-byte file held 64323 bytes.
func TestImportTruncatedGzip(t *testing.T) {
	_, run := trainOnCPU(t, small...)
	trace, err := os.ReadFile(filepath.Join(run, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(trace); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	const size = 5000
	if z.Len() <= size {
		t.Fatalf("the gzipped trace is %d bytes: cutting it at %d shows nothing", z.Len(), size)
	}
	cut := filepath.Join(t.TempDir(), "t.json.gz")
	if err := os.WriteFile(cut, z.Bytes()[:size], 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, "import", "-out", filepath.Join(t.TempDir(), "out"), cut)
	m := regexp.MustCompile(`^profile-run: import: ` + regexp.QuoteMeta(cut) + `: byte (\d+) of its decompressed content: the compressed file is truncated \(gzip: unexpected EOF\)\n$`).FindStringSubmatch(stderr)
	if code != exitFail || m == nil {
		t.Fatalf("exit %d, stderr %q; want exit %d saying the compressed file is truncated", code, stderr, exitFail)
	}
	if at, _ := strconv.Atoi(m[1]); at <= size || at >= len(trace) {
		t.Errorf("the content stops at byte %d: want past the file's %d bytes and before the trace's %d", at, size, len(trace))
	}
}
