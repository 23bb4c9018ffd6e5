package trainrun

import (
	"context"
	"fmt"
	"sync"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local" // collectives for the CPU backend
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu" // the CPU backend
)

// Layout is one small training run.
type Layout struct {
	Name        string
	Config      pipeline.Config
	DeviceDepth int // profiler.WithDeviceDepth
	MaxRecords  int // profiler.WithMaxRecords; 0 for the default
}

// Layouts returns small runs of a few steps that together cover device
// depth 0 and 1, one and two data-parallel replicas, and both schedules.
func Layouts() []Layout {
	cfg := func(pp, vpp, dp int, sched string) pipeline.Config {
		c := pipeline.DefaultConfig()
		c.Backend = runtime.CPU
		c.Stages, c.Chunks, c.Replicas = pp, vpp, dp
		c.Microbatches, c.MicrobatchSize = 4, 4
		c.Width, c.Layers = 16, 8
		c.Steps = 4
		c.Schedule = sched
		c.CommTimeout = 20 * time.Second
		return c
	}
	var out []Layout
	for _, depth := range []int{0, 1} {
		for _, dp := range []int{1, 2} {
			out = append(out, Layout{fmt.Sprintf("pp2-vpp2-dp%d-1f1b-depth%d", dp, depth), cfg(2, 2, dp, pipeline.Schedule1F1B), depth, 0})
		}
	}
	out = append(out, Layout{"pp2-vpp1-dp1-gpipe-depth1", cfg(2, 1, 1, pipeline.ScheduleGPipe), 1, 0})
	return out
}

// Tape is a sink that keeps a copy of every batch it is given.
type Tape struct {
	mu      sync.Mutex
	batches [][]profiler.Record
}

// Consume keeps a copy of batch.
func (t *Tape) Consume(batch []profiler.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batches = append(t.batches, append([]profiler.Record(nil), batch...))
}

// Batches returns the batches received so far.
func (t *Tape) Batches() [][]profiler.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([][]profiler.Record(nil), t.batches...)
}

// Records returns every record received so far, in order.
func (t *Tape) Records() []profiler.Record {
	var out []profiler.Record
	for _, b := range t.Batches() {
		out = append(out, b...)
	}
	return out
}

// closeTimeout bounds closing the profiler: the collector's last pass and
// the sinks' Shutdown. Close is given a context of its own, not ctx, so
// that a run interrupted by ctx (or one that ended just as Run finished)
// still delivers its last records and shuts its sinks down in full.
const closeTimeout = 30 * time.Second

// Run trains l with a profiler whose sinks are sinks, flushes it, and
// returns what a Tape registered after them received, and the profiler's
// Stats. The profiler is closed before Run returns, also when ctx ends
// during the run: closing waits up to closeTimeout, whether ctx has ended
// or not.
func Run(ctx context.Context, l Layout, sinks ...profiler.Sink) (*Tape, profiler.Stats, error) {
	tape, st, _, err := RunSnapshot(ctx, l, sinks...)
	return tape, st, err
}

// RunSnapshot is Run that also returns the profiler's Snapshot after the
// flush: the records its store kept.
func RunSnapshot(ctx context.Context, l Layout, sinks ...profiler.Sink) (*Tape, profiler.Stats, []profiler.Record, error) {
	opts := []profiler.Option{profiler.WithDeviceDepth(l.DeviceDepth)}
	if l.MaxRecords > 0 {
		opts = append(opts, profiler.WithMaxRecords(l.MaxRecords))
	}
	p, err := profiler.New(opts...)
	if err != nil {
		return nil, profiler.Stats{}, nil, err
	}
	closeCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	}
	tape := &Tape{}
	// A new slice: appending to sinks would write the tape into the
	// caller's array where it has room past its length.
	for _, s := range append(append(make([]profiler.Sink, 0, len(sinks)+1), sinks...), tape) {
		if err := p.AddSink(s); err != nil {
			cctx, cancel := closeCtx()
			_ = p.Close(cctx)
			cancel()
			return nil, profiler.Stats{}, nil, err
		}
	}
	cfg := l.Config
	cfg.Profiler = p
	_, err = pipeline.Train(ctx, cfg)
	if err == nil {
		err = p.Flush(ctx)
	}
	st := p.Stats()
	kept := p.Snapshot()
	cctx, cancel := closeCtx()
	defer cancel()
	if cerr := p.Close(cctx); err == nil {
		err = cerr
	}
	return tape, st, kept, err
}
