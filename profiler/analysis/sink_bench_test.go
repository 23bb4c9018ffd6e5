package analysis_test

import (
	"testing"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// BenchmarkSink measures the analysis sink, which every profiled run of
// profile-run feeds from the profiler's collector, beside the step
// breakdown (profiler.StepSummary) fed the same batches: its baseline,
// the other per-step sink of every run. 8 ranks × 20 trainer-shaped steps
// (61,760 records) in the order a profiler delivers them, in batches of
// 4096.
func BenchmarkSink(b *testing.B) {
	recs := synthtrace.EndOrder(synthtrace.Trainer(8, 20))
	var batches [][]profiler.Record
	for i := 0; i < len(recs); i += 4096 {
		batches = append(batches, recs[i:min(i+4096, len(recs))])
	}
	rate := func(b *testing.B) {
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("analysis", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := analysis.NewSink()
			for _, batch := range batches {
				s.Consume(batch)
			}
			s.Flush()
			_ = s.Summary()
		}
		rate(b)
	})
	b.Run("step-summary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := profiler.NewStepSummary()
			for _, batch := range batches {
				s.Consume(batch)
			}
			_ = s.Breakdown()
		}
		rate(b)
	})
}
