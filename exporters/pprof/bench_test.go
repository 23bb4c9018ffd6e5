package pprof_test

import (
	"io"
	"testing"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/profiler"
)

// BenchmarkWrite measures records → gzip-compressed profile, the whole of
// Write, on one goroutine; records/s is the figure the issue bounds.
func BenchmarkWrite(b *testing.B) {
	recs := synthtrace.Trainer(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := pprof.Write(io.Discard, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBuild measures records → *profile.Profile without encoding.
func BenchmarkBuild(b *testing.B) {
	recs := synthtrace.Trainer(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := pprof.Build(recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBuildProfileWrite is the baseline: the same profile built as
// profile.Sample values and encoded by pprof's own profile.Write.
func BenchmarkBuildProfileWrite(b *testing.B) {
	recs := synthtrace.Trainer(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := pprof.Build(recs)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Write(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAggregate measures the whole-run profile kept online: an
// Aggregate fed the records of BenchmarkWrite in delivery order, batch by
// batch, then written. Its baselines are BenchmarkBuild and
// BenchmarkWrite over the whole list.
func BenchmarkAggregate(b *testing.B) {
	recs := synthtrace.EndOrder(synthtrace.Trainer(8, 20))
	var batches [][]profiler.Record
	for i := 0; i < len(recs); i += 4096 {
		batches = append(batches, recs[i:min(i+4096, len(recs))])
	}
	b.Run("consume", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a := pprof.NewAggregate()
			for _, batch := range batches {
				a.Consume(batch)
			}
		}
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("consume+write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a := pprof.NewAggregate()
			for _, batch := range batches {
				a.Consume(batch)
			}
			if _, err := a.Write(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
