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

// BenchmarkEstimateOffsets measures the clock estimate profile-run import
// makes once over every record of the files it reads, beside its baseline,
// the collectives' matching it rests on (analysis.Analyze without
// alignment, which matches them step by step). 64 ranks × 2,000
// all-reduces of 8 groups of 8 and 2,000 of all 64, in 100 steps; each
// rank on a clock of its own (64 files, as torch.profiler writes them) and
// by host (8 files of 8 ranks, one profile-run per host).
func BenchmarkEstimateOffsets(b *testing.B) {
	const ranks, perHost, steps, calls = 64, 8, 100, 2000
	var recs []profiler.Record
	id := uint64(0)
	coll := func(r int, step int32, group string, size, grank int, seq uint64, at time.Duration) {
		id++
		recs = append(recs, profiler.Record{ID: id, Name: "AllReduce", Kind: profiler.KindCollective, Rank: r,
			Labels:    profiler.Labels{Step: step, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Comm},
			HostStart: at, HostEnd: at, HasDevice: true, DeviceStart: at, DeviceEnd: at + 300*time.Microsecond + time.Duration(r%5)*time.Microsecond,
			Collective: profiler.Collective{Op: "AllReduce", Group: group, GroupSize: int32(size), GroupRank: int32(grank), Peer: -1, Root: -1, Seq: seq, Bytes: 1 << 20}})
	}
	for k := range calls {
		step := int32(k * steps / calls)
		t := time.Duration(k) * time.Millisecond
		for r := range ranks {
			skew := time.Duration(r/perHost) * 3 * time.Millisecond // each host's clock
			coll(r, step, "node"+string(rune('a'+r/perHost)), perHost, r%perHost, uint64(k), t+skew+time.Duration(r%3)*time.Microsecond)
			coll(r, step, "world", ranks, r, uint64(k), t+500*time.Microsecond+skew)
		}
	}
	hosts := map[int]int{}
	for r := range ranks {
		hosts[r] = r / perHost
	}
	rate := func(b *testing.B) {
		b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("ranks", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if o := analysis.EstimateOffsets(recs); len(o.Unaligned) != 0 {
				b.Fatalf("unaligned %v", o.Unaligned)
			}
		}
		rate(b)
	})
	b.Run("hosts", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if o := analysis.EstimateOffsets(recs, analysis.WithClockDomains(hosts)); len(o.Unaligned) != 0 {
				b.Fatalf("unaligned %v", o.Unaligned)
			}
		}
		rate(b)
	})
	b.Run("match", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = analysis.Analyze(recs)
		}
		rate(b)
	})
}
