package analysis

import (
	"testing"

	"github.com/trainscope/trainscope/internal/testmem"
	"github.com/trainscope/trainscope/profiler"
)

// longRun feeds s steps from..to-1 of two ranks, each a step range, a
// forward and a backward on stream 1 and an all-reduce on stream 2, one
// batch a step.
func longRun(s *Sink, b *build, from, to int) {
	for step := from; step < to; step++ {
		b.recs = b.recs[:0]
		o := float64(step * 100)
		for r := range 2 {
			b.step(r, step, r, o, o+100)
			b.dev(r, step, r, 0, 0, profiler.Forward, 1, o+10+float64(20*r), o+30+float64(20*r))
			b.dev(r, step, r, 0, 0, profiler.Backward, 1, o+60-float64(20*r), o+80-float64(20*r))
			b.coll(r, step, r, "AllReduce", "dp", 2, r, -1, uint64(step), 2, o+85+float64(r), o+95)
		}
		s.Consume(b.recs)
	}
}

// TestSinkMemoryFlat: over a run of 100,000 steps a Sink holds what it
// held after 10,000 (within 1 MiB, where each step's records are 1 kB),
// and its totals cover every step.
func TestSinkMemoryFlat(t *testing.T) {
	s := NewSink(WithClockAlignment())
	var b build
	longRun(s, &b, 0, 10000)
	early := testmem.LiveHeap()
	longRun(s, &b, 10000, 100000)
	late := testmem.LiveHeap()
	s.Flush()
	sum := s.Summary()
	if sum.Steps != 100000 || sum.Complete != 100000 || sum.Collectives.Matched != 100000 {
		t.Fatalf("%d steps, %d complete, %d collectives; want 100000 of each", sum.Steps, sum.Complete, sum.Collectives.Matched)
	}
	// Per step: rank 0 computes [10, 30) and [60, 80), 40 ms of its
	// 100 ms step, and rank 1 [30, 50) and [40, 60): the span is
	// [10, 80), rank 0's bubble its 30 ms without computation there.
	if r := sum.Ranks[0]; r.Wall != 100000*d(100) || r.Busy != 100000*d(40) || r.Bubble != 100000*d(30) {
		t.Errorf("rank 0 totals %+v", r)
	}
	t.Logf("heap after 10,000 steps %d B, after 100,000 %d B", early, late)
	if late > early+1<<20 {
		t.Errorf("the heap grew from %d B after 10,000 steps to %d B after 100,000", early, late)
	}
}

// BenchmarkSinkLongRun reports what a Sink allocates per step of a long
// run, and how much its heap grew from the first 10% of the run to the
// end (heap-growth-B): flat, whatever the run's length.
func BenchmarkSinkLongRun(b *testing.B) {
	b.ReportAllocs()
	var growth float64
	for b.Loop() {
		s := NewSink(WithClockAlignment())
		var bl build
		longRun(s, &bl, 0, 10000)
		early := testmem.LiveHeap()
		longRun(s, &bl, 10000, 100000)
		growth = float64(testmem.LiveHeap()) - float64(early)
		s.Flush()
	}
	b.ReportMetric(growth, "heap-growth-B")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/step")
}
