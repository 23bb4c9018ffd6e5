package profiler_test

import (
	"testing"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/profiler"
)

// benchBatches is 8 ranks × 20 steps of trainer-shaped records (61,760)
// in the order a profiler delivers host ranges, cut into batches of 4096
// as collector passes would.
func benchBatches() ([]profiler.Record, [][]profiler.Record) {
	recs := synthtrace.EndOrder(synthtrace.Trainer(8, 20))
	var batches [][]profiler.Record
	for i := 0; i < len(recs); i += 4096 {
		batches = append(batches, recs[i:min(i+4096, len(recs))])
	}
	return recs, batches
}

func reportRecords(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSummary compares the report's tables kept online (a Summary
// fed batch by batch) with the whole-list computations, its baselines.
func BenchmarkSummary(b *testing.B) {
	recs, batches := benchBatches()
	b.Run("online", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := profiler.NewSummary(profiler.WithSummaryTag("all steps"))
			for _, batch := range batches {
				s.Consume(batch)
			}
			_ = s.Groups()
		}
		reportRecords(b, len(recs))
	})
	b.Run("online-per-step-tags", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := profiler.NewSummary()
			for _, batch := range batches {
				s.Consume(batch)
			}
			_ = s.Groups()
		}
		reportRecords(b, len(recs))
	})
	// Summarize is a Summary fed the whole list at once.
	b.Run("Summarize", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = profiler.Summarize(recs)
		}
		reportRecords(b, len(recs))
	})
	// The computation Summarize made before Record.DeviceNested: an
	// ancestor walk over an index of the whole list (the tests'
	// reference).
	b.Run("ancestor-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = walkSummarize(recs, tagOf)
		}
		reportRecords(b, len(recs))
	})
}

// BenchmarkStepSummary compares the step breakdown kept online with
// StepBreakdown over the whole list, its baseline.
func BenchmarkStepSummary(b *testing.B) {
	recs, batches := benchBatches()
	b.Run("online", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := profiler.NewStepSummary()
			for _, batch := range batches {
				s.Consume(batch)
			}
			_ = s.Ranks()
		}
		reportRecords(b, len(recs))
	})
	b.Run("StepBreakdown", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = profiler.StepBreakdown(recs)
		}
		reportRecords(b, len(recs))
	})
}
