package analysis

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkStepActions analyses one step of a two-stage pipeline whose
// ranks each run n forward and backward actions (2 chunks × 5
// microbatches), every one followed by an idle gap: the bubble is split
// by chunk at each gap. n = 100 is the baseline the larger sizes read
// against; the real ones run 10⁴–10⁵ actions a rank and step (many layers
// × many microbatches).
func BenchmarkStepActions(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		s := synthShape{stages: 2, tp: 1, chunks: 2, mbs: 5, layers: 1, kernels: n / 20,
			kernel: 10 * time.Microsecond, jitter: 2 * time.Microsecond, gap: time.Microsecond, xfer: 5 * time.Microsecond, unit: 10 * time.Nanosecond}
		recs := s.records(rand.New(rand.NewPCG(1, uint64(n))), 0)
		b.Run(fmt.Sprintf("actions=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if st := Analyze(recs); len(st) != 1 || !st[0].Complete() || len(st[0].Ranks[0].Chunks) != 2 {
					b.Fatalf("not one complete step split by 2 chunks: %d steps", len(st))
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n)*1e9, "ns/action")
		})
	}
}

// BenchmarkStepCollectives analyses one step of a job of 2 pipeline
// stages × 4-way tensor parallelism: each rank runs n all-reduces of its
// stage's group (one a layer, after its kernel, forward and backward,
// over 5 microbatches), as a tensor-parallel job issues thousands to tens
// of thousands a step. n = 100 is the baseline.
func BenchmarkStepCollectives(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 40000} {
		s := synthShape{stages: 2, tp: 4, chunks: 1, mbs: 5, layers: n / 10, kernels: 1, world: true,
			kernel: 20 * time.Microsecond, jitter: 8 * time.Microsecond, gap: 0, xfer: 5 * time.Microsecond, unit: 10 * time.Nanosecond}
		recs := s.records(rand.New(rand.NewPCG(2, uint64(n))), 0)
		b.Run(fmt.Sprintf("collectives=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if st := Analyze(recs); len(st) != 1 || !st[0].Complete() || len(st[0].Collectives) != 2*n+1 {
					b.Fatalf("not one complete step of %d collectives: %d steps", 2*n+1, len(st))
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n)*1e9, "ns/collective")
		})
	}
}

// BenchmarkStepKernels analyses one step of a wrapped job's traced
// kernels, labelled with their stage alone (2 stages × 4-way tensor
// parallelism): each rank runs n kernels, spread over 4 streams where they
// overlap, with an all-reduce of its stage's group after every 10. A
// wrapped run with traced kernels makes 10⁵–10⁶ kernel records a step;
// n = 100 is the baseline.
func BenchmarkStepKernels(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		s := synthShape{stages: 2, tp: 4, chunks: 1, mbs: 5, layers: n / 100, kernels: 10, world: true, traced: true, streams: 4,
			kernel: 20 * time.Microsecond, jitter: 8 * time.Microsecond, gap: 0, xfer: 5 * time.Microsecond, unit: 10 * time.Nanosecond}
		recs := s.records(rand.New(rand.NewPCG(3, uint64(n))), 0)
		b.Run(fmt.Sprintf("kernels=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if st := Analyze(recs); len(st) != 1 || !st[0].Complete() || !st[0].Pipeline.Traced {
					b.Fatalf("not one complete step of traced kernels: %d steps", len(st))
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/float64(n)*1e9, "ns/kernel")
		})
	}
}
