package cuda_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// workTrace starts the backend's work trace or skips, saying why, where
// libcupti is not there.
func workTrace(tb testing.TB, impl *cuda.Impl) *runtime.WorkTrace {
	tb.Helper()
	tr, err := runtime.StartWorkTrace(impl)
	if errors.Is(err, runtime.StatusUnavailable) {
		tb.Skipf("skipped: CUPTI not found (set %s): %v", cuda.EnvCuptiLib, err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tr.Stop() })
	return tr
}

// TestWorkTrace issues kernels, GEMMs, copies and memsets on three
// streams (one created after the trace started), collecting while they
// run, and checks what the trace reports against what the test did: every
// piece of work on its stream, issued while the call that issued it ran
// (kernels by CUPTI's enqueue time, copies and memsets by the backend's
// notes), each stream's in the order issued across collects, and run on
// the device after that call began.
func TestWorkTrace(t *testing.T) {
	impl := gpu(t)
	s1, s2 := newStream(t, dev(0)), newStream(t, dev(0))
	const n = 1 << 16
	x, y := malloc(t, dev(0), 4*n), malloc(t, dev(0), 4*n)
	const g = 512
	a, b, c := malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g)
	gemm := runtime.GemmArgs{M: g, N: g, K: g, Alpha: 1, A: a, LDA: g, B: b, LDB: g, C: c, LDC: g, Type: runtime.Float32}
	host := make([]byte, 4*n)
	tr := workTrace(t, impl)
	s3 := newStream(t, dev(0))
	type call struct {
		stream          *runtime.Stream
		kind            string
		before, after   time.Time
		atLeast, atMost int
	}
	var calls []call
	issue := func(s *runtime.Stream, kind string, atLeast, atMost int, f func() error) {
		before := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call{s, kind, before, time.Now(), atLeast, atMost})
	}
	var got []runtime.Work
	// Each collect says before when all work issued has been reported:
	// every call that returned before then has its work in got. Checked
	// by kind of work at the end (reported is how many got held then).
	type claim struct {
		complete time.Time
		calls    int // calls made by then
		reported int
	}
	var claims []claim
	collect := func(force bool) {
		complete, err := tr.Collect(force, func(w runtime.Work) { got = append(got, w) })
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim{complete, len(calls), len(got)})
	}
	const rounds = 200
	for i := range rounds {
		issue(s1, "tanh", 1, 1, func() error { return runtime.Tanh(s1, x, y, n) })
		issue(s2, "memset", 1, 1, func() error { return runtime.Memset(c, 0, s2) })
		issue(s1, "copy", 1, 1, func() error { return runtime.Copy(y, x, s1) })
		// A GEMM is one or more kernels (and maybe cuBLAS's own memsets).
		issue(s2, "gemm", 1, 4, func() error { return runtime.Gemm(s2, gemm) })
		issue(s3, "upload", 1, 1, func() error { return runtime.CopyToDevice(x, host, s3) })
		if i%20 == 19 {
			collect(false)
		}
	}
	// Copies with no stream run on CUDA's legacy default stream, no
	// stream of the backend's: seen, not reported, not lost.
	const foreign = 3
	for range foreign {
		if err := runtime.CopyToDevice(x, host, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*runtime.Stream{s1, s2, s3} {
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	collect(true)
	if d := tr.Dropped(); d != 0 {
		t.Errorf("the trace dropped %d pieces of work", d)
	}
	// (A pageable copy might come as more than one record.)
	if f := tr.Foreign(); f < foreign {
		t.Errorf("the trace saw %d pieces of work outside the backend's streams, want at least the %d stream-less copies", f, foreign)
	}
	// Each stream's work in report order: issued in order, and each piece
	// inside exactly one call of its stream.
	counts := make([]int, len(calls))
	var lateBy, worstSkew time.Duration
	for _, s := range []*runtime.Stream{s1, s2, s3} {
		var mine []call
		idx := []int{}
		for i, c := range calls {
			if c.stream == s {
				mine = append(mine, c)
				idx = append(idx, i)
			}
		}
		var last time.Time
		for _, w := range got {
			if w.Stream != s.Handle() {
				continue
			}
			if w.Issued.Before(last) {
				lateBy = max(lateBy, last.Sub(w.Issued))
			}
			last = w.Issued
			j, _ := slices.BinarySearchFunc(mine, w.Issued, func(c call, at time.Time) int { return c.after.Compare(at) })
			if j == len(mine) || w.Issued.Before(mine[j].before) {
				t.Errorf("work issued at %v on stream %d lies in none of its calls", w.Issued.Sub(calls[0].before), s.ID())
				continue
			}
			counts[idx[j]]++
			// The device cannot start work before the call that
			// issued it began.
			if skew := mine[j].before.Sub(w.Start); skew > worstSkew {
				worstSkew = skew
			}
			if w.End.Before(w.Start) {
				t.Errorf("work on stream %d ends %v before it starts", s.ID(), w.Start.Sub(w.End))
			}
		}
	}
	// CUPTI may hand a stream's work over out of order (it returns its
	// buffers as they complete); what the trace promises is its
	// complete time, checked below.
	t.Logf("a stream's work came out of issue order by up to %v", lateBy)
	first := map[int]int{} // call → index in got of its first piece
	for i, w := range got {
		for j, c := range calls {
			if w.Stream == c.stream.Handle() && !w.Issued.Before(c.before) && !w.Issued.After(c.after) {
				if _, ok := first[j]; !ok {
					first[j] = i
				}
				break
			}
		}
	}
	for _, cl := range claims {
		for j := range cl.calls {
			if c := calls[j]; c.after.Before(cl.complete) {
				if i, ok := first[j]; !ok || i >= cl.reported {
					t.Errorf("a collect said all work issued before %v was reported, but call %d (%s, returned at %v) had none yet",
						cl.complete.Sub(calls[0].before), j, c.kind, c.after.Sub(calls[0].before))
				}
			}
		}
	}
	if worstSkew > time.Microsecond {
		t.Errorf("work started on the device up to %v before the call that issued it began", worstSkew)
	}
	byKind := map[string]int{}
	for i, c := range calls {
		if counts[i] < c.atLeast || counts[i] > c.atMost {
			t.Errorf("call %d (%s on stream %d): %d pieces of work, want %d–%d", i, c.kind, c.stream.ID(), counts[i], c.atLeast, c.atMost)
		}
		byKind[c.kind] += counts[i]
	}
	t.Logf("%d pieces of work from %d calls: %v", len(got), len(calls), byKind)
}

// TestWorkTraceTimesRanges times the same GEMMs with events and from the
// work trace: each range's device time agrees with its events' within a
// few microseconds, and the trace-timed profiler records no event.
func TestWorkTraceTimesRanges(t *testing.T) {
	impl := gpu(t)
	s := newStream(t, dev(0))
	const g = 2048
	a, b, c := malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g)
	gemm := runtime.GemmArgs{M: g, N: g, K: g, Alpha: 1, A: a, LDA: g, B: b, LDB: g, C: c, LDC: g, Type: runtime.Float32}
	if err := runtime.Gemm(s, gemm); err != nil { // warm-up: the handle, the kernel choice
		t.Fatal(err)
	}
	run := func(opts ...profiler.Option) []profiler.Record {
		p, err := profiler.New(append(opts, profiler.WithCollectInterval(0))...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		r, err := p.NewRecorder(0, dev(0))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			r.StartDevice(fmt.Sprintf("gemm %d", i), s)
			if err := runtime.Gemm(s, gemm); err != nil {
				t.Fatal(err)
			}
			r.End()
		}
		if err := p.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := p.Stats(); len(opts) > 0 && (st.Events != 0 || st.TraceLost != 0 || st.TraceDropped != 0) {
			t.Errorf("trace-timed: %+v", st)
		}
		return p.Snapshot()
	}
	events := run()
	traced := run(profiler.WithWorkTrace(workTrace(t, impl)))
	if len(events) != 20 || len(traced) != 20 {
		t.Fatalf("%d and %d records", len(events), len(traced))
	}
	var e, tr []time.Duration
	for i := range events {
		if !events[i].HasDevice || !traced[i].HasDevice {
			t.Fatalf("record %d without device times", i)
		}
		e, tr = append(e, events[i].DeviceDuration()), append(tr, traced[i].DeviceDuration())
	}
	slices.Sort(e)
	slices.Sort(tr)
	me, mt := e[len(e)/2], tr[len(tr)/2]
	if d := me - mt; d < -5*time.Microsecond || d > 5*time.Microsecond+me/50 {
		t.Errorf("median GEMM by events %v, from the trace %v", me, mt)
	}
	t.Logf("median GEMM %d³ float32: events %v, trace %v", g, me, mt)
}

// TestActivityIssueOrder: does CUPTI hand over each stream's records in
// the order their work ran (which is the order it was issued), across
// flushes that do not force,
// taken every 20 ms while a trainer-shaped loop runs (an upload, copies
// on the device, a GEMM and small kernels, step after step)? It reports,
// per kind, records that came after a record of their stream issued
// later: why the work trace says which time is complete rather than
// resting on each stream's order.
func TestActivityIssueOrder(t *testing.T) {
	impl := gpu(t)
	s := newStream(t, dev(0))
	const n, g = 2048, 128
	x, y := malloc(t, dev(0), 4*n), malloc(t, dev(0), 4*n)
	a, b, c := malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g), malloc(t, dev(0), 4*g*g)
	gemm := runtime.GemmArgs{M: g, N: g, K: g, Alpha: 1, A: a, LDA: g, B: b, LDB: g, C: c, LDC: g, Type: runtime.Float32}
	host := make([]byte, 4*n)
	tr := trace(t, impl, cuda.ActivityOptions{Queued: true})
	stop := make(chan struct{})
	type got struct {
		a     cuda.Activity
		batch int
	}
	var recs []got
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for batch := 0; ; batch++ {
			select {
			case <-stop:
				done <- tr.Flush(func(a cuda.Activity) { recs = append(recs, got{a, batch}) })
				return
			case <-tick.C:
			}
			if err := tr.FlushCompleted(func(a cuda.Activity) { recs = append(recs, got{a, batch}) }); err != nil {
				done <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	steps := 0
	for time.Now().Before(deadline) {
		steps++
		if err := runtime.CopyToDevice(x, host, s); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			if err := runtime.Copy(y, x, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := runtime.Gemm(s, gemm); err != nil {
			t.Fatal(err)
		}
		for range 30 {
			if err := runtime.Tanh(s, x, y, n); err != nil {
				t.Fatal(err)
			}
			if err := runtime.Gemm(s, gemm); err != nil {
				t.Fatal(err)
			}
		}
		if err := runtime.Memset(y, 0, s); err != nil {
			t.Fatal(err)
		}
		if steps%10 == 0 {
			if err := s.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Within one flush a collector can sort by correlation id; what
	// matters is a record that comes in a later flush than a record
	// issued after it.
	// The stream runs one piece at a time, in issue order: its records'
	// device start times give that order.
	late, unsorted := map[cuda.ActivityKind]int{}, 0
	kinds := map[cuda.ActivityKind]int{}
	batches := map[int]bool{}
	var maxBefore, maxNow, last uint64
	batch := -1
	for _, r := range recs {
		if r.batch != batch {
			batch, maxBefore = r.batch, maxNow
		}
		kinds[r.a.Kind]++
		batches[r.batch] = true
		if r.a.Start < maxBefore {
			late[r.a.Kind]++
		}
		if r.a.Start < last {
			unsorted++
		}
		last = r.a.Start
		maxNow = max(maxNow, r.a.Start)
	}
	t.Logf("%d steps, %d records in %d flushes: %v; in a later flush than a record issued after them: %v; out of order within a flush: %d",
		steps, len(recs), len(batches), kinds, late, unsorted)
	// Do correlation ids follow issue order? Kernels by their enqueue
	// times: our own go through the driver API, cuBLAS's through the
	// runtime's; copies and memsets through the runtime API.
	var ks []cuda.Activity
	for _, r := range recs {
		if r.a.Kind == cuda.ActivityKernel {
			ks = append(ks, r.a)
		}
	}
	slices.SortFunc(ks, func(x, y cuda.Activity) int { return cmp.Compare(x.Correlation, y.Correlation) })
	inversions := 0
	for i := 1; i < len(ks); i++ {
		if ks[i].Queued < ks[i-1].Queued {
			inversions++
		}
	}
	// Reported, not checked: the work trace orders by device start.
	t.Logf("kernels in correlation order whose enqueue time precedes the one before: %d of %d", inversions, len(ks))
	if len(recs) == 0 {
		t.Fatal("no records")
	}
}
