package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run directory whose report, trace or summary is a named pipe (or a
// directory) in place of a file: report and compare say so at once rather
// than wait for a writer that never comes.
func TestRunFilesThatAreNotFiles(t *testing.T) {
	run := t.TempDir()
	for _, name := range []string{"report.txt", "trace.json", "summary.json"} {
		if err := syscall.Mkfifo(filepath.Join(run, name), 0o644); err != nil {
			t.Skipf("no named pipes here: %v", err)
		}
	}
	dirs := t.TempDir()
	for _, name := range []string{"report.txt", "trace.json", "summary.json"} {
		if err := os.Mkdir(filepath.Join(dirs, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	good := filepath.Join(t.TempDir(), "summary.json")
	if err := os.WriteFile(good, []byte(`{"schema":"trainscope.summary/v1","command":[],"records":{},"steps":[{"rank":0,"steps":9,"p50_s":0.01}],"ranges":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", run}, filepath.Join(run, "report.txt") + ": not a regular file (a named pipe)"},
		{[]string{"report", run, "--html"}, filepath.Join(run, "trace.json") + ": not a regular file (a named pipe)"},
		{[]string{"compare", good, run}, filepath.Join(run, "summary.json") + ": not a regular file (a named pipe)"},
		{[]string{"report", dirs}, filepath.Join(dirs, "report.txt") + ": not a regular file (a directory)"},
		{[]string{"report", dirs, "--html"}, filepath.Join(dirs, "trace.json") + ": not a regular file (a directory)"},
	} {
		type result struct {
			code           int
			stdout, stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, stdout, stderr := runCmd(t, tc.args...)
			done <- result{code, stdout, stderr}
		}()
		select {
		case r := <-done:
			if r.code != exitFail || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", tc.args, r.code, r.stdout, r.stderr, exitFail, tc.want)
			}
		case <-time.After(20 * time.Second):
			// Let the reader stuck in the open go: a writer comes and goes.
			for _, name := range []string{"report.txt", "trace.json", "summary.json"} {
				if f, err := os.OpenFile(filepath.Join(run, name), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			}
			t.Fatalf("%q: still waiting after 20 s on a named pipe no one writes", tc.args)
		}
	}
}
