package cuda_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// TestQueriesReturnWhileTheDeviceIsHeld: while a kernel holds a stream
// and another thread waits in the driver behind it — a copy into pageable
// host memory queued after the kernel, or a cudaFree, which waits for
// the whole device — the calls the profiler makes holding its collector's
// lock (event and stream queries, elapsed times) still return at once, so
// a device that does not get through its work cannot keep the profiler
// from delivering what it recorded. The calls that the driver holds back
// meanwhile (event and stream creation and destruction; with a cudaFree
// waiting, event records too) are logged: the profiler makes none of
// them under that lock (docs/gpu.md).
func TestQueriesReturnWhileTheDeviceIsHeld(t *testing.T) {
	gpu(t)
	d := dev(0)
	ctx := context.Background()
	s, side := newStream(t, d), newStream(t, d)
	// Load the module first (the first kernel's JIT).
	if err := runtime.Sleep(s, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	src := malloc(t, d, 64)
	const hold = 3 * time.Second
	waiters := []struct {
		name string
		wait func()
	}{
		{"a pageable copy queued behind the kernel", func() {
			w, err := runtime.NewStream(d)
			if err != nil {
				t.Error(err)
				return
			}
			mark, _ := runtime.NewEvent(d, runtime.EventDisableTiming)
			_ = mark.Record(s)
			_ = w.WaitEvent(mark)
			dst := make([]byte, 64)
			if err := runtime.CopyToHost(dst, src, w); err != nil {
				t.Error(err)
			}
		}},
		{"a cudaStreamSynchronize of the held stream", func() {
			if err := s.Synchronize(context.Background()); err != nil {
				t.Error(err)
			}
		}},
		{"a cudaEventSynchronize of an event behind the kernel", func() {
			ev, err := runtime.NewEvent(d, runtime.EventDisableTiming)
			if err != nil {
				t.Error(err)
				return
			}
			defer ev.Destroy()
			if err := ev.Record(s); err != nil {
				t.Error(err)
				return
			}
			if err := ev.Synchronize(context.Background()); err != nil {
				t.Error(err)
			}
		}},
		{"a cudaFree", func() {
			b, err := runtime.Malloc(d, 1<<20)
			if err != nil {
				t.Error(err)
				return
			}
			if err := runtime.Free(b); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, w := range waiters {
		done1, _ := runtime.NewEvent(d, runtime.EventDefault)
		done2, _ := runtime.NewEvent(d, runtime.EventDefault)
		_ = done1.Record(side)
		_ = done2.Record(side)
		if err := side.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		behind, _ := runtime.NewEvent(d, runtime.EventDefault)
		idle, _ := runtime.NewStream(d)
		spare, _ := runtime.NewEvent(d, runtime.EventDefault)
		if err := runtime.Sleep(s, hold); err != nil {
			t.Fatal(err)
		}
		if err := behind.Record(s); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { defer close(waited); w.wait() }()
		time.Sleep(300 * time.Millisecond) // the waiter reaches the driver
		begun := time.Now()
		notReady := func(err error) error {
			if errors.Is(err, runtime.StatusNotReady) {
				return nil
			}
			return errors.Join(errors.New("want NotReady"), err)
		}
		must := []struct {
			name string
			call func() error
		}{
			{"EventQuery of an event behind the kernel", func() error { return notReady(behind.Query()) }},
			{"StreamQuery of the held stream", func() error { return notReady(s.Query()) }},
			{"EventQuery of a completed event", func() error { return done1.Query() }},
			{"Elapsed between completed events", func() error { _, err := runtime.Elapsed(done1, done2); return err }},
		}
		for _, c := range must {
			t0 := time.Now()
			if err := c.call(); err != nil {
				t.Errorf("with %s waiting: %s: %v", w.name, c.name, err)
			}
			if took := time.Since(t0); took > 100*time.Millisecond {
				t.Errorf("with %s waiting: %s took %v", w.name, c.name, took)
			}
		}
		// The others, each in a goroutine of its own: logged, not
		// asserted (the driver's business).
		others := []struct {
			name string
			call func() error
		}{
			{"EventCreate", func() error { _, err := runtime.NewEvent(d, runtime.EventDefault); return err }},
			{"EventRecord on an idle stream", func() error { return spare.Record(side) }},
			{"EventDestroy", func() error { return done2.Destroy() }},
			{"StreamDestroy of an idle stream", func() error { return idle.Destroy() }},
		}
		var wg sync.WaitGroup
		for _, c := range others {
			wg.Go(func() {
				t0 := time.Now()
				err := c.call()
				if took := time.Since(t0); took > 100*time.Millisecond {
					t.Logf("with %s waiting: %s was held %v (%v)", w.name, c.name, took.Round(time.Millisecond), err)
				}
			})
		}
		wg.Wait()
		<-waited
		if err := s.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("with %s waiting: %d queries returned at once; the kernel held the device %v from them", w.name, len(must), time.Since(begun).Round(time.Millisecond))
		done1.Destroy()
		behind.Destroy()
		spare.Destroy()
	}
}
