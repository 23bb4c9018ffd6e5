package nccl_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// launchBound is the pipeline package's launch-bound step (64 layers of
// width 8, 2 stages × 2 chunks, 8 microbatches of 2 rows) on CUDA+NCCL:
// thousands of tiny kernels, so per-op host costs dominate.
func launchBound() pipeline.Config {
	c := pipeline.DefaultConfig()
	c.Backend = runtime.CUDA
	c.Width, c.Layers = 8, 64
	if l, err := strconv.Atoi(os.Getenv("TRAINSCOPE_BENCH_LAYERS")); err == nil && l > 0 {
		c.Layers = l
	}
	c.Microbatches, c.MicrobatchSize = 8, 2
	c.LearningRate = 0.1
	return c
}

// BenchmarkTrainerStep (evidence b): one training step (ns/op is per
// step) without profiling, with trainscope's profiler, and with the
// profiler synchronising the stream around every device range.
func BenchmarkTrainerStep(b *testing.B) {
	gpus(b, 2)
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
			ctx := context.Background()
			tr, err := pipeline.NewTrainer(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			for range 3 { // warm up: connections, cuBLAS handles, kernels
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if p := cfg.Profiler; p != nil {
				st := p.Stats()
				b.ReportMetric((float64(st.Records+st.Pending)+float64(st.Dropped+st.Overflow))/float64(b.N+3), "ranges/op")
				if st.EventDrops != 0 || st.Errors != 0 {
					b.Logf("stats %+v", st)
				}
			}
		})
	}
}

// collectiveSizes are the message sizes S of evidence c (nccl-tests'
// convention: the total gathered size for AllGather and ReduceScatter).
var collectiveSizes = []struct {
	name  string
	bytes int64
}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}, {"256MiB", 256 << 20}, {"1GiB", 1 << 30}}

// BenchmarkCollective (evidence c): the bus bandwidth the profiler
// reports for each call (its records' device times) beside an
// independent timing of the same calls, raw events recorded on the
// communication stream around the loop. Run with a fixed count, e.g.
// -test.benchtime=20x. ranges-adjacent is how many of the calls' starts
// and ends took the stream's latest event instead of recording one
// (profiler.Stats.Adjacent, profiler.WithAdjacentRanges).
func BenchmarkCollective(b *testing.B) {
	rt, be := gpus(b, 2)
	const n = 2
	devs := devices(n)
	f := ccl.NewProcessGroupFactory(be, rt)
	defer f.Destroy()
	pg, err := f.GetOrCreate("bench", devs)
	if err != nil {
		b.Fatal(err)
	}
	benchCollective(b, devs, []*ccl.ProcessGroup{pg, pg})
}

// BenchmarkSharedCollective is BenchmarkCollective for two ranks sharing
// one GPU through the in-process backend (ccl/local.NewShared): each rank
// its own ProcessGroup endpoint and stream, as the trainer makes them.
func BenchmarkSharedCollective(b *testing.B) {
	rt, _ := gpus(b, 1)
	const n = 2
	be := local.NewShared(runtime.CUDA, local.WithTimeout(time.Minute))
	devs := []runtime.Device{{Type: runtime.CUDA}, {Type: runtime.CUDA}}
	dir := b.TempDir()
	pgs := make([]*ccl.ProcessGroup, n)
	err := onRanks(n, func(r int) error {
		f := ccl.NewProcessGroupFactory(be, rt)
		b.Cleanup(func() { _ = f.Destroy() })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		pgs[r], err = f.GetOrCreateRank(ctx, "bench", n, r, devs[r], dir)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	benchCollective(b, devs, pgs)
}

// benchCollective is the body of the collective benchmarks: rank r issues
// through pgs[r] on devs[r].
func benchCollective(b *testing.B, devs []runtime.Device, pgs []*ccl.ProcessGroup) {
	n := len(devs)
	type rankState struct {
		s          *runtime.Stream
		big, half  runtime.Buffer
		gate       runtime.Buffer
		start, end *runtime.Event
	}
	ranks := make([]rankState, n)
	for r, d := range devs {
		rs := &ranks[r]
		pg := pgs[r]
		// Issued on the group's own stream, back to back, as nccl-tests
		// does: no stream wait between calls (BenchmarkCollectiveGap
		// shows what issuing from another stream adds).
		rs.s = pg.Stream(d)
		rs.big = malloc(b, d, 1<<30)
		rs.half = malloc(b, d, 1<<29)
		rs.gate = malloc(b, d, 1<<30)
		_ = runtime.Memset(rs.big, 0, nil)
		_ = runtime.Memset(rs.half, 0, nil)
		rs.start, _ = runtime.NewEvent(d, runtime.EventDefault)
		rs.end, _ = runtime.NewEvent(d, runtime.EventDefault)
		defer rs.start.Destroy()
		defer rs.end.Destroy()
	}
	type issueFunc func(ctx context.Context, r int, rs *rankState, size int64) (*ccl.Work, error)
	view := func(buf runtime.Buffer, n int64) runtime.Buffer {
		v, err := buf.Slice(0, n)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	ops := []struct {
		name, op string
		issue    issueFunc
	}{
		{"AllReduce", ccl.OpAllReduce, func(ctx context.Context, r int, rs *rankState, size int64) (*ccl.Work, error) {
			return pgs[r].AllReduce(ctx, rs.s, view(rs.big, size), runtime.Float32, ccl.Sum)
		}},
		{"AllGather", ccl.OpAllGather, func(ctx context.Context, r int, rs *rankState, size int64) (*ccl.Work, error) {
			return pgs[r].AllGather(ctx, rs.s, view(rs.half, size/int64(n)), view(rs.big, size), runtime.Float32)
		}},
		{"ReduceScatter", ccl.OpReduceScatter, func(ctx context.Context, r int, rs *rankState, size int64) (*ccl.Work, error) {
			return pgs[r].ReduceScatter(ctx, rs.s, view(rs.big, size), view(rs.half, size/int64(n)), runtime.Float32, ccl.Sum)
		}},
		{"SendRecv", ccl.OpSend, func(ctx context.Context, r int, rs *rankState, size int64) (*ccl.Work, error) {
			if r == 0 {
				return pgs[r].Send(ctx, rs.s, view(rs.big, size), runtime.Float32, 1)
			}
			return pgs[r].Recv(ctx, rs.s, view(rs.big, size), runtime.Float32, 0)
		}},
	}
	for _, op := range ops {
		for _, sz := range collectiveSizes {
			b.Run(fmt.Sprintf("%s/%s", op.name, sz.name), func(b *testing.B) {
				p, err := profiler.New(profiler.WithCollectInterval(0))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close(context.Background())
				var ready sync.WaitGroup
				ready.Add(n)
				iters := b.N
				err = onRanks(n, func(r int) error {
					rs := &ranks[r]
					rec, err := p.NewRecorder(r, devs[r])
					if err != nil {
						return err
					}
					for range 2 { // warm up, unrecorded
						w, err := op.issue(context.Background(), r, rs, sz.bytes)
						if err != nil {
							return err
						}
						if err := w.Wait(time.Minute); err != nil {
							return err
						}
					}
					ready.Done()
					ready.Wait()
					cs := pgs[r].Stream(devs[r])
					// Hold the communication stream with device work (a few
					// milliseconds of memsets) while the loop is enqueued,
					// so that the calls run back to back, as in
					// nccl-tests, and the raw events time the device, not
					// the host's issue rate.
					for range 16 {
						if err := runtime.Memset(rs.gate, 0, cs); err != nil {
							return err
						}
					}
					ctx := profiler.NewContext(context.Background(), rec)
					if err := rs.start.Record(cs); err != nil {
						return err
					}
					var last *ccl.Work
					for range iters {
						if last, err = op.issue(ctx, r, rs, sz.bytes); err != nil {
							return err
						}
					}
					if err := rs.end.Record(cs); err != nil {
						return err
					}
					if err := last.Wait(5 * time.Minute); err != nil {
						return err
					}
					return rs.end.Synchronize(context.Background())
				})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := p.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				var total time.Duration
				var count int
				var factor float64
				var bytes int64
				for _, rec := range p.Snapshot() {
					if rec.Rank == 0 && rec.Collective.Op == op.op && rec.HasDevice {
						total += rec.DeviceDuration()
						count++
						factor, bytes = rec.Collective.BusFactor, rec.Collective.Bytes
					}
				}
				if count != iters || bytes != sz.bytes {
					b.Fatalf("%d records of %d bytes, want %d of %d", count, bytes, iters, sz.bytes)
				}
				raw, err := runtime.Elapsed(ranks[0].start, ranks[0].end)
				if err != nil {
					b.Fatal(err)
				}
				prof := factor * float64(bytes) * float64(count) / total.Seconds() / 1e9
				ind := factor * float64(bytes) * float64(count) / raw.Seconds() / 1e9
				b.ReportMetric(prof, "busbw-profiler-GB/s")
				b.ReportMetric(ind, "busbw-raw-GB/s")
				b.ReportMetric(100*(prof/ind-1), "diff-%")
				b.ReportMetric(float64(p.Stats().Adjacent)/float64(n), "ranges-adjacent/rank")
			})
		}
	}
}

// BenchmarkCollectiveGap splits what separates back-to-back calls on the
// device, for evidence c at small sizes: the same AllReduce loop (held
// stream, raw events around it, as BenchmarkCollective) issued straight
// to the backend on communicators of its own (what nccl-tests times), and
// through a ProcessGroup without and with the profiler, from the caller's
// stream (the group waits for it) or from the group's own stream (no
// wait). busbw-raw is the loop's; busbw-profiler (profiled cases) that of
// the records.
func BenchmarkCollectiveGap(b *testing.B) {
	rt, be := gpus(b, 2)
	const n = 2
	devs := devices(n)
	comms, err := be.CommInitAll(devs)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			_ = be.CommDestroy(c)
		}
	}()
	f := ccl.NewProcessGroupFactory(be, rt)
	defer f.Destroy()
	pg, err := f.GetOrCreate("gap", devs)
	if err != nil {
		b.Fatal(err)
	}
	type rankState struct {
		s          *runtime.Stream
		buf, gate  runtime.Buffer
		start, end *runtime.Event
	}
	ranks := make([]rankState, n)
	for r, d := range devs {
		rs := &ranks[r]
		rs.s = newStream(b, d)
		rs.buf = malloc(b, d, 64<<20)
		rs.gate = malloc(b, d, 1<<30)
		_ = runtime.Memset(rs.buf, 0, nil)
		rs.start, _ = runtime.NewEvent(d, runtime.EventDefault)
		rs.end, _ = runtime.NewEvent(d, runtime.EventDefault)
		defer rs.start.Destroy()
		defer rs.end.Destroy()
	}
	factor := ccl.BusFactor(ccl.OpAllReduce, n)
	for _, size := range []int64{1 << 20, 64 << 20} {
		for _, mode := range []string{"nccl", "pg", "pg-own-stream", "pg-profiled", "pg-profiled-own-stream"} {
			b.Run(fmt.Sprintf("%s/%dMiB", mode, size>>20), func(b *testing.B) {
				var p *profiler.Profiler
				if mode == "pg-profiled" || mode == "pg-profiled-own-stream" {
					if p, err = profiler.New(profiler.WithCollectInterval(0)); err != nil {
						b.Fatal(err)
					}
					defer p.Close(context.Background())
				}
				iters := b.N
				err := onRanks(n, func(r int) error {
					rs := &ranks[r]
					buf, err := rs.buf.Slice(0, size)
					if err != nil {
						return err
					}
					count := int(size / 4)
					ctx := context.Background()
					if p != nil {
						rec, err := p.NewRecorder(r, devs[r])
						if err != nil {
							return err
						}
						ctx = profiler.NewContext(ctx, rec)
					}
					s := rs.s // where the loop runs and the raw events go
					if mode == "pg-own-stream" || mode == "pg-profiled-own-stream" {
						s = pg.Stream(devs[r])
					}
					timed := s
					if mode != "nccl" {
						timed = pg.Stream(devs[r])
					}
					var last *ccl.Work
					issue := func(ctx context.Context) error {
						if mode == "nccl" {
							return be.AllReduce(buf, buf, count, runtime.Float32, ccl.Sum, comms[r], s)
						}
						last, err = pg.AllReduce(ctx, s, buf, runtime.Float32, ccl.Sum)
						return err
					}
					for range 2 { // warm up, unrecorded
						if err := issue(context.Background()); err != nil {
							return err
						}
					}
					if err := s.Synchronize(ctx); err != nil {
						return err
					}
					if err := timed.Synchronize(ctx); err != nil {
						return err
					}
					for range 16 { // hold the stream while the loop is enqueued
						if err := runtime.Memset(rs.gate, 0, timed); err != nil {
							return err
						}
					}
					if err := rs.start.Record(timed); err != nil {
						return err
					}
					for range iters {
						if err := issue(ctx); err != nil {
							return err
						}
					}
					if err := rs.end.Record(timed); err != nil {
						return err
					}
					if last != nil {
						if err := last.Wait(time.Minute); err != nil {
							return err
						}
					}
					return rs.end.Synchronize(context.Background())
				})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				raw, err := runtime.Elapsed(ranks[0].start, ranks[0].end)
				if err != nil {
					b.Fatal(err)
				}
				bus := func(d time.Duration) float64 { return factor * float64(size) * float64(iters) / d.Seconds() / 1e9 }
				b.ReportMetric(bus(raw), "busbw-raw-GB/s")
				b.ReportMetric(float64(raw.Nanoseconds())/float64(iters)/1e3, "µs-per-call-raw")
				if p != nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := p.Flush(ctx); err != nil {
						b.Fatal(err)
					}
					var total time.Duration
					for _, rec := range p.Snapshot() {
						if rec.Rank == 0 && rec.Collective.Op == ccl.OpAllReduce && rec.HasDevice {
							total += rec.DeviceDuration()
						}
					}
					b.ReportMetric(bus(total), "busbw-profiler-GB/s")
				}
			})
		}
	}
}
