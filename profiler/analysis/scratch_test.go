package analysis_test

import (
	"reflect"
	"testing"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// A Sink analyses step after step in the same working room: every step it
// keeps must be what the analysis of that step's records alone gives, so
// no step kept points into room a later one wrote over.
func TestSinkStepsStandAlone(t *testing.T) {
	const ranks, steps = 4, 10
	g := synthtrace.NewGenerator(synthtrace.TrainerShape(ranks, steps))
	var all []profiler.Record
	alone := make([]analysis.Step, steps)
	for n := range steps {
		recs := g.Step(nil)
		// Steps alike would hide one step's figures written over
		// another's: each leaves out other ranges of every rank.
		per := len(recs) / ranks
		var kept []profiler.Record
		for r := range ranks {
			from := r*per + 10 + 7*n + r
			kept = append(kept, recs[r*per:from]...)
			kept = append(kept, recs[from+5+n:(r+1)*per]...)
		}
		recs = kept
		all = append(all, recs...)
		got := analysis.Analyze(recs)
		if len(got) != 1 {
			t.Fatalf("step %d alone: %d steps analysed, want 1", n, len(got))
		}
		alone[n] = got[0]
	}
	s := analysis.NewSink(analysis.WithKeepSteps(steps))
	all = synthtrace.EndOrder(all)
	for i := 0; i < len(all); i += 1000 {
		s.Consume(all[i:min(i+1000, len(all))])
	}
	s.Flush()
	kept := s.Steps()
	if len(kept) != steps {
		t.Fatalf("the sink kept %d steps, want %d", len(kept), steps)
	}
	for n := range steps {
		if kept[n].Step != n {
			t.Fatalf("kept step %d is step %d", n, kept[n].Step)
		}
		if len(kept[n].Ranks) != ranks || len(kept[n].Ranks[0].Time) == 0 {
			t.Fatalf("step %d: %d ranks, rank 0 with %d slices of time", n, len(kept[n].Ranks), len(kept[n].Ranks[0].Time))
		}
		if !reflect.DeepEqual(kept[n], alone[n]) {
			t.Errorf("step %d as the sink kept it differs from its analysis alone:\nsink  %+v\nalone %+v", n, kept[n].Ranks[0], alone[n].Ranks[0])
		}
	}
}
