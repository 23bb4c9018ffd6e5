package local_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

func TestCommInitRank(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(5 * time.Second))
	id, err := b.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	comms := make([]ccl.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			// Each rank loads the id from its bytes, as another process would.
			mine := b.NewUniqueID()
			if err := mine.Load(id.Data()); err != nil {
				errs[r] = err
				return
			}
			comms[r], errs[r] = b.CommInitRank(n, mine, r, runtime.Device{Type: runtime.CPU, Index: 10 + r})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if comms[r].Rank() != r || comms[r].Size() != n {
			t.Fatalf("rank %d: comm says rank %d of %d", r, comms[r].Rank(), comms[r].Size())
		}
	}
	g := withComms(t, b, comms)
	in := inputs(runtime.Int64, ccl.Sum, n, 5)
	got := make([][]float64, n)
	g.each(func(r int) error {
		buf := alloc(t, comms[r].Device(), runtime.Int64, in[r])
		if err := b.AllReduce(buf, buf, 5, runtime.Int64, ccl.Sum, comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, runtime.Int64, buf)
		return nil
	})
	w := make([]float64, 5)
	for i := range w {
		w[i] = want(runtime.Int64, ccl.Sum, in, i)
	}
	for r := range n {
		checkValues(t, "rank", runtime.Int64, got[r], w)
	}
}

func TestCommInitRankTimeout(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(50 * time.Millisecond))
	id, _ := b.GetUniqueID()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 { // rank 2 of 3 never joins
		wg.Go(func() {
			_, errs[r] = b.CommInitRank(3, id, r, runtime.Device{Type: runtime.CPU, Index: r})
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("CommInitRank gave up after %v", d)
	}
	for r, err := range errs {
		if !errors.Is(err, ccl.StatusTimeout) {
			t.Fatalf("rank %d: %v, want a timeout", r, err)
		}
		if !strings.Contains(err.Error(), "ranks [2] did not join") {
			t.Errorf("rank %d: error %q does not name the missing rank", r, err)
		}
	}
}

func TestCommInitRankMismatch(t *testing.T) {
	b := local.New(local.WithTimeout(time.Second))
	id, _ := b.GetUniqueID()
	done := make(chan error, 1)
	go func() {
		_, err := b.CommInitRank(2, id, 0, runtime.Device{Type: runtime.CPU, Index: 0})
		done <- err
	}()
	// Let rank 0 register; then disagree with it.
	time.Sleep(20 * time.Millisecond)
	_, err := b.CommInitRank(3, id, 1, runtime.Device{Type: runtime.CPU, Index: 1})
	if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "asked for 3 ranks") || !strings.Contains(err.Error(), "has 2") {
		t.Errorf("nranks mismatch: %v", err)
	}
	_, err = b.CommInitRank(2, id, 0, runtime.Device{Type: runtime.CPU, Index: 2})
	if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "joined twice") {
		t.Errorf("duplicate rank: %v", err)
	}
	// Complete the communicator so that rank 0 returns.
	c1, err := b.CommInitRank(2, id, 1, runtime.Device{Type: runtime.CPU, Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = b.CommDestroy(c1)

	for _, tc := range []struct {
		nranks, rank int
		id           ccl.UniqueID
		dev          runtime.Device
		msg          string
	}{
		{2, 2, id, runtime.Device{Type: runtime.CPU}, "rank 2 of 2"},
		{0, 0, id, runtime.Device{Type: runtime.CPU}, "rank 0 of 0"},
		{2, 0, nil, runtime.Device{Type: runtime.CPU}, "unique id"},
		{2, 0, id, runtime.Device{Type: runtime.CUDA}, "cpu devices"},
		{2, 0, id, runtime.Device{Type: runtime.CPU, Index: 1000}, "invalid device"},
		// Refused before anything of its size is allocated (a Go fatal
		// out-of-memory error otherwise).
		{1 << 40, 0, id, runtime.Device{Type: runtime.CPU}, "communicator of 1099511627776 ranks: the in-process backend allows at most 4096"},
		{4097, 0, id, runtime.Device{Type: runtime.CPU}, "allows at most 4096"},
	} {
		if _, err := b.CommInitRank(tc.nranks, tc.id, tc.rank, tc.dev); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("CommInitRank(%d, %v, %d, %v) = %v, want %q", tc.nranks, tc.id, tc.rank, tc.dev, err, tc.msg)
		}
	}
}

// TestMissingRank: one rank never calls the collective; the others fail
// with a timeout naming it, every rank's communicator reports it, the
// streams move on, and later calls fail at once.
func TestMissingRank(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(50 * time.Millisecond))
	g := newGroup(t, b, 3)
	dt := runtime.Float32
	start := time.Now()
	for r := range 2 {
		buf := alloc(t, g.comms[r].Device(), dt, filled(8, 1))
		if err := b.AllReduce(buf, buf, 8, dt, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 2 {
		if err := g.sync(r); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the ranks gave up after %v", d)
	}
	for r := range 3 {
		err := b.GetAsyncError(g.comms[r])
		if !errors.Is(err, ccl.StatusTimeout) {
			t.Fatalf("rank %d async error %v, want a timeout", r, err)
		}
		for _, s := range []string{"AllReduce #0", "ranks [2] did not arrive", "comm "} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("rank %d: error %q does not say %q", r, err, s)
			}
		}
	}
	buf := alloc(t, g.comms[2].Device(), dt, filled(8, 1))
	if err := b.AllReduce(buf, buf, 8, dt, ccl.Sum, g.comms[2], g.streams[2]); !errors.Is(err, ccl.StatusTimeout) {
		t.Fatalf("a call on the failed communicator: %v, want the stored timeout", err)
	}
}

func TestCollectiveMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		call  func(b *local.Backend, g *group, r int, buf runtime.Buffer) error
		wants []string
	}{
		{"count", func(b *local.Backend, g *group, r int, buf runtime.Buffer) error {
			return b.AllReduce(buf, buf, 8-r, runtime.Float32, ccl.Sum, g.comms[r], g.streams[r])
		}, []string{"count", "has 8", "has 7"}},
		{"dtype", func(b *local.Backend, g *group, r int, buf runtime.Buffer) error {
			return b.AllReduce(buf, buf, 2, []runtime.DataType{runtime.Float32, runtime.Int32}[r], ccl.Sum, g.comms[r], g.streams[r])
		}, []string{"data type", "float32", "int32"}},
		{"op", func(b *local.Backend, g *group, r int, buf runtime.Buffer) error {
			return b.AllReduce(buf, buf, 8, runtime.Float32, []ccl.ReduceOp{ccl.Sum, ccl.Max}[r], g.comms[r], g.streams[r])
		}, []string{"reduction", "sum", "max"}},
		{"root", func(b *local.Backend, g *group, r int, buf runtime.Buffer) error {
			return b.Broadcast(buf, buf, 8, runtime.Float32, r, g.comms[r], g.streams[r])
		}, []string{"root", "has 0", "has 1"}},
		{"collective", func(b *local.Backend, g *group, r int, buf runtime.Buffer) error {
			if r == 0 {
				return b.AllReduce(buf, buf, 8, runtime.Float32, ccl.Sum, g.comms[r], g.streams[r])
			}
			return b.Broadcast(buf, buf, 8, runtime.Float32, 0, g.comms[r], g.streams[r])
		}, []string{"AllReduce", "Broadcast"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			b := local.New(local.WithTimeout(5 * time.Second))
			g := newGroup(t, b, 2)
			start := time.Now()
			g.each(func(r int) error {
				buf := alloc(t, g.comms[r].Device(), runtime.Float32, filled(8, 1))
				if err := tc.call(b, g, r, buf); err != nil {
					return err
				}
				return g.sync(r)
			})
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the mismatch was found after %v, not at once", d)
			}
			for r := range 2 {
				err := b.GetAsyncError(g.comms[r])
				if !errors.Is(err, ccl.StatusInvalidArgument) {
					t.Fatalf("rank %d: %v, want InvalidArgument", r, err)
				}
				for _, s := range tc.wants {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("rank %d: error %q does not say %q", r, err, s)
					}
				}
			}
		})
	}
}

func TestCommAbort(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(30 * time.Second))
	g := newGroup(t, b, 2)
	buf := alloc(t, g.comms[0].Device(), runtime.Float32, filled(4, 1))
	if err := b.AllReduce(buf, buf, 4, runtime.Float32, ccl.Sum, g.comms[0], g.streams[0]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(10 * time.Millisecond)
	if err := b.CommAbort(g.comms[1]); err != nil {
		t.Fatal(err)
	}
	if err := g.sync(0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("pending collective ended %v after the abort", d)
	}
	err := b.GetAsyncError(g.comms[0])
	if !errors.Is(err, ccl.StatusError) || !strings.Contains(err.Error(), "rank 1 aborted") {
		t.Fatalf("async error after abort: %v", err)
	}
	if err := b.AllReduce(buf, buf, 4, runtime.Float32, ccl.Sum, g.comms[0], g.streams[0]); err == nil {
		t.Fatal("a call after the abort was accepted")
	}
	if err := b.Send(buf, 4, runtime.Float32, 0, g.comms[1], g.streams[1]); err == nil || !strings.Contains(err.Error(), "after CommDestroy or CommAbort") {
		t.Fatalf("a call on the aborted comm: %v", err)
	}
}

func TestCommInitAllTooManyRanks(t *testing.T) {
	b := local.New(local.WithTimeout(time.Second))
	_, err := b.CommInitAll(devices(0, 4097))
	if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "communicator of 4097 ranks") || !strings.Contains(err.Error(), "at most 4096") {
		t.Errorf("CommInitAll of 4097 devices: %v, want an error naming the size and the bound", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(time.Second))
	g := newGroup(t, b, 2)
	c, s := g.comms[0], g.streams[0]
	buf := alloc(t, c.Device(), runtime.Float32, filled(8, 1))
	other := alloc(t, g.comms[1].Device(), runtime.Float32, filled(8, 1))
	f16 := alloc(t, c.Device(), runtime.Float16, filled(8, 1))
	for _, tc := range []struct {
		name string
		err  error
		st   ccl.Status
		msg  string
	}{
		{"buffer too small", b.AllReduce(buf, buf, 9, runtime.Float32, ccl.Sum, c, s), ccl.StatusInvalidArgument, "holds 32 bytes, the call needs 36"},
		{"negative count", b.AllReduce(buf, buf, -1, runtime.Float32, ccl.Sum, c, s), ccl.StatusInvalidArgument, "count -1"},
		{"float16 reduction", b.AllReduce(f16, f16, 8, runtime.Float16, ccl.Sum, c, s), ccl.StatusNotSupported, "float16"},
		{"unknown op", b.AllReduce(buf, buf, 8, runtime.Float32, ccl.ReduceOp(42), c, s), ccl.StatusInvalidArgument, "unsupported reduce op 42"},
		{"root", b.Broadcast(buf, buf, 8, runtime.Float32, 2, c, s), ccl.StatusInvalidArgument, "root 2"},
		{"peer beyond the ranks", b.Send(buf, 8, runtime.Float32, 2, c, s), ccl.StatusInvalidArgument, "peer 2"},
		{"peer range", b.Recv(buf, 8, runtime.Float32, -1, c, s), ccl.StatusInvalidArgument, "peer -1"},
		{"other device buffer", b.Send(other, 8, runtime.Float32, 1, c, s), ccl.StatusInvalidArgument, "buffer on cpu:1"},
		{"other device stream", b.Send(buf, 8, runtime.Float32, 1, c, g.streams[1]), ccl.StatusInvalidArgument, "stream on cpu:1"},
		{"nil stream", b.Send(buf, 8, runtime.Float32, 1, c, nil), ccl.StatusInvalidArgument, "nil stream"},
		{"AllGather recv", b.AllGather(buf, buf, 8, runtime.Float32, c, s), ccl.StatusInvalidArgument, "needs 64"},
		{"zero buffer", b.Send(runtime.Buffer{}, 8, runtime.Float32, 1, c, s), ccl.StatusInvalidArgument, "zero"},
	} {
		if !errors.Is(tc.err, tc.st) || !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %s saying %q", tc.name, tc.err, tc.st, tc.msg)
		}
	}
	if err := b.GetAsyncError(c); err != nil {
		t.Errorf("refused calls failed the communicator: %v", err)
	}
	if err := b.CommDestroy(c); err != nil {
		t.Fatal(err)
	}
	if err := b.CommDestroy(c); err == nil {
		t.Error("second CommDestroy succeeded")
	}
}

// CommInitRankContext returns when ctx ends, before the backend's
// timeout, naming the ranks that had not joined; a deadline is a timeout,
// a cancellation an error, and both wrap ctx's error.
func TestCommInitRankContext(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(time.Minute))
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		st   ccl.Status
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, ccl.StatusTimeout, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, ccl.StatusError, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, _ := b.GetUniqueID()
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			c, err := b.CommInitRankContext(ctx, 3, id, 1, runtime.Device{Type: runtime.CPU, Index: 1})
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("returned after %v", d)
			}
			if c != nil || !errors.Is(err, tc.st) || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "ranks [0 2] had not joined when rank 1's context ended (ranks [1] had)") {
				t.Fatalf("CommInitRankContext = %v, %v; want %s wrapping %v, naming ranks 0 and 2", c, err, tc.st, tc.want)
			}
			// The id is free again: the ranks can form the communicator
			// anew.
			comms := make([]ccl.Comm, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					comms[r], errs[r] = b.CommInitRankContext(context.Background(), 2, id, r, runtime.Device{Type: runtime.CPU, Index: r})
				})
			}
			wg.Wait()
			for r := range 2 {
				if errs[r] != nil {
					t.Fatalf("rank %d joining afresh: %v", r, errs[r])
				}
				_ = b.CommDestroy(comms[r])
			}
		})
	}
}
