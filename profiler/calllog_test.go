package profiler_test

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io/fs"
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

// A call log that exists is never replaced: that rank's log is not
// written, Files says why, Remove leaves it, and the other ranks' logs are
// written whole.
func TestCallLogNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "calls")
	mine := prefix + ".rank1.gz"
	if err := os.WriteFile(mine, []byte("the user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := profiler.NewCallLog(prefix, 0)
	recs := stepRecords(3, 2, 1) // 3 steps of 2 ranks, one range each, and one more of rank 0
	cl.Consume(recs)
	if err := cl.Close(); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Close: %v, want an error wrapping fs.ErrExist", err)
	}
	files := cl.Files()
	if len(files) != 2 {
		t.Fatalf("files %+v, want ranks 0 and 1", files)
	}
	r0, r1 := files[0], files[1]
	if r0.Err != nil || r0.Lines != 4 || len(readCallLog(t, r0.Path)) != 5 {
		t.Errorf("rank 0: %+v, want its 4 calls written and no error", r0)
	}
	if r1.Path != mine || !errors.Is(r1.Err, fs.ErrExist) || !strings.Contains(r1.Err.Error(), mine) || r1.Lines != 0 || r1.Bytes != 0 || r1.Skipped != 3 {
		t.Errorf("rank 1: %+v, want not created (fs.ErrExist naming %s), its 3 calls skipped", r1, mine)
	}
	cl.Remove()
	if b, _ := os.ReadFile(mine); string(b) != "the user's" {
		t.Errorf("rank 1's file was replaced or removed: %q", b)
	}
	if _, err := os.Stat(r0.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove left rank 0's log: %v", err)
	}
}
