package profiler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// stuckSink is a sink whose Consume blocks until the test releases it, as
// a call-log writer on a hung disk would.
type stuckSink struct {
	entered     chan struct{} // closed when Consume is first entered
	release     chan struct{} // closed by the test to let Consume return
	enter, free sync.Once
}

func newStuckSink() *stuckSink {
	return &stuckSink{entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *stuckSink) Consume([]profiler.Record) {
	s.enter.Do(func() { close(s.entered) })
	<-s.release
}

func (s *stuckSink) unblock() { s.free.Do(func() { close(s.release) }) }

// stuckProfiler returns a profiler whose background collector is stuck in
// a sink's Consume, holding the profiler's lock, with one recorder that
// has recorded one range. The sink is released, and the profiler closed,
// when the test ends.
func stuckProfiler(t *testing.T) (*profiler.Profiler, *stuckSink) {
	t.Helper()
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sink := newStuckSink()
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	rec, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sink.unblock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close after the sink was released: %v", err)
		}
	})
	rec.Start("op")
	rec.End()
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector never delivered to the sink")
	}
	return p, sink
}

// within runs f on a goroutine and fails the test, rather than hanging
// it, when f has not returned within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v while a sink was stuck in Consume", what, d)
	}
}

// TestStatsDoesNotWaitForAStuckSink: Stats (profile-run's progress line
// and end-of-run summary, a metrics scrape) answers at once while the
// collector is stuck delivering to a sink, with the figures of the last
// completed pass.
func TestStatsDoesNotWaitForAStuckSink(t *testing.T) {
	p, sink := stuckProfiler(t)
	var st profiler.Stats
	within(t, 2*time.Second, "Stats", func() { st = p.Stats() })
	if st.Recorders != 1 {
		t.Errorf("Stats().Recorders = %d while a sink is stuck; want 1", st.Recorders)
	}
	within(t, 2*time.Second, "PeakMemory", func() { _ = p.PeakMemory(0) })

	sink.unblock()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// With the lock free, the figures are current again.
	if st := p.Stats(); st.Collected != 1 || st.Recorders != 1 {
		t.Errorf("after the sink returned: Collected %d, Recorders %d; want 1 and 1", st.Collected, st.Recorders)
	}
}

// TestFlushEndsWithItsContextWhileASinkIsStuck: Flush returns when its
// context ends, with an error saying why, rather than waiting for a sink
// that does not return; once the sink returns, Flush works again.
func TestFlushEndsWithItsContextWhileASinkIsStuck(t *testing.T) {
	p, sink := stuckProfiler(t)
	var err error
	within(t, 2*time.Second, "Flush with a 20ms deadline", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err = p.Flush(ctx)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush while a sink is stuck = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "Consume") {
		t.Errorf("Flush error %q does not name the sink stuck in Consume", err)
	}

	sink.unblock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after the sink returned: %v", err)
	}
}

// TestCalibrateEndsWithItsContextWhileASinkIsStuck: Calibrate, which has
// a context, waits for the stuck collector only until it ends.
func TestCalibrateEndsWithItsContextWhileASinkIsStuck(t *testing.T) {
	p, _ := stuckProfiler(t)
	impl, err := runtime.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	dev := runtime.Device{Type: runtime.CPU, Index: 11}
	within(t, 2*time.Second, "Calibrate with a 20ms deadline", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err = p.Calibrate(ctx, impl, dev)
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Consume") {
		t.Fatalf("Calibrate while a sink is stuck = %v; want an error naming the stuck sink, wrapping context.DeadlineExceeded", err)
	}
}

// TestIngestEndsWithItsContextWhileASinkIsStuck: Ingest (a wrapped run's
// collector, an import) waits for the stuck collector only until its
// context ends, ingests none of its records then, and says so; once the
// sink returns, the same records are ingested.
func TestIngestEndsWithItsContextWhileASinkIsStuck(t *testing.T) {
	p, sink := stuckProfiler(t)
	recs := []profiler.Record{{ID: 1, Name: "ncclAllReduce", Rank: 3, HostStart: time.Millisecond, HostEnd: 2 * time.Millisecond}}
	var err error
	within(t, 2*time.Second, "Ingest with a 20ms deadline", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err = p.Ingest(ctx, recs)
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Consume") || !strings.Contains(err.Error(), "1 record") {
		t.Fatalf("Ingest while a sink is stuck = %v; want an error naming the stuck sink and the record left out, wrapping context.DeadlineExceeded", err)
	}
	sink.unblock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ingest(ctx, recs); err != nil {
		t.Fatalf("Ingest after the sink returned: %v", err)
	}
	n := 0
	for _, r := range p.Snapshot() {
		if r.Rank == 3 {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d records of rank 3 kept, want the one ingested after the sink returned", n)
	}
}

// TestCloseAgainAfterAStuckSink: a Close that gave up on a sink stuck in
// Consume leaves the profiler closed: NewRecorder, Calibrate and AddSink
// say so at once rather than wait for the lock the sink holds. Once the
// sink returns, a second Close makes the last pass and shuts the sinks
// down, which the first could not.
func TestCloseAgainAfterAStuckSink(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	shut, sink := &shutdownCounter{}, newStuckSink()
	for _, s := range []profiler.Sink{shut, sink} {
		if err := p.AddSink(s); err != nil {
			t.Fatal(err)
		}
	}
	defer sink.unblock()
	rec, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	rec.Start("op")
	rec.End()
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector never delivered to the sink")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	within(t, 5*time.Second, "Close with a 20ms deadline", func() { err = p.Close(ctx) })
	if err == nil || !strings.Contains(err.Error(), "Consume") {
		t.Fatalf("Close while a sink is stuck = %v; want an error naming the sink stuck in Consume", err)
	}
	// Recorders still record after Close; the second Close's last pass
	// gathers this range.
	rec.Start("after")
	rec.End()
	within(t, 2*time.Second, "NewRecorder after a Close that gave up", func() { _, err = p.NewRecorder(1, hostDevice) })
	if !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("NewRecorder after Close = %v; want ErrClosed", err)
	}
	impl, err := runtime.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "Calibrate after a Close that gave up", func() {
		err = p.Calibrate(context.Background(), impl, runtime.Device{Type: runtime.CPU, Index: 12})
	})
	if !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("Calibrate after Close = %v; want ErrClosed", err)
	}
	within(t, 2*time.Second, "AddSink after a Close that gave up", func() { err = p.AddSink(&shutdownCounter{}) })
	if !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("AddSink after Close = %v; want ErrClosed", err)
	}
	if n := shut.shutdowns.Load(); n != 0 {
		t.Fatalf("a sink was shut down (%d) by a Close that could not make its last pass", n)
	}

	sink.unblock()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := p.Close(ctx2); err != nil {
		t.Fatalf("second Close after the sink returned: %v", err)
	}
	if n := shut.records.Load(); n != 2 {
		t.Errorf("after the second Close the other sink had %d records, want both ranges recorded", n)
	}
	if n := shut.shutdowns.Load(); n != 1 {
		t.Errorf("the second Close shut the sink down %d times, want once", n)
	}
	if err := p.Close(ctx2); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("third Close = %v; want ErrClosed", err)
	}
	if n := shut.shutdowns.Load(); n != 1 {
		t.Errorf("the third Close shut the sink down again (%d shutdowns)", n)
	}
}

// TestSetupWaitsForAStuckSinkWithADeadline: NewRecorder and AddSink,
// which have no context, wait for a sink stuck in Consume only so long,
// then fail naming it.
func TestSetupWaitsForAStuckSinkWithADeadline(t *testing.T) {
	defer profiler.SetSetupLockTimeout(50 * time.Millisecond)()
	p, _ := stuckProfiler(t)
	var err error
	within(t, 5*time.Second, "NewRecorder", func() { _, err = p.NewRecorder(1, hostDevice) })
	if err == nil || !strings.Contains(err.Error(), "Consume") {
		t.Errorf("NewRecorder while a sink is stuck = %v; want an error naming the sink stuck in Consume", err)
	}
	within(t, 5*time.Second, "AddSink", func() { err = p.AddSink(&shutdownCounter{}) })
	if err == nil || !strings.Contains(err.Error(), "Consume") {
		t.Errorf("AddSink while a sink is stuck = %v; want an error naming the sink stuck in Consume", err)
	}
}
