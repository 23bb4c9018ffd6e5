package profiler_test

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// TestCallLogKeepsFewFilesOpen: with room for 2 open files and buffers
// so small that every line goes to its file, 5 ranks writing in turn
// close and reopen their files over and over (a new gzip member each
// time); each file still reads back, in one gzip stream, as the header
// and its rank's 40 calls in order, and never more than 2 are open.
func TestCallLogKeepsFewFilesOpen(t *testing.T) {
	const ranks, calls = 5, 40
	c := profiler.NewCallLog(filepath.Join(t.TempDir(), "calls"), 0)
	profiler.SetCallLogMaxOpen(c, 2)
	profiler.SetCallLogBuffer(c, 16)
	cpu := runtime.Device{Type: runtime.CPU}
	for i := range calls {
		for r := range ranks {
			c.Consume([]profiler.Record{{Name: fmt.Sprintf("op%d", i), Rank: r, Device: cpu, Labels: profiler.NoLabels,
				HostStart: time.Duration(i) * time.Microsecond, HostEnd: time.Duration(i+1) * time.Microsecond}})
			if n := profiler.CallLogOpen(c); n > 2 {
				t.Fatalf("%d files open, want at most 2", n)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	files := c.Files()
	members := 0
	for _, f := range files {
		members += gzipMembers(t, f.Path)
	}
	if members < ranks*calls/2 {
		t.Errorf("%d gzip members in the %d files: the files were not closed and reopened as lines came", members, ranks)
	}
	if len(files) != ranks {
		t.Fatalf("%d files, want %d", len(files), ranks)
	}
	for _, f := range files {
		if f.Lines != calls || f.Err != nil {
			t.Errorf("rank %d: %d lines, error %v; want %d, none", f.Rank, f.Lines, f.Err, calls)
		}
		lines := readCallLog(t, f.Path) // compress/gzip reads every member
		if len(lines) != calls+1 || lines[0]+"\n" != profiler.CallLogHeader {
			t.Fatalf("%s: %d lines; want the header and %d calls", f.Path, len(lines), calls)
		}
		for i, l := range lines[1:] {
			fields := strings.Fields(l)
			if want := fmt.Sprintf("op%d", i); len(fields) < 6 || fields[2] != fmt.Sprint(f.Rank) || fields[5] != want {
				t.Errorf("%s line %d: %q, want rank %d's %s", f.Path, i+1, l, f.Rank, want)
			}
		}
	}
}

// TestCallLogOpenFilesBounded: 200 ranks' logs hold at most
// MaxOpenCallLogs file descriptors at once, counted by the process's own
// /proc/self/fd.
func TestCallLogOpenFilesBounded(t *testing.T) {
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("skipped: no /proc/self/fd to count open files: %v", err)
		}
		return len(es)
	}
	before := fds()
	c := profiler.NewCallLog(filepath.Join(t.TempDir(), "calls"), 0)
	defer c.Close()
	cpu := runtime.Device{Type: runtime.CPU}
	for r := range 200 {
		c.Consume([]profiler.Record{{Name: "op", Rank: r, Device: cpu, Labels: profiler.NoLabels}})
	}
	if n := fds() - before; n > profiler.MaxOpenCallLogs {
		t.Errorf("%d more files open for 200 ranks' call logs, want at most %d", n, profiler.MaxOpenCallLogs)
	}
}

// TestCallLogBatchOfManyRanks: one batch holding 5 ranks' calls round
// robin (the collector's order for device ranges resolved across ranks),
// with room for 2 open files and the default buffers. Each file reads
// back as its rank's calls in the batch's order, in one gzip member:
// the lines wait in their rank's buffer, and each file is opened again
// once, at Close, where writing each line as it came closed and reopened
// a file at nearly every line (about 200 members).
func TestCallLogBatchOfManyRanks(t *testing.T) {
	const ranks, calls = 5, 40
	c := profiler.NewCallLog(filepath.Join(t.TempDir(), "calls"), 0)
	profiler.SetCallLogMaxOpen(c, 2)
	cpu := runtime.Device{Type: runtime.CPU}
	var batch []profiler.Record
	for i := range calls {
		for r := range ranks {
			batch = append(batch, profiler.Record{Name: fmt.Sprintf("op%d", i), Rank: r, Device: cpu, Labels: profiler.NoLabels,
				HostStart: time.Duration(i) * time.Microsecond, HostEnd: time.Duration(i+1) * time.Microsecond})
		}
	}
	c.Consume(batch)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	members := 0
	for _, f := range c.Files() {
		if f.Lines != calls || f.Err != nil {
			t.Errorf("rank %d: %d lines, error %v; want %d, none", f.Rank, f.Lines, f.Err, calls)
		}
		lines := readCallLog(t, f.Path)
		if len(lines) != calls+1 {
			t.Fatalf("%s: %d lines; want the header and %d calls", f.Path, len(lines), calls)
		}
		for i, l := range lines[1:] {
			fields := strings.Fields(l)
			if want := fmt.Sprintf("op%d", i); len(fields) < 6 || fields[2] != fmt.Sprint(f.Rank) || fields[5] != want {
				t.Errorf("%s line %d: %q, want rank %d's %s", f.Path, i+1, l, f.Rank, want)
			}
		}
		members += gzipMembers(t, f.Path)
	}
	if members != ranks {
		t.Errorf("%d gzip members in the %d files, want one each: files were closed and reopened within the batch", members, ranks)
	}
}

// gzipMembers counts the gzip members of the file at path.
func gzipMembers(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := 0
	for {
		zr.Multistream(false)
		if _, err := io.Copy(io.Discard, zr); err != nil {
			t.Fatalf("%s: member %d: %v", path, n+1, err)
		}
		n++
		if err := zr.Reset(br); err == io.EOF {
			return n
		} else if err != nil {
			t.Fatalf("%s: after member %d: %v", path, n, err)
		}
	}
}
