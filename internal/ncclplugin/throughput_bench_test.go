package ncclplugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// jobShape is what each process of a synthetic wrapped job sends per
// step: its step range, traced kernels and all-reduces of two kernel
// channels.
type jobShape struct {
	procs, steps, kernels, collectives int
	step                               time.Duration
}

// frames is the number of records one process's stream holds.
func (s jobShape) frames() int {
	return s.steps * (2 + s.kernels + 3*s.collectives)
}

// delivered is the number of profiler records the collector makes of one
// process's stream: a step range, its kernels and its collectives.
func (s jobShape) delivered() int {
	return s.steps * (1 + s.kernels + s.collectives)
}

// jobStreams builds each process's plugin stream, from now on, as the plugin would send
// it for a data-parallel job with its kernels traced: per step the step
// range (start, then end), its all-reduces with their channels' GPU
// timers, then its kernels as CUPTI hands them over after the step.
// Kernels of 64 names, spread over 80 % of the step; every process's
// all-reduces share a communicator and sequence numbers, so the analysis
// matches them across ranks.
func jobStreams(b *testing.B, s jobShape) [][]byte {
	b.Helper()
	mono, err := monotonicNow()
	if err != nil {
		b.Fatal(err)
	}
	base := uint64(mono)
	const gpuAhead = 1_000_000_000
	const hash = 0xfeed
	out := make([][]byte, s.procs)
	for p := range s.procs {
		var buf bytes.Buffer
		buf.Grow((s.frames() + 80) * RecordSize)
		h := helloFrame(wireVersion, uint32(1000+p), "bench")
		putRank(h, p)
		buf.Write(h)
		buf.Write(activityFrame(0, base, 0, 0, 0, 0, 0, 0, "libcupti.so.13"))
		buf.Write(wireRec{kind: 1, hash: hash, rank: int32(p), nranks: int32(s.procs), nnodes: 1, peer: int32(p), name: "dp"}.frame())
		for id := range 64 {
			for _, f := range nameFrames(uint32(id+1), fmt.Sprintf("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_%d>(Params)", id)) {
				buf.Write(f)
			}
		}
		step := uint64(s.step)
		task := uint64(0)
		for st := range s.steps {
			t0 := base + uint64(st)*step
			name := fmt.Sprintf("step %d", st)
			buf.Write(rangeFrame(10, 1, uint64(st+1), 0, t0, 0, 0, name))
			for c := range s.collectives {
				task++
				at := t0 + step*uint64(c+1)/uint64(s.collectives+1)
				seq := uint64(st*s.collectives + c)
				buf.Write(wireRec{kind: 2, hash: hash, task: task, seq: seq, t0: at, t1: at + 5_000, a0: 1 << 20, a1: 4 << 20,
					rank: int32(p), nranks: int32(s.procs), peer: -1, fn: 1, dtype: 8, algo: 2, proto: 3, nch: 2, name: "dp"}.frame())
				for ch := range 2 {
					g := at + 10_000 + uint64(ch)*1_000
					buf.Write(wireRec{kind: 4, hash: hash, task: task, seq: seq, rank: int32(p), nranks: int32(s.procs), fn: 1, parent: 2,
						channel: uint8(ch), t0: g + gpuAhead, t1: g + 200_000 + gpuAhead, a0: g + 1_000, a1: g + 201_000}.frame())
				}
			}
			buf.Write(rangeFrame(10, 0, uint64(st+1), 0, t0, t0+step-1_000, 0, name))
			gap := step * 8 / 10 / uint64(s.kernels)
			for k := range s.kernels {
				kt := t0 + uint64(k)*gap
				buf.Write(activityFrame(1, kt, kt+gap*3/4, uint32(p), 7, uint32(k%64+1), 0, 0, ""))
			}
		}
		out[p] = buf.Bytes()
	}
	return out
}

// putRank sets the hello's launcher rank (RANK), which the plugin writes
// plus one (0: none).
func putRank(h []byte, rank int) {
	h[96], h[97], h[98], h[99] = byte(rank+1), byte((rank+1)>>8), 0, 0
}

// counter is a sink that counts what it is given.
type counter struct{ n atomic.Int64 }

func (c *counter) Consume(b []profiler.Record) { c.n.Add(int64(len(b))) }

// wrappedSinks adds to p the sinks profile-run gives a wrapped command's
// profiler by default (cmd/profile-run/outputs.go): the report's
// whole-run tables and step times, the trace's step window, the call
// log, the pprof profile, the pipeline analysis by steps and by calls,
// and the Prometheus exporter, which registers itself.
func wrappedSinks(b *testing.B, p *profiler.Profiler) {
	b.Helper()
	sinks := []profiler.Sink{
		profiler.NewSummary(profiler.WithSummaryTag("whole run")),
		profiler.NewStepSummary(),
		profiler.NewWindow(profiler.DefaultStepWindow, 1<<18),
		profiler.NewCallLog(filepath.Join(b.TempDir(), "calls"), 64<<20),
		pprof.NewAggregate(),
		analysis.NewSink(analysis.WithOneClock(), analysis.WithMaxOpenSteps(MaxHeldSteps)),
		analysis.NewCallSink(analysis.WithOneClock()),
	}
	for _, s := range sinks {
		if err := p.AddSink(s); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := prom.New(p); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCollectorThroughput: what one profile-run takes in from a
// wrapped job's processes, in plugin records a second (frames/s) and the
// profiler records they make (records/s). Eight processes send at once,
// each 30 steps of 2,000 traced kernels and 8 all-reduces, as fast as the
// collector reads them: "decode" only decodes the same bytes (the floor),
// "count" runs the collector into a sink that only counts, "outputs" into
// the sinks profile-run gives a wrapped command.
func BenchmarkCollectorThroughput(b *testing.B) {
	shape := jobShape{procs: 8, steps: 30, kernels: 2000, collectives: 8, step: 20 * time.Millisecond}
	streams := jobStreams(b, shape)
	frames := shape.procs * shape.frames()
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var wg sync.WaitGroup
			for _, s := range streams {
				wg.Go(func() {
					d := NewReader(bytes.NewReader(s))
					if _, err := d.Hello(); err != nil {
						b.Error(err)
						return
					}
					for {
						if _, err := d.Next(); err != nil {
							if err != io.EOF {
								b.Error(err)
							}
							return
						}
					}
				})
			}
			wg.Wait()
		}
		b.ReportMetric(float64(frames)*float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	})
	for _, v := range []struct {
		name       string
		outputs    bool
		concurrent bool
	}{{"count", false, false}, {"outputs", true, false}, {"outputs-concurrent", true, true}} {
		var opts []profiler.Option
		if v.concurrent {
			opts = append(opts, profiler.WithConcurrentSinks())
		}
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				runJob(b, shape, v.outputs, false, opts...)
			}
			b.ReportMetric(float64(frames)*float64(b.N)/b.Elapsed().Seconds(), "frames/s")
			b.ReportMetric(float64(shape.procs*shape.delivered())*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// runJob sends shape's streams, one connection a process and all at once,
// into a new collector and profiler (with the sinks profile-run gives a
// wrapped command where outputs), timed from the first write until the
// collector has closed, and checks that every record came. With live it
// returns the heap still live, in MiB, once every stream is in and
// dropped (after a collection, before the collector closes; the close is
// then not timed).
func runJob(b *testing.B, shape jobShape, outputs, live bool, opts ...profiler.Option) float64 {
	b.StopTimer()
	p, err := profiler.New(append([]profiler.Option{profiler.WithMaxRecords(0)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	n := &counter{}
	if err := p.AddSink(n); err != nil {
		b.Fatal(err)
	}
	if outputs {
		wrappedSinks(b, p)
	}
	c, err := NewCollector(p, WithLinger(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	// The job starts after the profiler, as a wrapped one does: its times
	// fall after the epoch.
	streams := jobStreams(b, shape)
	b.StartTimer()
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			conn, err := net.Dial("unix", c.SocketPath())
			if err != nil {
				b.Error(err)
				return
			}
			defer conn.Close()
			if _, err := conn.Write(streams[i]); err != nil {
				b.Error(err)
			}
			streams[i] = nil
		})
	}
	wg.Wait()
	var mb float64
	if live {
		b.StopTimer()
		goruntime.GC()
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		mb = float64(ms.HeapAlloc) / (1 << 20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		b.Error(err)
	}
	if err := p.Close(ctx); err != nil {
		b.Error(err)
	}
	b.StopTimer()
	if got, want := n.n.Load(), int64(shape.procs*shape.delivered()); got != want {
		b.Fatalf("%d records delivered, want %d (%d processes × %d steps × (1 step + %d kernels + %d all-reduces))",
			got, want, shape.procs, shape.steps, shape.kernels, shape.collectives)
	}
	if st := c.Stats(); st.DecodeErrors != 0 || st.Kernels != uint64(shape.procs*shape.steps*shape.kernels) {
		b.Fatalf("collector stats %+v", st)
	}
	b.StartTimer()
	return mb
}

// BenchmarkCollectorLongRun: the memory profile-run's wrapped outputs
// keep as a job runs on. Eight processes each send steps as in
// BenchmarkCollectorThroughput (2,000 kernels and 8 all-reduces a step),
// 30 steps and 240; once every stream is in and dropped, the heap still
// live ("live-MB", after a collection, before the collector closes) is
// what the collector and the sinks hold, which must not grow with the
// steps.
func BenchmarkCollectorLongRun(b *testing.B) {
	for _, steps := range []int{30, 240} {
		b.Run(fmt.Sprintf("steps=%d", steps), func(b *testing.B) {
			shape := jobShape{procs: 8, steps: steps, kernels: 2000, collectives: 8, step: 20 * time.Millisecond}
			var live float64
			for range b.N {
				live = max(live, runJob(b, shape, true, true))
			}
			b.ReportMetric(live, "live-MB")
			b.ReportMetric(float64(shape.procs*shape.delivered())*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
