package cycle_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// BenchmarkResult: what finding the cycle costs at the end of a run, for
// eight ranks. ddp: four all-reduces a step, found at once (4,403
// operations a rank); one-kind: 48 all-reduces of one size a step (tensor
// parallelism), whose multiples up to the step are tried (4,800); none:
// 4,096 sizes that never repeat; megatron: a pipeline stage's 3,209
// operations a step under tensor parallelism, the window full (32,768),
// megatron-kernels: the same timed on the device with two kernels an
// operation (the GPU's busy time in a cycle, from 65,536 device
// intervals); and megatron-none: the window full of sizes that never
// repeat. Consume's cost per record beside
// it (consume: keeping them, and counting every cycle of the run), and
// beside that the report's whole-run table taking the same records
// (profiler.Summary, the baseline).
func BenchmarkResult(b *testing.B) {
	oneKind := func(rank int) []profiler.Record {
		j := &job{rank: rank}
		t0 := time.Duration(0)
		for range 100 {
			for i := range 48 {
				j.call(t0+time.Duration(i)*ms, "AllReduce", 4*mib, -1)
			}
			t0 += 60 * ms
		}
		return j.recs
	}
	none := func(n int) func(rank int) []profiler.Record {
		return func(rank int) []profiler.Record {
			j := &job{rank: rank}
			for i := range n {
				j.call(time.Duration(i)*ms, "AllReduce", int64(i+1), -1)
			}
			return j.recs
		}
	}
	megatron := func(rank int) []profiler.Record {
		recs, _ := megatronStage(14, 32, 12, 2, 300*ms)
		for i := range recs {
			recs[i].Rank = rank
		}
		return recs
	}
	// The same with each operation timed on the device and two kernels
	// after it on two streams: the device work kept full too (65,536).
	kernels := func(rank int) []profiler.Record {
		var out []profiler.Record
		for _, r := range megatron(rank) {
			r.HasDevice, r.DeviceStart, r.DeviceEnd, r.Stream = true, r.HostStart+5*time.Microsecond, r.HostStart+25*time.Microsecond, 1
			out = append(out, r)
			for k := range 2 {
				out = append(out, profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: uint64(2 + k), HasDevice: true,
					DeviceStart: r.DeviceEnd, DeviceEnd: r.DeviceEnd + 30*time.Microsecond})
			}
		}
		return out
	}
	for _, c := range []struct {
		name string
		make func(rank int) []profiler.Record
	}{
		{"ddp", func(rank int) []profiler.Record { return ddp(rank, 1100, 100*ms, ms, uint64(rank)) }},
		{"one-kind", oneKind},
		{"none", none(4096)},
		{"megatron", megatron},
		{"megatron-kernels", kernels},
		{"megatron-none", none(cycle.Window)},
	} {
		s := cycle.NewSink(0)
		for rank := range 8 {
			s.Consume(c.make(rank))
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res := s.Result(); len(res.Ranks) != 8 {
					b.Fatal(len(res.Ranks))
				}
			}
		})
	}
	recs := ddp(0, 1100, 100*ms, ms, 1)
	span := recs[len(recs)-1].HostStart + 100*ms
	// later moves recs a run's length on, as the next steps of the job.
	later := func() {
		for i := range recs {
			recs[i].HostStart += span
		}
	}
	b.Run("consume", func(b *testing.B) {
		s := cycle.NewSink(0)
		for range cycle.Window/len(recs) + 1 { // the window full, as in a long run
			s.Consume(recs)
			later()
		}
		b.ReportAllocs()
		for b.Loop() {
			s.Consume(recs)
			later()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
	b.Run("consume-baseline-summary", func(b *testing.B) {
		s := profiler.NewSummary()
		b.ReportAllocs()
		for b.Loop() {
			s.Consume(recs)
			later()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
}
