package profiler_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// panicSink panics on its second batch.
type panicSink struct{ batches atomic.Int32 }

func (s *panicSink) Consume([]profiler.Record) {
	if s.batches.Add(1) == 2 {
		panic("exporter bug")
	}
}

// A sink that panics is removed, and the panic kept in Stats: the run
// goes on (on the background collector too, where a panic would end the
// process), and the other sinks get every record once — the batch the
// panic cut short is not delivered to them again.
func TestPanickingSinkIsRemoved(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []profiler.Option
	}{
		{"in order", nil},
		{"concurrent", []profiler.Option{profiler.WithConcurrentSinks()}},
		{"background collector", []profiler.Option{profiler.WithCollectInterval(time.Millisecond)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newProfiler(t, append([]profiler.Option{profiler.WithCollectInterval(0), profiler.WithMaxRecords(0)}, c.opts...)...)
			before, after := newNameSink(), newNameSink()
			bad := &panicSink{}
			for _, s := range []profiler.Sink{before, bad, after} {
				if err := p.AddSink(s); err != nil {
					t.Fatal(err)
				}
			}
			r, _ := p.NewRecorder(0, hostDevice)
			names := []string{"a", "b", "c", "d"}
			for _, name := range names {
				r.Start(name)
				r.End()
				if err := p.Flush(context.Background()); err != nil { // a batch per range
					t.Fatal(err)
				}
			}
			for _, s := range []*nameSink{before, after} {
				s.mu.Lock()
				for _, name := range names {
					if s.n[name] != 1 {
						t.Errorf("range %s delivered %d times to a good sink, want once", name, s.n[name])
					}
				}
				s.mu.Unlock()
			}
			if got := bad.batches.Load(); got != 2 {
				t.Errorf("the panicking sink got %d batches, want 2 (none after its panic)", got)
			}
			st := p.Stats()
			if st.SinkFailures != 1 || st.SinkError == nil || !strings.Contains(st.SinkError.Error(), "panicSink") || !strings.Contains(st.SinkError.Error(), "exporter bug") {
				t.Errorf("SinkFailures %d, SinkError %v; want 1 and the panic, naming the sink", st.SinkFailures, st.SinkError)
			}
		})
	}
}

// blockSink blocks in Consume until release is closed.
type blockSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockSink) Consume([]profiler.Record) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
}

// Close waits for the collector no longer than its context, even when a
// sink never returns from Consume (the collector holds the lock there).
func TestCloseWithAStuckSink(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond), profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	s := &blockSink{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(s.release) // let the collector go once the test is over
	if err := p.AddSink(s); err != nil {
		t.Fatal(err)
	}
	r, _ := p.NewRecorder(0, hostDevice)
	r.Start("x")
	r.End()
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector never delivered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Close(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "has not returned from Consume") {
			t.Errorf("Close = %v, want an error saying a sink is stuck", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s with a 50ms context")
	}
}
