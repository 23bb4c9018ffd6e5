package profiler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

type slowSink struct{ d time.Duration }

func (s slowSink) Consume([]profiler.Record) { time.Sleep(s.d) }

// busyCollector is a profiler whose collector passes (a slow sink's 3
// ms) outlast its 1 ms interval, fed ranges by a recorder that runs until
// the test ends: its lock is free only for an instant between passes.
func busyCollector(t *testing.T) *profiler.Profiler {
	t.Helper()
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddSink(slowSink{3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, runtime.Device{Type: runtime.CPU})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			r.Start("x")
			r.End()
			time.Sleep(20 * time.Microsecond)
		}
	}()
	// Cleanups run last-added first: the recorder stops before Close.
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	t.Cleanup(func() { stop.Store(true); <-done })
	time.Sleep(50 * time.Millisecond)
	return p
}

// A collector whose passes outlast its interval (a slow exporter) frees
// its lock only for an instant between passes: Flush must still get it.
func TestFlushNotStarvedByBusyCollector(t *testing.T) {
	p := busyCollector(t)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t0 := time.Now()
		err := p.Flush(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Flush %d under a busy collector: %v after %v", i, err, time.Since(t0))
		}
		t.Logf("Flush %d: %v", i, time.Since(t0))
	}
}

// A Flush whose context has ended already (one that must not wait for the
// device: the end of a stopped run) still gathers what is complete while
// a collector pass is under way; it used to give up at the first look and
// gather nothing.
func TestFlushWithEndedContextUnderBusyCollector(t *testing.T) {
	p := busyCollector(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 20; i++ {
		if err := p.Flush(ended); err != nil {
			t.Fatalf("Flush %d with an ended context under a busy collector: %v", i, err)
		}
	}
}
