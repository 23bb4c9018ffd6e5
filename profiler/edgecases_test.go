package profiler_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// A rank whose records carry no peak memory prints "not measured" in the
// per-rank files and in Profiler.Report too, as in WriteReport fed by a
// Summary: 0 MB would read as a measured figure.
func TestPeakNotMeasuredInRankFilesAndReport(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Labels: profiler.NoLabels, HostEnd: 5 * us, PeakMemory: 3 << 20},
		{ID: 1, Name: "step", Rank: 1, Labels: profiler.NoLabels, HostEnd: 5 * us},
	}
	prefix := filepath.Join(t.TempDir(), "report")
	paths, err := profiler.WriteRankFiles(prefix, recs, profiler.SortName, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"Peak device memory (rank 0): 3.00 MB\n", "Peak device memory (rank 1): not measured\n"} {
		b, err := os.ReadFile(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", paths[i], want, b)
		}
	}

	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := p.Ingest(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Report(&buf, profiler.SortName); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Peak device memory (rank 0): 3.00 MB\n", "Peak device memory (rank 1): not measured\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("Report lacks %q:\n%s", want, buf.String())
		}
	}
}

// A record with a negative depth (made by hand, or ingested: Ingest does
// not check depths) is written at the left margin, not a panic.
func TestWriteRecordsNegativeDepth(t *testing.T) {
	recs := []profiler.Record{{ID: 1, Name: "odd", Depth: -2, Labels: profiler.NoLabels, HostStart: 1 * us, HostEnd: 3 * us}}
	var buf bytes.Buffer
	if err := profiler.WriteRecords(&buf, recs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want a header and one row:\n%s", len(lines), buf.String())
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[2] != "odd" || f[4] != "2.000" {
		t.Errorf("row %q: want the name odd and host time 2.000 us", lines[1])
	}
}

// A first step much longer than the others, whose others last under a
// nanosecond each on average (zero-length and one-nanosecond steps): the
// ratio is a finite number, not the +Inf of a mean truncated to 0 ns.
func TestWarmUpLineTinySteps(t *testing.T) {
	first := profiler.StepTime{Step: 0, Start: 0, End: 10}
	ranks := []profiler.RankSteps{{Rank: 0, Stage: profiler.None, Steps: 3, Wall: 11, First: first}}
	var buf bytes.Buffer
	if err := profiler.WriteStepBreakdown(&buf, ranks, 0); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "Inf") || strings.Contains(out, "NaN") {
		t.Errorf("breakdown prints a non-finite figure:\n%s", out)
	}
	// The others: 1 ns over 2 steps, 0.5 ns each; 10 / 0.5 = 20.
	if !strings.Contains(out, "20.0× the mean of the others") {
		t.Errorf("breakdown lacks the ratio 20.0×:\n%s", out)
	}
}

// Records of different steps that tie on rank, start and depth come out
// of Window.Records in the same order every time: by step.
func TestWindowRecordsOrderIsDeterministic(t *testing.T) {
	const steps = 8
	var recs []profiler.Record
	for s := range steps {
		l := profiler.NoLabels
		l.Step = int32(s)
		recs = append(recs, profiler.Record{ID: uint64(s + 1), Name: "k", Kind: profiler.KindKernel, Labels: l,
			HostStart: 100 * us, HostEnd: 100 * us})
	}
	for try := range 20 {
		win := profiler.NewWindow(profiler.StepWindow{All: true}, 0)
		win.Consume(recs)
		got := win.Records()
		if len(got) != steps {
			t.Fatalf("%d records, want %d", len(got), steps)
		}
		for i, r := range got {
			if int(r.Step) != i {
				t.Fatalf("try %d: record %d is of step %d, want step %d (order by step)", try, i, r.Step, i)
			}
		}
	}
}

// Once the bound is reached, a record of a step that has none kept yet is
// refused; if a later record of that step comes after older steps left the
// window and made room, the step is still cut short (half a step would
// pass for a whole one), not kept in part.
func TestWindowDoesNotKeepAStepInPart(t *testing.T) {
	rec := func(rank, step int) profiler.Record {
		l := profiler.NoLabels
		l.Step = int32(step)
		return profiler.Record{Name: "op", Rank: rank, Labels: l, HostStart: time.Duration(step) * time.Millisecond}
	}
	win := profiler.NewWindow(profiler.StepWindow{Last: 2}, 2)
	win.Consume([]profiler.Record{
		rec(0, 1), rec(1, 1), // step 1 whole: the bound is reached
		rec(0, 2), // beyond the bound: step 2 lost this record
		rec(0, 3), // step 1 leaves the last 2 steps, making room
		rec(1, 2), // the rest of step 2: it must not pass for all of it
	})
	st := win.Stats()
	if st.Covers() != "step 3" || st.Records != 1 {
		t.Errorf("%+v (covers %q): want step 3 only, 1 record", st, st.Covers())
	}
	for _, r := range win.Records() {
		if r.Step == 2 {
			t.Errorf("a record of step 2, which lost one, is kept")
		}
	}
}

// A range name holding a line break (an NVTX range named by the user)
// stays on its one line in the report, the per-call log and the call log
// file: each is read a line per row or call.
func TestNamesWithLineBreaks(t *testing.T) {
	name := "load\nbatch\r"
	recs := []profiler.Record{
		{ID: 1, Name: "step", Labels: profiler.NoLabels, HostStart: 0, HostEnd: 10 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: name, Labels: profiler.NoLabels, HostStart: 1 * us, HostEnd: 4 * us},
	}
	var rep bytes.Buffer
	if err := profiler.WriteReport(&rep, profiler.Summarize(recs), nil, profiler.SortName); err != nil {
		t.Fatal(err)
	}
	// Title, header, two rows, peak line, blank line, legend.
	if lines := strings.Split(strings.TrimSuffix(rep.String(), "\n"), "\n"); len(lines) != 7 {
		t.Errorf("report has %d lines, want 7:\n%s", len(lines), rep.String())
	}
	var log bytes.Buffer
	if err := profiler.WriteRecords(&log, recs); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n"); len(lines) != 3 {
		t.Errorf("per-call log has %d lines, want a header and 2 calls:\n%s", len(lines), log.String())
	}
	cl := profiler.NewCallLog(filepath.Join(t.TempDir(), "calls"), 0)
	cl.Consume(recs)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	f := cl.Files()[0]
	if lines := readCallLog(t, f.Path); len(lines) != 3 || f.Lines != 2 {
		t.Errorf("call log: %d lines (%d calls counted), want a header and 2 calls: %q", len(lines), f.Lines, lines)
	}
}
