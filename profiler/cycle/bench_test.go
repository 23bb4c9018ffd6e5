package cycle_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// BenchmarkResult: what finding the cycle costs at the end of a run, for
// eight ranks whose windows are full (4096 operations each). ddp: four
// all-reduces a step, found at once; one-kind: 48 all-reduces of one size
// a step (tensor parallelism), whose every multiple up to the step is
// tried; none: sizes that never repeat. Consume's cost per record beside
// it (consume), and beside that the report's whole-run table taking the
// same records (profiler.Summary, the baseline).
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
	none := func(rank int) []profiler.Record {
		j := &job{rank: rank}
		for i := range cycle.Window {
			j.call(time.Duration(i)*ms, "AllReduce", int64(i+1), -1)
		}
		return j.recs
	}
	for _, c := range []struct {
		name string
		make func(rank int) []profiler.Record
	}{
		{"ddp", func(rank int) []profiler.Record { return ddp(rank, 1100, 100*ms, ms, uint64(rank)) }},
		{"one-kind", oneKind},
		{"none", none},
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
	b.Run("consume", func(b *testing.B) {
		s := cycle.NewSink(0)
		b.ReportAllocs()
		for b.Loop() {
			s.Consume(recs)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
	b.Run("consume-baseline-summary", func(b *testing.B) {
		s := profiler.NewSummary()
		b.ReportAllocs()
		for b.Loop() {
			s.Consume(recs)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
}
