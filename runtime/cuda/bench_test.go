package cuda_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// drainEvery is how many ranges a benchmark records between two
// collections (done outside the timer): a quarter of the default pool.
const drainEvery = 1024

// BenchmarkEventRecord (evidence a): the host cost of one device-timed
// profiler range beside the raw event records it is made of. Run with
// -test.bench EventRecord on a GPU machine.
func BenchmarkEventRecord(b *testing.B) {
	impl := gpu(b)
	d := dev(0)
	s := newStream(b, d)
	event := func(flags runtime.EventFlag) *runtime.Event {
		e, err := runtime.NewEvent(d, flags)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Destroy() })
		return e
	}
	e1, e2 := event(runtime.EventDefault), event(runtime.EventDefault)
	n1, n2 := event(runtime.EventDisableTiming), event(runtime.EventDisableTiming)
	sync := func(b *testing.B) {
		b.StopTimer()
		if err := s.Synchronize(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}

	b.Run("raw-pair-timing/impl", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = impl.EventRecord(e1.Handle(), s.Handle())
			_ = impl.EventRecord(e2.Handle(), s.Handle())
			if i%drainEvery == drainEvery-1 {
				sync(b)
			}
		}
	})
	b.Run("raw-pair-timing/runtime", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = e1.Record(s)
			_ = e2.Record(s)
			if i%drainEvery == drainEvery-1 {
				sync(b)
			}
		}
	})
	b.Run("raw-single-timing", func(b *testing.B) {
		// What a range would cost if adjacent ranges shared the event
		// between one's end and the next one's start.
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = e1.Record(s)
			if i%drainEvery == drainEvery-1 {
				sync(b)
			}
		}
	})
	b.Run("raw-pair-disable-timing", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = n1.Record(s)
			_ = n2.Record(s)
			if i%drainEvery == drainEvery-1 {
				sync(b)
			}
		}
	})
	// The profiler's range, with adjacent ranges sharing an event (the
	// default: a range that starts where the previous one ended on a
	// stream the device has not caught up with records no start event)
	// and with an event of its own for every start and end.
	for _, adjacent := range []bool{true, false} {
		name := "profiler-range"
		if !adjacent {
			name += "/own-events"
		}
		b.Run(name, func(b *testing.B) {
			p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithAdjacentRanges(adjacent))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			r, err := p.NewRecorder(0, d)
			if err != nil {
				b.Fatal(err)
			}
			drain := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = p.Flush(ctx)
				cancel()
				p.Reset()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r.SetMicrobatch(i & 7)
				r.StartDevice("forward", s)
				// The range's work, as far as the profiler can tell: a
				// range with nothing enqueued in it would take the
				// stream's latest event at both ends and record none.
				s.MarkEnqueued()
				r.End()
				if i%drainEvery == drainEvery-1 {
					b.StopTimer()
					drain()
					b.StartTimer()
				}
			}
			b.StopTimer()
			drain()
			if st := p.Stats(); st.Dropped != 0 || st.EventDrops != 0 || st.Errors != 0 {
				b.Fatalf("ranges dropped, timed on the host only or failed: %+v", st)
			}
			b.ReportMetric(100*float64(p.Stats().Adjacent)/float64(b.N), "%-adjacent")
		})
	}
}

// BenchmarkGemm (evidence d): the device time of a profiled GEMM range
// against the GEMM's FLOP count, beside raw events around the loop. Run
// with a fixed count, e.g. -test.benchtime=20x.
func BenchmarkGemm(b *testing.B) {
	gpu(b)
	tf32 := cuda.New(cuda.WithTF32(true))
	if err := tf32.Init(); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		impl runtime.Impl
		t    runtime.DataType
		n    int
	}{
		{"fp32/4096", nil, runtime.Float32, 4096},
		{"fp32/8192", nil, runtime.Float32, 8192},
		{"tf32/8192", tf32, runtime.Float32, 8192},
		{"bf16/8192", nil, runtime.BFloat16, 8192},
	} {
		b.Run(tc.name, func(b *testing.B) {
			impl := tc.impl
			if impl == nil {
				impl, _ = runtime.Lookup(runtime.CUDA)
			}
			benchGemm(b, impl, tc.t, tc.n)
		})
	}
}

func benchGemm(b *testing.B, impl runtime.Impl, t runtime.DataType, n int) {
	d := dev(0)
	s, err := runtime.NewStreamWith(impl, d)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	bytes := int64(t.Size()) * int64(n) * int64(n)
	var bufs [3]runtime.Buffer
	for i := range bufs {
		h, err := impl.Malloc(0, bytes)
		if err != nil {
			b.Fatal(err)
		}
		defer impl.Free(h)
		bufs[i] = runtime.NewBufferView(impl, d, h, 0, bytes)
		if err := impl.Memset(bufs[i], 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := p.Calibrate(context.Background(), impl, d); err != nil {
		b.Fatal(err)
	}
	r, err := p.NewRecorder(0, d)
	if err != nil {
		b.Fatal(err)
	}
	start, _ := runtime.NewEventWith(impl, d, runtime.EventDefault)
	end, _ := runtime.NewEventWith(impl, d, runtime.EventDefault)
	defer start.Destroy()
	defer end.Destroy()
	g := runtime.GemmArgs{M: n, N: n, K: n, Alpha: 1, A: bufs[0], LDA: n, B: bufs[1], LDB: n, C: bufs[2], LDC: n, Type: t}
	// Warm up: cuBLAS picks its kernel and creates the handle.
	if err := runtime.Gemm(s, g); err != nil {
		b.Fatal(err)
	}
	_ = s.Synchronize(context.Background())
	b.ResetTimer()
	_ = start.Record(s)
	for b.Loop() {
		r.StartDevice("gemm", s)
		if err := runtime.Gemm(s, g); err != nil {
			b.Fatal(err)
		}
		r.End()
	}
	_ = end.Record(s)
	_ = s.Synchronize(context.Background())
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	flop := 2 * float64(n) * float64(n) * float64(n)
	var durs []float64
	var total time.Duration
	for _, rec := range p.Snapshot() {
		if rec.HasDevice {
			durs = append(durs, rec.DeviceDuration().Seconds())
			total += rec.DeviceDuration()
		}
	}
	if len(durs) == 0 {
		b.Fatal("no device-timed records")
	}
	slices.Sort(durs)
	raw, err := runtime.Elapsed(start, end)
	if err != nil {
		b.Fatal(err)
	}
	iters := float64(len(durs))
	b.ReportMetric(flop/durs[len(durs)/2]/1e12, "TFLOP/s-profiler-median")
	b.ReportMetric(flop*iters/total.Seconds()/1e12, "TFLOP/s-profiler-total")
	b.ReportMetric(flop*iters/raw.Seconds()/1e12, "TFLOP/s-raw-loop")
	b.Logf("%s %d³: %d ranges, median %.3f ms, raw loop %.3f ms/iter", fmt.Sprint(t), n, len(durs), durs[len(durs)/2]*1e3, raw.Seconds()*1e3/iters)
}

// BenchmarkGemmTrainerShapes measures the GEMM rate of the built-in
// trainer's three GEMMs at width 4096 with 256-row microbatches, in each
// compute precision (the names -dtype takes), so the model FLOP/s of a
// training run can be read against what cuBLAS gives the same GEMMs alone:
//
//	forward      Zᵀ = Wᵀ·Xᵀ     M 4096, N 256,  K 4096, no transposes
//	grad-weight  dWᵀ += dZᵀ·X   M 4096, N 4096, K 256,  B transposed
//	grad-input   dXᵀ = W·dZᵀ    M 4096, N 256,  K 4096, A transposed
//
// Each does 2·M·N·K = 8.6 GFLOP. FLOP/s is timed by device events around
// the whole loop, which ends when the device has finished; ns/op is host
// time, the enqueueing until CUDA's launch queue fills. Run on a GPU with
// e.g. -test.bench GemmTrainerShapes -test.benchtime 200x.
func BenchmarkGemmTrainerShapes(b *testing.B) {
	gpu(b)
	const width, rows = 4096, 256
	forms := []struct {
		name    string
		ta, tb  bool
		m, n, k int
		beta    float32
	}{
		{"forward", false, false, width, rows, width, 0},
		{"grad-weight", false, true, width, width, rows, 1},
		{"grad-input", true, false, width, rows, width, 0},
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, f := range forms {
		ar, ac := f.m, f.k
		if f.ta {
			ar, ac = ac, ar
		}
		br, bc := f.k, f.n
		if f.tb {
			br, bc = bc, br
		}
		d := dev(0)
		// Random inputs: a tensor core's power, and so its clock, depends
		// on the bits it multiplies; zeros would flatter every mode.
		a, bb, c := upload(b, d, randomVec(r, ar*ac)), upload(b, d, randomVec(r, br*bc)), upload(b, d, randomVec(r, f.m*f.n))
		for _, mode := range []runtime.MathMode{runtime.MathDefault, runtime.MathTF32, runtime.MathBF16} {
			g := runtime.GemmArgs{TransA: f.ta, TransB: f.tb, M: f.m, N: f.n, K: f.k, Alpha: 1, Beta: f.beta,
				A: a, LDA: ar, B: bb, LDB: br, C: c, LDC: f.m, Type: runtime.Float32, Math: mode}
			b.Run(f.name+"/"+mode.String(), func(b *testing.B) { benchGemmRate(b, g) })
		}
	}
}

// benchGemmRate runs g b.N times on a stream of its own and reports the
// rate the device sustained, in FLOP/s.
func benchGemmRate(b *testing.B, g runtime.GemmArgs) {
	s := newStream(b, dev(0))
	per := devicePerIteration(b, s, func() error { return runtime.Gemm(s, g) })
	flop := 2 * float64(g.M) * float64(g.N) * float64(g.K)
	b.ReportMetric(flop/per.Seconds(), "FLOP/s")
}

// devicePerIteration runs launch b.N times on s, after 3 untimed calls
// (cuBLAS creates its handle and picks its kernel, a module loads), and
// returns the device time per call, from events around the loop.
func devicePerIteration(b *testing.B, s *runtime.Stream, launch func() error) time.Duration {
	newEvent := func() *runtime.Event {
		e, err := runtime.NewEvent(s.Device(), runtime.EventDefault)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Destroy() })
		return e
	}
	start, end := newEvent(), newEvent()
	ctx := context.Background()
	for range 3 {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Synchronize(ctx); err != nil {
		b.Fatal(err)
	}
	if err := start.Record(s); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := end.Record(s); err != nil {
		b.Fatal(err)
	}
	if err := s.Synchronize(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed, err := runtime.Elapsed(start, end)
	if err != nil {
		b.Fatal(err)
	}
	if n == 0 || elapsed <= 0 {
		b.Fatalf("%d calls in %v of device time", n, elapsed)
	}
	return elapsed / time.Duration(n)
}

// BenchmarkEventDeviceCost: what a timing event costs the device, not the
// host. Each iteration enqueues one kernel on a stream the device is kept
// busy with (the host runs ahead), alone ("plain") or followed by the
// record of one timing event ("timing-event", what a profiled range adds
// where adjacent ranges share their boundary event); events around the
// whole loop give the device time per iteration. The kernels: a one-thread
// sleep of 20 µs (nothing but the gap between kernels can differ) and the
// built-in trainer's forward GEMM at width 4096, 256 rows. Run with a fixed
// count, e.g. -test.benchtime=2000x; the difference between the variants
// is an event's device cost. A third variant ("cupti-records") runs the
// kernels alone while CUPTI records their activity, which is what timing
// them through CUPTI costs the device.
func BenchmarkEventDeviceCost(b *testing.B) {
	impl := gpu(b)
	d := dev(0)
	const width, rows = 4096, 256
	r := rand.New(rand.NewPCG(11, 12))
	a, bb, c := upload(b, d, randomVec(r, width*width)), upload(b, d, randomVec(r, width*rows)), upload(b, d, randomVec(r, width*rows))
	gemm := runtime.GemmArgs{M: width, N: rows, K: width, Alpha: 1, A: a, LDA: width, B: bb, LDB: width, C: c, LDC: width, Type: runtime.Float32}
	kernels := []struct {
		name   string
		launch func(*runtime.Stream) error
	}{
		{"sleep-20us", func(s *runtime.Stream) error { return runtime.Sleep(s, 20*time.Microsecond) }},
		{"gemm-4096x256x4096", func(s *runtime.Stream) error { return runtime.Gemm(s, gemm) }},
	}
	for _, k := range kernels {
		for _, events := range []bool{false, true} {
			name := k.name + "/plain"
			if events {
				name = k.name + "/timing-event"
			}
			b.Run(name, func(b *testing.B) { benchDeviceGap(b, k.launch, events) })
		}
		b.Run(k.name+"/cupti-records", func(b *testing.B) {
			trace(b, impl, cuda.ActivityOptions{})
			benchDeviceGap(b, k.launch, false)
		})
	}
}

func benchDeviceGap(b *testing.B, launch func(*runtime.Stream) error, events bool) {
	s := newStream(b, dev(0))
	between, err := runtime.NewEvent(s.Device(), runtime.EventDefault)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = between.Destroy() })
	per := devicePerIteration(b, s, func() error {
		if err := launch(s); err != nil || !events {
			return err
		}
		return between.Record(s)
	})
	b.ReportMetric(float64(per.Nanoseconds()), "device-ns/kernel")
}

// BenchmarkLossSum measures the built-in trainer's per-microbatch sum of
// squared errors at its sizes (the default job's 16 rows × 128, 64 × 1024
// and 256 × 4096) two ways: runtime.Dot (cublasSdot, what the trainer
// calls) beside its baseline, the GEMM of one row by one column the
// trainer called before. Device time per sum is timed by events around
// the whole loop; ns/op is the host's enqueueing. Run on a GPU with
// -test.bench LossSum.
func BenchmarkLossSum(b *testing.B) {
	gpu(b)
	d := dev(0)
	for _, n := range []int{16 * 128, 64 * 1024, 256 * 4096} {
		x := malloc(b, d, int64(4*n))
		out := malloc(b, d, 4)
		for _, how := range []string{"dot", "gemm-1x1"} {
			b.Run(fmt.Sprintf("%s/%d", how, n), func(b *testing.B) {
				s := newStream(b, d)
				sum := func() error {
					if how == "dot" {
						return runtime.Dot(s, x, x, out, n)
					}
					return runtime.Gemm(s, runtime.GemmArgs{TransA: true, M: 1, N: 1, K: n, Alpha: 1,
						A: x, LDA: n, B: x, LDB: n, C: out, LDC: 1, Type: runtime.Float32})
				}
				if err := sum(); err != nil { // cuBLAS picks its kernel, the handle is made
					b.Fatal(err)
				}
				start, _ := runtime.NewEvent(d, runtime.EventDefault)
				end, _ := runtime.NewEvent(d, runtime.EventDefault)
				defer start.Destroy()
				defer end.Destroy()
				_ = s.Synchronize(context.Background())
				b.ReportAllocs()
				b.ResetTimer()
				_ = start.Record(s)
				iters := 0
				for b.Loop() {
					if err := sum(); err != nil {
						b.Fatal(err)
					}
					iters++
				}
				_ = end.Record(s)
				_ = s.Synchronize(context.Background())
				b.StopTimer()
				raw, err := runtime.Elapsed(start, end)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(raw.Nanoseconds())/1e3/float64(iters), "device-µs/op")
			})
		}
	}
}

// BenchmarkLaunchBesideQueries: what a thread's kernel launches cost while
// other threads ask the driver about completed events, as the profiler's
// collector does (one to three Elapsed calls per device range, on its own
// goroutine) while the ranks launch; results in docs/benchmarks.md
// "Measured on 2026-12-08". ns/op is one small kernel launch
// (a tanh of 2,048 floats) on the benchmark's thread, with a second
// thread launching on a stream of its own throughout (the default job's
// other rank); the variants add a third thread calling, in a tight loop,
// nothing (alone), runtime.Elapsed between two completed events
// (elapsed), Event.Query on a completed event (query), or Elapsed paced
// at one call every 30 µs (elapsed-paced: about the collector's rate on
// the default job, 300 calls in a 9 ms step). Run with -test.bench
// LaunchBesideQueries on a GPU machine.
func BenchmarkLaunchBesideQueries(b *testing.B) {
	gpu(b)
	d := dev(0)
	const n = 2048
	x, y := malloc(b, d, 4*n), malloc(b, d, 4*n)
	done1, done2 := newEvent(b, d), newEvent(b, d)
	side := newStream(b, d)
	if err := done1.Record(side); err != nil {
		b.Fatal(err)
	}
	if err := done2.Record(side); err != nil {
		b.Fatal(err)
	}
	if err := side.Synchronize(context.Background()); err != nil {
		b.Fatal(err)
	}
	queriers := []struct {
		name string
		ask  func() error
		gap  time.Duration
	}{
		{"alone", nil, 0},
		{"elapsed", func() error { _, err := runtime.Elapsed(done1, done2); return err }, 0},
		{"query", done2.Query, 0},
		{"elapsed-paced", func() error { _, err := runtime.Elapsed(done1, done2); return err }, 30 * time.Microsecond},
	}
	for _, q := range queriers {
		b.Run(q.name, func(b *testing.B) {
			s, other := newStream(b, d), newStream(b, d)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var asked atomic.Int64
			wg.Go(func() { // the other rank
				goruntime.LockOSThread()
				defer goruntime.UnlockOSThread()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := runtime.Tanh(other, x, y, n); err != nil {
						b.Error(err)
						return
					}
					if i%drainEvery == drainEvery-1 {
						_ = other.Synchronize(context.Background())
					}
				}
			})
			if q.ask != nil {
				wg.Go(func() { // the collector
					goruntime.LockOSThread()
					defer goruntime.UnlockOSThread()
					next := time.Now()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if q.gap > 0 {
							for time.Now().Before(next) {
							}
							next = next.Add(q.gap)
						}
						if err := q.ask(); err != nil {
							b.Error(err)
							return
						}
						asked.Add(1)
					}
				})
			}
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			b.ReportAllocs()
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				if err := runtime.Tanh(s, x, y, n); err != nil {
					b.Fatal(err)
				}
				if i%drainEvery == drainEvery-1 {
					b.StopTimer()
					_ = s.Synchronize(context.Background())
					b.StartTimer()
				}
			}
			wall := time.Since(start)
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(asked.Load())/wall.Seconds(), "asks/s")
		})
	}
}

func newEvent(tb testing.TB, d runtime.Device) *runtime.Event {
	tb.Helper()
	e, err := runtime.NewEvent(d, runtime.EventDefault)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Destroy() })
	return e
}
