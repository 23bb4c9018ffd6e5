package profiler_test

import (
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// A rank may record from several goroutines, each with a recorder of its
// own (the training loop, a data loader). Their ranges are one rank's:
// consumers tell ranges apart, and find parents, by rank and ID (span
// ids, the pprof stacks, the pipeline analysis), so the recorders of a
// rank must not reuse each other's IDs.
func TestRecordersOfOneRankNumberApart(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	loop, err := p.NewRecorder(3, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	loader, err := p.NewRecorder(3, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.NewRecorder(4, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		rec           *profiler.Recorder
		outer, nested string
	}{{loop, "step", "forward"}, {loader, "load", "decode"}, {other, "step4", "forward4"}} {
		r.rec.Start(r.outer)
		r.rec.Start(r.nested)
		r.rec.End()
		r.rec.End()
	}
	recs := p.Snapshot()
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	byKey := map[[2]uint64]string{}
	for _, r := range recs {
		k := [2]uint64{uint64(r.Rank), r.ID}
		if prev, ok := byKey[k]; ok {
			t.Errorf("rank %d: %s and %s share ID %d", r.Rank, prev, r.Name, r.ID)
		}
		byKey[k] = r.Name
	}
	parentOf := map[string]string{"forward": "step", "decode": "load", "forward4": "step4"}
	for _, r := range recs {
		want, nested := parentOf[r.Name]
		if !nested {
			continue
		}
		if got := byKey[[2]uint64{uint64(r.Rank), r.Parent}]; got != want {
			t.Errorf("%s's parent (rank %d, ID %d) is %q, want %q", r.Name, r.Rank, r.Parent, got, want)
		}
	}
}
