package profiler

import (
	"errors"
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
