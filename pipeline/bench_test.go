package pipeline

import (
	"context"
	"testing"

	"github.com/trainscope/trainscope/profiler"
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
