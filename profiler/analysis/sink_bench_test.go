package analysis_test

import (
	"testing"
	"time"

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

// BenchmarkCallSink measures the sink a wrapped run's records feed
// (analysis.CallSink, clocks aligned, as profile-run -- CMD adds it)
// beside its baseline, the report tables (profiler.Summary) that every
// run feeds the same batches. 8 ranks × 20,000 all-reduces of one group
// and as many sends, each rank's records in runs of 512 as the collector
// merges processes, in batches of 4096.
func BenchmarkCallSink(b *testing.B) {
	const ranks, calls, run = 8, 20000, 512
	var recs []profiler.Record
	for from := 0; from < calls; from += run {
		for r := range ranks {
			for k := from; k < min(from+run, calls); k++ {
				t := time.Duration(k) * time.Millisecond
				arrive := t + time.Duration(r*13%7)*time.Microsecond
				recs = append(recs,
					profiler.Record{ID: uint64(2*k + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
						HostStart: arrive, HostEnd: arrive, HasDevice: true, DeviceStart: arrive, DeviceEnd: t + 500*time.Microsecond,
						Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: ranks, GroupRank: int32(r), Peer: -1, Root: -1, Seq: uint64(k), Bytes: 1 << 20}},
					profiler.Record{ID: uint64(2*k + 2), Name: "Send", Kind: profiler.KindP2P, Rank: r, Labels: profiler.NoLabels,
						HostStart: t, HostEnd: t, HasDevice: true, DeviceStart: t + 600*time.Microsecond, DeviceEnd: t + 700*time.Microsecond,
						Collective: profiler.Collective{Op: "Send", Group: "pp", GroupSize: 2, Peer: int32(r ^ 1), Root: -1, Seq: uint64(k), Bytes: 1 << 20}})
			}
		}
	}
	var batches [][]profiler.Record
	for i := 0; i < len(recs); i += 4096 {
		batches = append(batches, recs[i:min(i+4096, len(recs))])
	}
	rate := func(b *testing.B) {
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("calls", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := analysis.NewCallSink(analysis.WithClockAlignment())
			for _, batch := range batches {
				s.Consume(batch)
			}
			s.Flush()
			if sum := s.Summary(); sum.Collectives.Matched != calls {
				b.Fatalf("%d matched, want %d", sum.Collectives.Matched, calls)
			}
		}
		rate(b)
	})
	b.Run("report-tables", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := profiler.NewSummary()
			for _, batch := range batches {
				s.Consume(batch)
			}
			_ = s.Groups()
		}
		rate(b)
	})
}
