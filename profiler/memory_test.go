package profiler_test

import (
	"runtime"
	"testing"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/internal/testmem"
	"github.com/trainscope/trainscope/profiler"
)

// The whole-run summaries hold as much after 10,000 steps as after 100:
// the same entries, and a heap that differs by less than a small
// constant (the records themselves are made a step at a time and
// dropped).
func TestSummariesMemoryBounded(t *testing.T) {
	shape := synthtrace.TrainerShape(2, 0)
	g := synthtrace.NewGenerator(shape)
	summary := profiler.NewSummary(profiler.WithSummaryTag("all steps"))
	steps := profiler.NewStepSummary()
	var buf []profiler.Record
	feed := func(n int) {
		for range n {
			buf = g.Step(buf[:0])
			summary.Consume(buf)
			steps.Consume(buf)
		}
	}
	feed(100)
	heap100, entries100 := testmem.LiveHeap(), summary.Entries()
	feed(9900)
	heap10k, entries10k := testmem.LiveHeap(), summary.Entries()
	if entries100 != entries10k {
		t.Errorf("summary entries: %d after 100 steps, %d after 10,000", entries100, entries10k)
	}
	const slack = 64 << 10
	if heap10k > heap100+slack {
		t.Errorf("live heap %d B after 100 steps, %d B after 10,000: grew by more than %d B", heap100, heap10k, slack)
	}
	if r := steps.Ranks(); len(r) != 2 || r[0].Steps != 10000 || r[1].Steps != 10000 {
		t.Errorf("step summary %+v, want 10,000 steps on each of 2 ranks", r)
	}
	if got := summary.Records(); got != 10000*2*shape.PerStep() {
		t.Errorf("summary counted %d records, want %d", got, 10000*2*shape.PerStep())
	}
	t.Logf("live heap after 100 steps %d B, after 10,000 steps %d B; %d summary entries", heap100, heap10k, entries10k)
	runtime.KeepAlive(buf)
}

// Once warm, a Summary allocates nothing per record, and a StepSummary
// only the busy-time computation's scratch, a few allocations per step
// (not per record).
func TestSummariesSteadyStateAllocs(t *testing.T) {
	g := synthtrace.NewGenerator(synthtrace.TrainerShape(2, 0))
	var steps [][]profiler.Record
	for range 1200 {
		steps = append(steps, synthtrace.EndOrder(g.Step(nil)))
	}
	summary := profiler.NewSummary(profiler.WithSummaryTag("all steps"))
	stepSummary := profiler.NewStepSummary()
	for _, st := range steps[:200] {
		summary.Consume(st)
		stepSummary.Consume(st)
	}
	i := 200
	if n := testing.AllocsPerRun(500, func() { summary.Consume(steps[i]); i++ }); n != 0 {
		t.Errorf("Summary: %v allocations per step of %d records, want 0", n, len(steps[0]))
	}
	i = 700
	if n := testing.AllocsPerRun(400, func() { stepSummary.Consume(steps[i]); i++ }); n > 16 {
		t.Errorf("StepSummary: %v allocations per step of %d records, want at most 16", n, len(steps[0]))
	}
}
