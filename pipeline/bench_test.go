package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// launchBound is a step of many tiny kernels: 64 layers of width 8 over
// 2 stages × 2 chunks and 8 microbatches of 2 rows, so that per-op costs
// (enqueueing, events, profiling) dominate the arithmetic.
func launchBound() Config {
	c := DefaultConfig()
	c.Width, c.Layers = 8, 64
	c.Microbatches, c.MicrobatchSize = 8, 2
	c.LearningRate = 0.1
	return c
}

// BenchmarkStep measures one training step (ns/op is per step) without
// profiling, with trainscope's profiler, and with the profiler
// synchronising the stream around every device range.
func BenchmarkStep(b *testing.B) {
	cases := []struct {
		name string
		opts []profiler.Option
		off  bool
	}{
		{name: "profiling=off", off: true},
		{name: "profiling=on"},
		{name: "profiling=on,device-depth=1", opts: []profiler.Option{profiler.WithDeviceDepth(1)}},
		{name: "profiling=sync-each-range", opts: []profiler.Option{profiler.WithSyncEachRange()}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			cfg := launchBound()
			if !bc.off {
				p, err := profiler.New(bc.opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close(context.Background())
				cfg.Profiler = p
			}
			tr, err := NewTrainer(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if p := cfg.Profiler; p != nil {
				st := p.Stats()
				b.ReportMetric((float64(st.Records+st.Pending)+float64(st.Dropped+st.Overflow))/float64(b.N), "ranges/op")
			}
		})
	}
}

// wide is a step of large GEMMs: width 1024, 8 layers on one stage, 8
// microbatches of 64 rows, where the data's cost shows.
func wide() Config {
	c := DefaultConfig()
	c.Stages, c.Chunks = 1, 1
	c.Width, c.Layers = 1024, 8
	c.Microbatches, c.MicrobatchSize = 8, 64
	c.LearningRate = 0.1
	return c
}

// BenchmarkStepWide measures one training step of the wide configuration
// on the CPU backend (ns/op is per step).
func BenchmarkStepWide(b *testing.B) {
	tr, err := NewTrainer(context.Background(), wide())
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Step(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadBatch measures the host's part of a step's data on the
// wide configuration (one rank, first and last virtual stage): copying
// the step's rows of the dataset and enqueueing the targets' GEMM, beside
// the former way, which drew every sample and computed its target in
// float64 on the host each step. The device's (here the stream
// goroutine's) work is waited for with the timer stopped.
func BenchmarkLoadBatch(b *testing.B) {
	cases := []struct {
		name string
		load func(r *rank, step int) error
	}{
		{"data=dataset,targets=device", (*rank).loadBatch},
		{"data=drawn-each-step,targets=host-float64", newHostTargets().load},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			tr, err := NewTrainer(context.Background(), wide())
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			r, ctx := tr.ranks[0].r, context.Background()
			step := 0
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.load(r, step); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := r.compute.Synchronize(ctx); err != nil {
					b.Fatal(err)
				}
				step++
				b.StartTimer()
			}
		})
	}
}

// hostTargets is the baseline of BenchmarkLoadBatch: the data path as it
// was, each step drawing the microbatches' samples, computing their
// targets on the host (batchRows with a projection) and uploading both.
type hostTargets struct {
	proj            []float32
	x32, t32        []float32
	hostIn, hostTgt [][]byte
}

func newHostTargets() *hostTargets { return &hostTargets{} }

func (h *hostTargets) load(r *rank, step int) error {
	cfg, s := r.cfg, r.compute
	if h.proj == nil {
		h.proj = targetProjection(cfg.Seed, cfg.Width)
		h.x32, h.t32 = make([]float32, r.n), make([]float32, r.n)
		h.hostIn, h.hostTgt = hostBuffers(cfg.Microbatches, r.n), hostBuffers(cfg.Microbatches, r.n)
	}
	first, last := &r.chunks[0], &r.chunks[len(r.chunks)-1]
	r.rec.StartDevice("load_batch", s)
	defer r.rec.End()
	for mb := range cfg.Microbatches {
		batchRows(cfg.Seed, cfg.firstSample(step, r.replica, mb), r.rows, cfg.Width, h.proj, h.x32, h.t32)
		if err := runtime.CopyToDevice(first.act[mb][0], float32Bytes(h.x32, h.hostIn[mb]), s); err != nil {
			return err
		}
		if err := runtime.CopyToDevice(last.target[mb], float32Bytes(h.t32, h.hostTgt[mb]), s); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkStepStages measures one step (ns/op) of pipelines of growing
// depth on the CPU backend without profiling: tiny layers, so that the
// ranks' scheduling dominates. A step's work grows with the stages, so
// doubling them should about double ns/op.
func BenchmarkStepStages(b *testing.B) {
	for _, pp := range []int{16, 32, 64} {
		b.Run(fmt.Sprintf("pp=%d", pp), func(b *testing.B) {
			c := DefaultConfig()
			c.Stages, c.Chunks = pp, 1
			c.Width, c.Layers = 4, pp
			c.Microbatches, c.MicrobatchSize = 8, 2
			tr, err := NewTrainer(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			ctx := context.Background()
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
