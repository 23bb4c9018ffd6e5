package profiler

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

// Close meets a write error on two ranks' files (their descriptors closed
// under the log, as a failing disk would refuse the writes): it returns
// both errors in rank order every time, not in the order a map happens to
// yield the ranks, and a second Close still says the log failed.
func TestCallLogCloseErrorsInRankOrder(t *testing.T) {
	dir := t.TempDir()
	cpu := runtime.Device{Type: runtime.CPU}
	var first string
	for i := range 20 {
		prefix := filepath.Join(dir, "calls"+string(rune('a'+i)))
		c := NewCallLog(prefix, 0)
		var batch []Record
		for rank := range 4 {
			batch = append(batch, Record{ID: 1, Name: "op", Rank: rank, Device: cpu, Labels: NoLabels})
		}
		c.Consume(batch)
		// Ranks 1 and 3 lose their files; 0 and 2 are written whole.
		for _, rank := range []int{1, 3} {
			if err := c.ranks[rank].f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		err := c.Close()
		if err == nil {
			t.Fatal("Close: no error for two files it could not write")
		}
		msg := strings.ReplaceAll(err.Error(), prefix, "PREFIX")
		r1, r3 := strings.Index(msg, ".rank1.gz"), strings.Index(msg, ".rank3.gz")
		if r1 < 0 || r3 < 0 || r3 < r1 {
			t.Fatalf("Close: %q: want rank 1's error, then rank 3's", msg)
		}
		if i == 0 {
			first = msg
		} else if msg != first {
			t.Fatalf("Close said %q, then %q for the same failures", first, msg)
		}
		if again := c.Close(); again == nil || !errors.Is(again, os.ErrClosed) {
			t.Errorf("second Close: %v, want the error the log met", again)
		}
		for _, f := range c.Files() {
			if bad := f.Rank == 1 || f.Rank == 3; (f.Err != nil) != bad {
				t.Errorf("rank %d: Err %v", f.Rank, f.Err)
			}
		}
	}
}

// TestCallLogWriteErrorAmongManyRanks: with room for 3 open files and
// buffers small enough that files are closed and reopened as lines come,
// ranks 0–5 log all their calls, in batches that switch rank at every
// record; then ranks 6–11 do, and one of their files loses its
// descriptor midway (as a failing disk would refuse its writes). Close
// reports the error; ranks 0–5, whose calls all came before it, read back
// whole, each the header and its calls in order; the broken rank says
// its log was cut short, and so does every rank whose calls came after
// the error.
func TestCallLogWriteErrorAmongManyRanks(t *testing.T) {
	const calls = 60
	c := NewCallLog(filepath.Join(t.TempDir(), "calls"), 0)
	c.maxOpen, c.bufSize = 3, 256
	cpu := runtime.Device{Type: runtime.CPU}
	brokenRank := -1
	for _, ranks := range [][]int{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}} {
		for i := range calls {
			var batch []Record
			for _, r := range ranks {
				batch = append(batch, Record{ID: uint64(i + 1), Name: fmt.Sprintf("op%d", i), Rank: r, Device: cpu, Labels: NoLabels})
			}
			c.Consume(batch)
			if ranks[0] == 6 && i == calls/2 {
				for _, rl := range c.open {
					if rl.rank >= 6 {
						if err := rl.f.Close(); err != nil {
							t.Fatal(err)
						}
						brokenRank = rl.rank
						break
					}
				}
			}
		}
	}
	if brokenRank < 0 {
		t.Fatal("no file of ranks 6–11 was open to break")
	}
	if err := c.Close(); err == nil {
		t.Fatal("Close: no error after a file lost its descriptor")
	}
	for _, f := range c.Files() {
		switch {
		case f.Rank < 6:
			if f.Err != nil {
				t.Errorf("rank %d, whose calls all came before the error: %v", f.Rank, f.Err)
				continue
			}
			lines := readWhole(t, f.Path)
			if len(lines) != calls+1 || lines[0]+"\n" != CallLogHeader {
				t.Fatalf("rank %d: %d lines, want the header and %d calls", f.Rank, len(lines), calls)
			}
			for i, l := range lines[1:] {
				if fs := strings.Fields(l); len(fs) < 6 || fs[2] != fmt.Sprint(f.Rank) || fs[5] != fmt.Sprintf("op%d", i) {
					t.Fatalf("rank %d line %d: %q", f.Rank, i+1, l)
				}
			}
		case f.Err == nil:
			t.Errorf("rank %d, whose calls went on after the error, says its log is whole (%d lines, %d skipped)", f.Rank, f.Lines, f.Skipped)
		}
	}
}

// readWhole reads every line of a gzip file, failing the test on any
// error (a log reported whole must read whole).
func readWhole(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}
