package profiler_test

import (
	"bufio"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// readCallLog returns the lines of a gzip call log.
func readCallLog(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestCallLogWritesEveryCallAsItComes(t *testing.T) {
	dir := t.TempDir()
	cl := profiler.NewCallLog(filepath.Join(dir, "calls"), 0)
	recs := stepRecords(40, 2, 3) // 240 step records and one without a step (rank 0)
	for i := 0; i < len(recs); i += 9 {
		cl.Consume(recs[i:min(i+9, len(recs))])
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	files := cl.Files()
	if len(files) != 2 {
		t.Fatalf("%d files, want one per rank", len(files))
	}
	for _, f := range files {
		want := 40 * 3
		if f.Rank == 0 {
			want++
		}
		lines := readCallLog(t, f.Path)
		if f.Lines != uint64(want) || len(lines) != want+1 || f.Skipped != 0 || !f.HasSteps || f.FirstStep != 0 || f.LastStep != 39 {
			t.Errorf("rank %d: %+v, %d lines in the file; want %d calls, steps 0–39", f.Rank, f, len(lines), want)
		}
		if lines[0]+"\n" != profiler.CallLogHeader {
			t.Errorf("header %q", lines[0])
		}
		if !strings.Contains(lines[1], " 0 "+string(rune('0'+f.Rank))+" 0 host op ") {
			t.Errorf("first call %q", lines[1])
		}
	}
}

func TestCallLogIsCappedPerRank(t *testing.T) {
	dir := t.TempDir()
	const limit = 4096
	cl := profiler.NewCallLog(filepath.Join(dir, "calls"), limit)
	recs := stepRecords(1000, 1, 5)
	cl.Consume(recs)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	f := cl.Files()[0]
	if f.Bytes > limit || f.Lines == 0 || f.Lines+f.Skipped != uint64(len(recs)) {
		t.Errorf("%+v: want at most %d bytes, and every call written or counted", f, limit)
	}
	if got := len(readCallLog(t, f.Path)); got != int(f.Lines)+1 {
		t.Errorf("%d lines in the file, %d calls reported", got, f.Lines)
	}
	// After Close nothing more is written.
	cl.Consume(recs)
	if g := cl.Files()[0]; g.Lines != f.Lines {
		t.Errorf("wrote after Close")
	}
}

func TestCallLogUnwritable(t *testing.T) {
	cl := profiler.NewCallLog(filepath.Join(t.TempDir(), "missing", "calls"), 0)
	cl.Consume(stepRecords(2, 1, 1))
	if err := cl.Close(); err == nil {
		t.Error("no error for a directory that does not exist")
	}
}
