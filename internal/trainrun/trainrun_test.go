package trainrun

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// shutdownSink cancels the run at its first batch and notes what its
// Shutdown was given.
type shutdownSink struct {
	once   sync.Once
	cancel context.CancelFunc
	mu     sync.Mutex
	shut   bool
	ctxErr error
}

func (s *shutdownSink) Consume([]profiler.Record) { s.once.Do(s.cancel) }

func (s *shutdownSink) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shut, s.ctxErr = true, ctx.Err()
	return nil
}

// An interrupted run still closes its profiler: the collector's last pass
// and the sinks' Shutdown run with time to do their work, and Run reports
// the interruption, not a close cut short.
func TestRunInterruptedClosesProfiler(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := &shutdownSink{cancel: cancel}
	_, _, err := Run(ctx, Layouts()[0], s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shut {
		t.Fatal("the sink was not shut down")
	}
	if s.ctxErr != nil {
		t.Errorf("the sink's Shutdown was given a context already ended (%v): what it writes on shutdown is lost", s.ctxErr)
	}
	if err != nil && strings.Contains(err.Error(), "close:") {
		t.Errorf("Run: %v; want the profiler closed in full", err)
	}
}

type nopSink struct{}

func (nopSink) Consume([]profiler.Record) {}

// Run does not write into the caller's slice of sinks past its length.
func TestRunLeavesCallersSinks(t *testing.T) {
	sinks := make([]profiler.Sink, 1, 2)
	sinks[0] = nopSink{}
	if _, _, err := Run(t.Context(), Layouts()[0], sinks...); err != nil {
		t.Fatal(err)
	}
	if extra := sinks[:2][1]; extra != nil {
		t.Errorf("Run wrote %T into the caller's slice of sinks, past its length", extra)
	}
}
