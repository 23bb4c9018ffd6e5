package prom_test

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
)

// trainerBatch imitates what the built-in trainer delivers for one step on
// 4 ranks × 2 chunks × 8 microbatches: per action a forward or backward
// range with nested GEMM and elementwise ranges, a Send or Recv, and per
// rank the step, optimizer and AllReduce ranges.
func trainerBatch() []profiler.Record {
	var out []profiler.Record
	for rank := range 4 {
		id := uint64(1)
		next := func() uint64 { id++; return id }
		t := 0.0
		for chunk := range 2 {
			for mb := range 8 {
				for _, ph := range []profiler.Phase{profiler.Forward, profiler.Backward} {
					name := "forward"
					if ph == profiler.Backward {
						name = "backward"
					}
					a := action(next(), 1, name, ph, chunk, mb, t, t+0.4)
					a.Rank = rank
					for _, n := range []string{"linear", "tanh", "linear", "tanh"} {
						c := action(next(), a.ID, n, ph, chunk, mb, t, t+0.1)
						c.Depth, c.Rank = 2, rank
						out = append(out, c)
					}
					p := collective(next(), 1, "Send", "pp0", 4096, 1, 2, t+0.3, t+0.4)
					p.Rank, p.Phase, p.Chunk, p.Microbatch = rank, ph, int16(chunk), int32(mb)
					out = append(out, p, a)
					t += 0.5
				}
			}
		}
		for chunk := range 2 {
			ar := collective(next(), 1, "AllReduce", "dp0", 1<<20, 1, 2, t, t+1)
			ar.Rank, ar.Phase, ar.Chunk = rank, profiler.Optimizer, int16(chunk)
			out = append(out, ar)
		}
		s := rec(1, 0, 0, "step", profiler.KindHost, 0, t+2, 0, 0)
		s.Rank = rank
		out = append(out, s)
	}
	return out
}

// renumber gives the batch's records fresh IDs, as a new step has.
func renumber(batch []profiler.Record, by uint64) {
	for i := range batch {
		batch[i].ID += by
		if batch[i].Parent != 0 {
			batch[i].Parent += by
		}
	}
}

// BenchmarkConsume measures records → metrics on one goroutine (run it
// with -cpu 1 for one core); records/s is the figure the issue asks for.
func BenchmarkConsume(b *testing.B) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		b.Fatal(err)
	}
	batch := trainerBatch()
	e.Consume(batch) // series exist from here on, as in a running job
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		renumber(batch, 1<<20)
		e.Consume(batch)
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkConsumeNaiveBaseline is the obvious sink for comparison: label
// values formatted and looked up in the client's vectors for every record.
func BenchmarkConsumeNaiveBaseline(b *testing.B) {
	reg := prometheus.NewRegistry()
	hostH := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Buckets: prometheus.ExponentialBuckets(1e-6, 2, 25)},
		[]string{"rank", "gpu", "UUID", "name", "kind", "stage", "chunk", "phase"})
	devH := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d", Buckets: prometheus.ExponentialBuckets(1e-6, 2, 25)},
		[]string{"rank", "gpu", "UUID", "name", "kind", "stage", "chunk", "phase"})
	recs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "r_total"}, []string{"rank", "gpu", "UUID", "name"})
	reg.MustRegister(hostH, devH, recs)
	batch := trainerBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			r := &batch[i]
			rank, gpu := strconv.Itoa(r.Rank), strconv.Itoa(r.Device.Index)
			l := []string{rank, gpu, "", r.Name, r.Kind.String(), strconv.Itoa(int(r.Stage)), strconv.Itoa(int(r.Chunk)), r.Phase.String()}
			recs.WithLabelValues(rank, gpu, "", r.Name).Inc()
			hostH.WithLabelValues(l...).Observe(r.HostDuration().Seconds())
			if r.HasDevice {
				devH.WithLabelValues(l...).Observe(r.DeviceDuration().Seconds())
			}
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
}
