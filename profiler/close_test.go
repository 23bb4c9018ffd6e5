package profiler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// shutdownCounter is a sink that counts its records and its shutdowns.
type shutdownCounter struct {
	records, shutdowns atomic.Int64
}

func (s *shutdownCounter) Consume(recs []profiler.Record) { s.records.Add(int64(len(recs))) }
func (s *shutdownCounter) Shutdown(context.Context) error {
	s.shutdowns.Add(1)
	return nil
}

// TestCloseWithEndedContextWaitsOutACollectorPass: Close given a context
// that has already ended (a second Ctrl-C) still delivers the last
// records and shuts the sinks down when the collector is only in the
// middle of a pass, holding its lock for a moment, rather than giving
// up at the first look.
func TestCloseWithEndedContextWaitsOutACollectorPass(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	sink := &shutdownCounter{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	rec, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		rec.Start("op")
		rec.End()
	}
	release := profiler.HoldLock(p)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	time.Sleep(50 * time.Millisecond) // a pass holds the lock for well under this
	release()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if got := sink.shutdowns.Load(); got != 1 {
		t.Errorf("sink shut down %d times; want 1", got)
	}
	if got := sink.records.Load(); got != 10 {
		t.Errorf("sink got %d records; want 10", got)
	}
}

// TestCloseWithEndedContextOnAnIdleCollector: Close given a context that
// has already ended, while the background collector waits for its next
// tick, stops it, delivers the last records and shuts the sinks down, so
// it has nothing to report: an error would say records or shutdowns were
// left out when none were.
func TestCloseWithEndedContextOnAnIdleCollector(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sink := &shutdownCounter{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	rec, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		rec.Start("op")
		rec.End()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("Close: %v; want nil, nothing was left out", err)
	}
	if got := sink.records.Load(); got != 3 {
		t.Errorf("sink got %d records; want 3", got)
	}
	if got := sink.shutdowns.Load(); got != 1 {
		t.Errorf("sink shut down %d times; want 1", got)
	}
}
