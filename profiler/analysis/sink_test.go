package analysis

import (
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

func TestSinkAnalysesAfterDelay(t *testing.T) {
	s := NewSink(WithKeepSteps(2))
	var all []profiler.Record
	for step := range 5 {
		var b build
		twoRanks(step, &b)
		all = append(all, b.recs...)
		s.Consume(b.recs)
		// Step n is analysed once both ranks delivered step n+2.
		if got, want := s.Stats().Steps, max(step-1, 0); got != want {
			t.Errorf("after step %d: %d steps analysed, want %d", step, got, want)
		}
	}
	s.Flush()
	if got := s.Stats(); got.Steps != 5 || got.Dropped != 0 || got.Late != 0 || got.Forced != 0 {
		t.Errorf("stats %+v, want 5 steps and nothing else", got)
	}
	if got := s.Steps(); len(got) != 2 || got[0].Step != 3 || got[1].Step != 4 {
		t.Errorf("kept steps %d, want the latest 2 (3 and 4)", len(got))
	}
	on, off := s.Summary(), Summarize(Analyze(all))
	if on.Complete != 5 || on.Ranks[1].Caused != off.Ranks[1].Caused || on.Straggler != 1 || off.Straggler != 1 {
		t.Errorf("sink summary %+v, offline %+v", on, off)
	}
	// A record of an analysed step is late.
	var b build
	twoRanks(1, &b)
	s.Consume(b.recs[:1])
	if got := s.Stats().Late; got != 1 {
		t.Errorf("late %d, want 1", got)
	}
}

func TestSinkBounds(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		var b build
		twoRanks(0, &b)
		s := NewSink(WithMaxRecords(5))
		s.Consume(b.recs)
		s.Flush()
		want := len(b.recs) - 5
		if got := s.Stats().Dropped; got != uint64(want) {
			t.Errorf("dropped %d, want %d", got, want)
		}
		st := s.Steps()
		if len(st) != 1 || st[0].Complete() || !strings.Contains(strings.Join(st[0].Problems, "\n"), "records dropped") {
			t.Errorf("step does not say records were dropped: %+v", st)
		}
		if s.Summary().Complete != 0 {
			t.Errorf("a step with dropped records counted as complete")
		}
	})
	t.Run("steps", func(t *testing.T) {
		s := NewSink(WithMaxOpenSteps(2))
		for step := range 6 {
			var b build
			twoRanks(step, &b)
			if step > 0 {
				// Rank 1 stops after step 0: no step is ever ready.
				b.recs = dropRank(b.recs, 1)
			}
			s.Consume(b.recs)
		}
		st := s.Stats()
		if st.Forced == 0 || st.Steps != st.Forced {
			t.Fatalf("stats %+v: want steps analysed by force", st)
		}
		for _, x := range s.Steps() {
			if !strings.Contains(strings.Join(x.Problems, "\n"), "analysed before every rank's later steps arrived") {
				t.Errorf("step %d does not say it was analysed early: %q", x.Step, x.Problems)
			}
		}
		s.Flush()
		if got := s.Stats().Steps; got != 6 {
			t.Errorf("%d steps after Flush, want 6", got)
		}
	})
}

func dropRank(recs []profiler.Record, rank int) []profiler.Record {
	var out []profiler.Record
	for _, r := range recs {
		if r.Rank != rank {
			out = append(out, r)
		}
	}
	return out
}
