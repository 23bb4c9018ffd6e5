package profiler_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

func TestParseStepWindow(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // String() of the result; "" for an error
	}{
		{"", "1-5,last:5"},
		{"20-30", "20-30"},
		{"last:5", "last:5"},
		{"3", "3"},
		{"0-2, last:10", "0-2,last:10"},
		{"all", "all"},
		{"last:0", ""},
		{"5-3", ""},
		{"-1", ""},
		{"x", ""},
		{"last:", ""},
	} {
		w, err := profiler.ParseStepWindow(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%q: no error, got %v", c.in, w)
		case c.want != "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.want != "" && w.String() != c.want:
			t.Errorf("%q: %q, want %q", c.in, w.String(), c.want)
		}
	}
}

// An error names the window, and the part that is wrong only where there
// are several, each once.
func TestParseStepWindowErrors(t *testing.T) {
	for in, want := range map[string]string{
		"5-2":        `step window "5-2": want A-B (0 ≤ A ≤ B), A, last:N or all`,
		"1-2,last:0": `step window "1-2,last:0": "last:0": want last:N with N ≥ 1`,
		"1-2, x":     `step window "1-2, x": "x": want A-B (0 ≤ A ≤ B), A, last:N or all`,
	} {
		if _, err := profiler.ParseStepWindow(in); err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}

// TestStepWindowKeepsAny: whether a window keeps any step of a run of
// steps 0 to n-1, checked against a Window fed one record per step.
func TestStepWindowKeepsAny(t *testing.T) {
	for _, c := range []struct {
		window string
		steps  int
		want   bool
	}{
		{"99", 3, false},
		{"3", 3, false}, // steps 0, 1, 2
		{"2", 3, true},
		{"2-99", 3, true},
		{"5-9,20", 5, false},
		{"5-9,4", 5, true},
		{"last:2", 1, true},
		{"all", 1, true},
		{"", 1, true}, // 1-5,last:5 keeps step 0 through last:5
	} {
		w, err := profiler.ParseStepWindow(c.window)
		if err != nil {
			t.Fatal(err)
		}
		win := profiler.NewWindow(w, 0)
		for s := range c.steps {
			l := profiler.NoLabels
			l.Step = int32(s)
			win.Consume([]profiler.Record{{ID: uint64(s + 1), Name: "op", Labels: l}})
		}
		kept := win.Stats().Records > 0
		if got := w.KeepsAny(0, c.steps-1); got != c.want || got != kept {
			t.Errorf("-trace-steps %q over %d steps: KeepsAny %v, want %v; a Window keeps %d records", c.window, c.steps, got, c.want, win.Stats().Records)
		}
	}
	if (profiler.StepWindow{All: true}).KeepsAny(3, 2) {
		t.Error("an empty range of steps has a step kept")
	}
}

// stepRecords makes per rank and step n records, plus one without a step.
func stepRecords(steps, ranks, n int) []profiler.Record {
	var out []profiler.Record
	id := uint64(0)
	for s := range steps {
		for r := range ranks {
			for range n {
				id++
				l := profiler.NoLabels
				l.Step = int32(s)
				out = append(out, profiler.Record{ID: id, Name: "op", Rank: r, Labels: l, HostStart: time.Duration(id), HostEnd: time.Duration(id + 1)})
			}
		}
	}
	out = append(out, profiler.Record{ID: id + 1, Name: "setup", Labels: profiler.NoLabels})
	return out
}

// A step of which a rank dropped ranges while recording is left out
// whole, whether the window hears of it before its records or after
// some; drops of steps the window does not keep change nothing.
func TestWindowLeavesOutStepsThatLostRanges(t *testing.T) {
	w, err := profiler.ParseStepWindow("1-5,last:2")
	if err != nil {
		t.Fatal(err)
	}
	win := profiler.NewWindow(w, 0)
	recs := stepRecords(10, 2, 3) // 6 records a step
	win.ConsumeLost([]profiler.Lost{{Rank: 1, Step: 3, Ranges: 4}})
	win.Consume(recs[:9*6]) // steps 0–8
	win.ConsumeLost([]profiler.Lost{{Rank: 1, Step: 0, Ranges: 3}, {Rank: 0, Step: 7, Ranges: 1}, {Rank: 0, Step: 8, Ranges: 2}, {Rank: 1, Step: profiler.None, Ranges: 5}})
	win.Consume(recs[9*6:]) // step 9 and the step-less record
	st := win.Stats()
	// Kept: steps 1, 2, 4, 5 (3 lost), 9 (7 and 8, the last 2 when their
	// drops were told, lost), and the step-less record; step 0 is not
	// the window's, and its drops change nothing.
	if got := st.Covers(); got != "steps 1–2, 4–5, 9" {
		t.Errorf("covers %q, want steps 1–2, 4–5, 9", got)
	}
	if want := 5*6 + 1; st.Records != want || len(win.Records()) != want {
		t.Errorf("kept %d records (%d returned), want %d", st.Records, len(win.Records()), want)
	}
	if st.LostFirst != 3 || st.LostLast != 8 || st.Lost != 3*6 {
		t.Errorf("lost steps %d–%d, %d of their records; want 3–8 and 18 (steps 3, 7 and 8)", st.LostFirst, st.LostLast, st.Lost)
	}
	if got := st.LostText(); got != "steps 3–8" {
		t.Errorf("LostText %q", got)
	}
	for _, r := range win.Records() {
		if r.Step == 3 || r.Step == 7 || r.Step == 8 {
			t.Fatalf("a record of step %d, which lost ranges, was kept", r.Step)
		}
	}
}

func TestWindowKeepsChosenSteps(t *testing.T) {
	recs := stepRecords(100, 2, 3)
	win := profiler.NewWindow(profiler.DefaultStepWindow, 0)
	for i := 0; i < len(recs); i += 7 { // in batches, as a profiler delivers
		win.Consume(recs[i:min(i+7, len(recs))])
	}
	st := win.Stats()
	// Steps 1–5 and 95–99, 2 ranks × 3 records each, and the step-less one.
	if want := 10*2*3 + 1; st.Records != want || len(win.Records()) != want {
		t.Errorf("kept %d records (%d returned), want %d", st.Records, len(win.Records()), want)
	}
	if st.Outside != uint64(len(recs)-st.Records) || st.Full != 0 {
		t.Errorf("outside %d, full %d; want %d and 0", st.Outside, st.Full, len(recs)-st.Records)
	}
	if got := st.Covers(); got != "steps 1–5, 95–99" {
		t.Errorf("covers %q", got)
	}
	// A late record of a step that has left the recent ones is outside.
	late := recs[90*6]
	win.Consume([]profiler.Record{late})
	if st2 := win.Stats(); st2.Records != st.Records || st2.Outside != st.Outside+1 {
		t.Errorf("a late record of step %d: %+v", late.Step, st2)
	}
	// Records come back ordered by rank, then start.
	out := win.Records()
	for i := 1; i < len(out); i++ {
		if out[i-1].Rank > out[i].Rank || out[i-1].Rank == out[i].Rank && out[i-1].HostStart > out[i].HostStart {
			t.Fatalf("records out of order at %d", i)
		}
	}
}

func TestWindowBounds(t *testing.T) {
	recs := stepRecords(50, 1, 10)
	win := profiler.NewWindow(profiler.StepWindow{All: true}, 100)
	win.Consume(recs)
	if st := win.Stats(); st.Records != 100 || st.Full != uint64(len(recs)-100) || st.Outside != 0 {
		t.Errorf("%+v: want 100 kept and the rest counted as beyond the bound", st)
	}
	// A fixed range only.
	win = profiler.NewWindow(profiler.StepWindow{Ranges: [][2]int{{20, 30}}}, 0)
	win.Consume(recs)
	if st := win.Stats(); st.Records != 11*10+1 || st.Covers() != "steps 20–30" {
		t.Errorf("%+v (covers %q)", st, st.Covers())
	}
	// Memory stays bounded however long the run: last:3 over 2000 steps.
	win = profiler.NewWindow(profiler.StepWindow{Last: 3}, 0)
	for s := range 2000 {
		l := profiler.NoLabels
		l.Step = int32(s)
		win.Consume([]profiler.Record{{Name: "op", Labels: l}, {Name: "op", Labels: l}})
		if st := win.Stats(); st.Records > 6 {
			t.Fatalf("step %d: %d records kept, want at most 6", s, st.Records)
		}
	}
	if got := win.Stats().Covers(); got != "steps 1997–1999" {
		t.Errorf("covers %q", got)
	}
}

// The default window on runs of every length: steps 1–5 and the run's
// last 5, whose union reaches back to the warm-up step 0 only when the run
// is so short that step 0 is one of its last 5.
func TestDefaultWindowOnShortRuns(t *testing.T) {
	for _, c := range []struct {
		steps int
		want  string
	}{
		{1, "step 0"}, // the only step: the trace still has one
		{2, "steps 0–1"},
		{5, "steps 0–4"},
		{6, "steps 1–5"},
		{7, "steps 1–6"},
		{10, "steps 1–9"},
		{11, "steps 1–10"},
		{12, "steps 1–5, 7–11"},
		{100, "steps 1–5, 95–99"},
	} {
		recs := stepRecords(c.steps, 2, 3)
		win := profiler.NewWindow(profiler.DefaultStepWindow, 0)
		for i := 0; i < len(recs); i += 5 {
			win.Consume(recs[i:min(i+5, len(recs))])
		}
		st := win.Stats()
		if got := st.Covers(); got != c.want {
			t.Errorf("-steps %d: covers %q, want %q", c.steps, got, c.want)
		}
		if st.Records+int(st.Outside) != len(recs) || st.Full != 0 {
			t.Errorf("-steps %d: %d kept + %d outside ≠ %d records (full %d)", c.steps, st.Records, st.Outside, len(recs), st.Full)
		}
	}
}

// Ranks a step apart, as the stages of a pipeline finish: the window keeps
// the same steps, and a fixed range is kept even when its records come
// after later steps have filled the recent ones.
func TestWindowWithLaggingRanks(t *testing.T) {
	const steps = 10
	var recs []profiler.Record
	add := func(rank, step int) {
		l := profiler.NoLabels
		l.Step = int32(step)
		recs = append(recs, profiler.Record{Name: "op", Rank: rank, Labels: l})
	}
	for s := range steps + 1 {
		if s < steps {
			add(0, s)
		}
		if s > 0 {
			add(1, s-1)
		}
	}
	win := profiler.NewWindow(profiler.StepWindow{Ranges: [][2]int{{1, 5}}, Last: 2}, 0)
	win.Consume(recs)
	// Records of step 3 long after the recent steps moved on.
	add(1, 3)
	win.Consume(recs[len(recs)-1:])
	st := win.Stats()
	if got := st.Covers(); got != "steps 1–5, 8–9" {
		t.Errorf("covers %q, want steps 1–5, 8–9", got)
	}
	if want := 2*7 + 1; st.Records != want {
		t.Errorf("kept %d records, want %d", st.Records, want)
	}
}

// TestWindowCutsSteps: a step the bound cuts short is left out whole,
// and the steps after it are named as left out.
func TestWindowCutsSteps(t *testing.T) {
	recs := stepRecords(5, 1, 4) // steps 0–4, 4 records each
	win := profiler.NewWindow(profiler.StepWindow{All: true}, 10)
	win.Consume(recs)
	st := win.Stats()
	// Steps 0 and 1 whole (8 records); step 2 kept 2 of its 4, so it is
	// left out; steps 3 and 4 kept none, nor the step-less record after
	// them: 13 not kept.
	if st.Records != 8 || st.Full != 13 || st.Covers() != "steps 0–1" || st.CutText() != "steps 2–4" {
		t.Errorf("%+v (covers %q, cut %q); want 8 kept, 13 beyond the bound, steps 0–1 kept, steps 2–4 cut", st, st.Covers(), st.CutText())
	}
	got := win.Records()
	for _, r := range got {
		if r.Step > 1 {
			t.Errorf("record of step %d kept", r.Step)
		}
	}
	if len(got) != 8 {
		t.Errorf("%d records, want 8", len(got))
	}
	if st := profiler.NewWindow(profiler.StepWindow{All: true}, 100); st.Stats().CutText() != "" || st.Bound() != 100 {
		t.Errorf("an empty window: cut %q, bound %d", st.Stats().CutText(), st.Bound())
	}
}

// Ranks whose records come a step apart, as a deep pipeline's stages
// deliver them: when the bound is reached while an earlier step's records
// are still coming, the earlier steps are kept whole and the latest one
// left out, rather than every step in flight cut short.
func TestWindowBoundWithStaggeredRanks(t *testing.T) {
	const ranks, steps, n = 4, 3, 5 // 20 records a step, 60 in all
	var recs []profiler.Record
	// Rank r delivers its records of step s at turn s+r: rank 3's step 0
	// comes after ranks 0 and 1 have delivered step 2.
	for turn := range steps + ranks - 1 {
		for r := range ranks {
			s := turn - r
			if s < 0 || s >= steps {
				continue
			}
			for range n {
				l := profiler.NoLabels
				l.Step = int32(s)
				recs = append(recs, profiler.Record{Name: "op", Rank: r, Labels: l})
			}
		}
	}
	win := profiler.NewWindow(profiler.StepWindow{All: true}, 40)
	for i := 0; i < len(recs); i += n {
		win.Consume(recs[i : i+n])
	}
	st := win.Stats()
	// Two whole steps fit the bound of 40; the third is left out.
	if st.Covers() != "steps 0–1" || st.Records != 40 || st.Full != 20 || st.CutText() != "step 2" {
		t.Errorf("%+v (covers %q, cut %q); want steps 0–1 kept (40 records), step 2 left out (20)", st, st.Covers(), st.CutText())
	}
	got := win.Records()
	if len(got) != 40 {
		t.Errorf("%d records, want 40", len(got))
	}
	for _, r := range got {
		if r.Step == 2 {
			t.Fatalf("a record of step 2 kept")
		}
	}
}
