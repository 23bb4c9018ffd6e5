package cuda_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// trace starts a CUPTI activity trace or skips, saying why, where libcupti
// is not there.
func trace(tb testing.TB, impl *cuda.Impl, opts cuda.ActivityOptions) *cuda.ActivityTrace {
	tb.Helper()
	tr, err := impl.StartActivityTrace(opts)
	if errors.Is(err, runtime.StatusUnavailable) {
		tb.Skipf("skipped: CUPTI not found (set %s): %v", cuda.EnvCuptiLib, err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tr.Stop() })
	return tr
}

// TestActivityTrace launches kernels, each under an id of its own, then a
// memset and a copy, and checks what CUPTI reports of them against what the
// test did: one record per launch, under the id pushed around it, on the GPU
// no earlier than it was launched, queued while its launch call ran, in
// stream order; the memset and the copy of the bytes they moved.
func TestActivityTrace(t *testing.T) {
	impl := gpu(t)
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s := newStream(t, dev(0))
	const n = 1 << 16
	x, y := malloc(t, dev(0), 4*n), malloc(t, dev(0), 4*n)
	tr := trace(t, impl, cuda.ActivityOptions{Queued: true, External: true})
	if _, err := impl.StartActivityTrace(cuda.ActivityOptions{}); !errors.Is(err, runtime.StatusAlreadyExists) {
		t.Fatalf("a second trace while one runs: got %v, want an error wrapping StatusAlreadyExists", err)
	}
	const launches = 50
	type span struct{ before, after uint64 }
	spans := make([]span, launches)
	for i := range launches {
		spans[i].before = tr.Now()
		tr.Push(uint64(1000 + i))
		if err := runtime.Tanh(s, x, y, n); err != nil {
			t.Fatal(err)
		}
		tr.Pop()
		spans[i].after = tr.Now()
	}
	if err := runtime.Memset(y, 0, s); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Copy(x, y, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	var acts []cuda.Activity
	if err := tr.Flush(func(a cuda.Activity) { acts = append(acts, a) }); err != nil {
		t.Fatal(err)
	}
	// Kernels are launched through the driver API, whose records carry the
	// pushed ids; the memset and the copy go through the runtime API, whose
	// records are not turned on, so they are told apart by kind and size.
	kernels := map[uint64]cuda.Activity{}
	var memset, copied []cuda.Activity
	for _, a := range acts {
		if a.End <= a.Start {
			t.Errorf("%s of correlation %d: end %d not after start %d", a.Kind, a.Correlation, a.End, a.Start)
		}
		switch a.Kind {
		case cuda.ActivityKernel:
			id, ok := tr.External(a.Correlation)
			if !ok {
				continue // a kernel of the runtime's own
			}
			if _, dup := kernels[id]; dup {
				t.Errorf("two kernels under id %d", id)
			}
			kernels[id] = a
		case cuda.ActivityMemset:
			memset = append(memset, a)
		case cuda.ActivityMemcpy:
			copied = append(copied, a)
		}
	}
	if len(kernels) != launches || len(memset) != 1 || len(copied) != 1 {
		t.Fatalf("got %d kernels under pushed ids, %d memsets, %d copies (of %d records); want %d, 1, 1",
			len(kernels), len(memset), len(copied), len(acts), launches)
	}
	if memset[0].Bytes != 4*n || copied[0].Bytes != 4*n {
		t.Errorf("memset of %d bytes and copy of %d; want %d each", memset[0].Bytes, copied[0].Bytes, 4*n)
	}
	var prevEnd uint64
	for i := range launches {
		k, ok := kernels[uint64(1000+i)]
		if !ok {
			t.Fatalf("no kernel under id %d", 1000+i)
		}
		if k.Start < spans[i].before {
			t.Errorf("kernel %d started at %d, before its launch began (%d)", i, k.Start, spans[i].before)
		}
		if k.Queued < spans[i].before || k.Queued > spans[i].after {
			t.Errorf("kernel %d queued at %d, outside its launch [%d, %d]", i, k.Queued, spans[i].before, spans[i].after)
		}
		if k.Start < prevEnd {
			t.Errorf("kernel %d started at %d, before kernel %d ended (%d) on the same stream", i, k.Start, i-1, prevEnd)
		}
		prevEnd = k.End
	}
	if memset[0].Start < prevEnd || copied[0].Start < memset[0].End {
		t.Errorf("memset [%d, %d] and copy [%d, %d] not after the last kernel (ended %d) in stream order",
			memset[0].Start, memset[0].End, copied[0].Start, copied[0].End, prevEnd)
	}
	if _, dropped, unfinished := tr.Stats(); dropped != 0 || unfinished != 0 {
		t.Errorf("CUPTI dropped %d records, %d without times", dropped, unfinished)
	}
	t.Logf("%d activities; kernel 0 ran %d ns, queued %d ns after its launch began", len(acts),
		kernels[1000].End-kernels[1000].Start, kernels[1000].Queued-spans[0].before)
}

// BenchmarkActivityHostCost: what timing every kernel costs the host that
// launches them, by the means a profiler has. Each iteration launches one
// small kernel (tanh of 32 floats) on a stream; every 256 launches the
// stream is synchronised with the timer stopped, so the host never waits
// for a full launch queue and ns/op is host time per launch:
//
//	plain           the launch alone;
//	timing-event    and one timing event recorded after it (what a
//	                profiled range adds where neighbours share events);
//	timing-event-query
//	                and a query of that event before each launch (what a
//	                range's start adds to take the event as its own);
//	cupti-kernels   with CUPTI's kernel, memcpy and memset records on;
//	cupti-queued    and each kernel's enqueue time;
//	cupti-external  and an id pushed and popped around each launch, with
//	                the driver API records the correlation needs;
//	range-events    a profiler range around each launch, timed by events
//	                (neighbours sharing them), its collector running;
//	range-trace     the same range timed from the work trace
//	                (profiler.WithWorkTrace: CUPTI's records, no events);
//
// and, to tell apart where a range's host time goes:
//
//	clock-pair      the launch between two reads of the host clock (what
//	                a range's start and end read);
//	range-host      a host range around each launch (Start, End: the
//	                recording path without device timing), collector
//	                running;
//	range-events-quiet, range-trace-quiet
//	                range-events and range-trace with no background
//	                collector: the profiler collects in the pauses, with
//	                the timer stopped, so ns/op is the recording thread's
//	                own cost, without the collector's work beside it.
func BenchmarkActivityHostCost(b *testing.B) {
	impl := gpu(b)
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	s := newStream(b, dev(0))
	const n = 32
	x, y := malloc(b, dev(0), 4*n), malloc(b, dev(0), 4*n)
	ev, err := runtime.NewEvent(dev(0), runtime.EventDefault)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ev.Destroy() })
	// pause, if not nil, runs with the stream synchronised and the timer
	// stopped, every 256 iterations.
	loopPausing := func(b *testing.B, each func(i int) error, pause func()) {
		for i := range 512 { // warm-up
			if err := each(i); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Synchronize(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := each(i); err != nil {
				b.Fatal(err)
			}
			if i%256 == 255 {
				b.StopTimer()
				if err := s.Synchronize(context.Background()); err != nil {
					b.Fatal(err)
				}
				if pause != nil {
					pause()
				}
				b.StartTimer()
			}
		}
		b.StopTimer()
		if err := s.Synchronize(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	loop := func(b *testing.B, each func(i int) error) { loopPausing(b, each, nil) }
	launch := func(int) error { return runtime.Tanh(s, x, y, n) }
	b.Run("plain", func(b *testing.B) { loop(b, launch) })
	b.Run("clock-pair", func(b *testing.B) {
		var sum time.Duration
		loop(b, func(i int) error {
			t0 := time.Now()
			err := launch(i)
			sum += time.Since(t0)
			return err
		})
		if sum <= 0 {
			b.Fatal("the host clock did not move")
		}
	})
	b.Run("timing-event", func(b *testing.B) {
		loop(b, func(i int) error {
			if err := launch(i); err != nil {
				return err
			}
			return ev.Record(s)
		})
	})
	b.Run("timing-event-query", func(b *testing.B) {
		loop(b, func(i int) error {
			// What a range's start pays to take the previous range's end
			// event: whether the device has reached it.
			if err := ev.Query(); err != nil && runtime.StatusOf(err) != runtime.StatusNotReady {
				return err
			}
			if err := launch(i); err != nil {
				return err
			}
			return ev.Record(s)
		})
	})
	traced := func(name string, opts cuda.ActivityOptions, each func(tr *cuda.ActivityTrace) func(int) error) {
		b.Run(name, func(b *testing.B) {
			tr := trace(b, impl, opts)
			loop(b, each(tr))
			kernels := 0
			if err := tr.Flush(func(a cuda.Activity) {
				if a.Kind == cuda.ActivityKernel {
					kernels++
				}
			}); err != nil {
				b.Fatal(err)
			}
			if kernels < b.N {
				b.Fatalf("CUPTI reported %d kernels of the %d launched", kernels, b.N)
			}
			if err := tr.Stop(); err != nil {
				b.Fatal(err)
			}
		})
	}
	traced("cupti-kernels", cuda.ActivityOptions{}, func(*cuda.ActivityTrace) func(int) error { return launch })
	traced("cupti-queued", cuda.ActivityOptions{Queued: true}, func(*cuda.ActivityTrace) func(int) error { return launch })
	// ranged times a profiler range around each launch: on the device
	// (by events, or from the work trace) or on the host only; quiet
	// leaves collection to the pauses.
	ranged := func(name string, trace, device, quiet bool) {
		b.Run(name, func(b *testing.B) {
			var opts []profiler.Option
			if trace {
				opts = append(opts, profiler.WithWorkTrace(workTrace(b, impl)))
			}
			if quiet {
				opts = append(opts, profiler.WithCollectInterval(0))
			}
			p, err := profiler.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			r, err := p.NewRecorder(0, dev(0))
			if err != nil {
				b.Fatal(err)
			}
			var pause func()
			if quiet {
				pause = func() {
					if err := p.Flush(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
			loopPausing(b, func(i int) error {
				if device {
					r.StartDevice("tanh", s)
				} else {
					r.Start("tanh")
				}
				err := launch(i)
				r.End()
				return err
			}, pause)
			if err := p.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			if st := p.Stats(); st.Collected < uint64(b.N) || st.TraceLost != 0 {
				b.Fatalf("stats %+v after %d ranges", st, b.N)
			}
		})
	}
	ranged("range-events", false, true, false)
	ranged("range-trace", true, true, false)
	ranged("range-host", false, false, false)
	ranged("range-events-quiet", false, true, true)
	ranged("range-trace-quiet", true, true, true)
	traced("cupti-external", cuda.ActivityOptions{External: true}, func(tr *cuda.ActivityTrace) func(int) error {
		return func(i int) error {
			tr.Push(uint64(i + 1))
			err := launch(i)
			tr.Pop()
			return err
		}
	})
}

// TestActivityDelivery records what a profiler timing ranges from CUPTI's
// records would rest on (docs/benchmarks.md):
//
//   - CUPTI's clock against the host's monotonic clock (Go's, the
//     profiler's): pairs read a second apart give the offset and how
//     much it moved;
//   - a flush that does not force (FlushCompleted) hands over the records
//     of work that has finished, 200 short kernels on a stream that was
//     synchronised, without losing any, and none without times;
//   - and whether it does so while another stream's work still runs (a
//     sleep of 300 ms launched first): whether a buffer holding an
//     unfinished record holds back the finished ones after it.
//
// It fails where the first two do not hold; the third it reports.
func TestActivityDelivery(t *testing.T) {
	impl := gpu(t)
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	a, b := newStream(t, dev(0)), newStream(t, dev(0))
	const n = 32
	x, y := malloc(t, dev(0), 4*n), malloc(t, dev(0), 4*n)
	tr := trace(t, impl, cuda.ActivityOptions{})
	// The clocks: CUPTI's against CLOCK_MONOTONIC (Go's and the
	// profiler's) and CLOCK_MONOTONIC_RAW, from the tightest of 50 reads
	// each, then again a second later.
	clock := func(id uintptr) int64 {
		var ts syscall.Timespec
		if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
			t.Fatalf("clock_gettime(%d): %v", id, e)
		}
		return ts.Nano()
	}
	const monotonic, raw = 1, 4
	pair := func(id uintptr) (offset, read time.Duration) {
		read = time.Duration(1 << 62)
		for range 50 {
			h0 := clock(id)
			c := tr.Now()
			h1 := clock(id)
			if d := time.Duration(h1 - h0); d < read {
				read = d
				offset = time.Duration(int64(c) - (h0+h1)/2)
			}
		}
		return offset, read
	}
	m1, r1 := pair(monotonic)
	w1, _ := pair(raw)
	time.Sleep(time.Second)
	m2, r2 := pair(monotonic)
	w2, _ := pair(raw)
	t.Logf("CUPTI's clock less CLOCK_MONOTONIC: %v, a second later %v (moved %v; reads took %v, %v)", m1, m2, m2-m1, r1, r2)
	t.Logf("CUPTI's clock less CLOCK_MONOTONIC_RAW: %v, a second later %v (moved %v)", w1, w2, w2-w1)
	launch := func(s *runtime.Stream, k int) {
		for range k {
			if err := runtime.Tanh(s, x, y, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	kernels := func(fn func(func(cuda.Activity)) error) (k, untimed int) {
		if err := fn(func(act cuda.Activity) {
			if act.Kind == cuda.ActivityKernel {
				k++
				if act.End <= act.Start {
					untimed++
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		return k, untimed
	}
	// Everything finished: all 200 come, with times.
	launch(a, 200)
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, untimed := kernels(tr.FlushCompleted)
	for tries := 0; got < 200 && tries < 20; tries++ {
		time.Sleep(10 * time.Millisecond)
		more, u := kernels(tr.FlushCompleted)
		got, untimed = got+more, untimed+u
	}
	if got != 200 || untimed != 0 {
		t.Errorf("finished work, flushed without forcing: %d kernel records, %d without times; want 200, 0", got, untimed)
	}
	// Another stream's work still running.
	if err := runtime.Sleep(b, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	launch(a, 200)
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	early, _ := kernels(tr.FlushCompleted)
	t.Logf("with a sleep still running on another stream: %d of 200 finished kernels' records handed over at once", early)
	if err := b.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	late, untimed := kernels(tr.FlushCompleted)
	for tries := 0; early+late < 201 && tries < 20; tries++ {
		time.Sleep(10 * time.Millisecond)
		more, u := kernels(tr.FlushCompleted)
		late, untimed = late+more, untimed+u
	}
	t.Logf("after the sleep ended (%v later): %d more (the sleep's own among them), %d without times", time.Since(start), late, untimed)
	if early+late < 201 || untimed != 0 {
		t.Errorf("%d kernel records of 201 (200 and the sleep) came, %d without times", early+late, untimed)
	}
}
