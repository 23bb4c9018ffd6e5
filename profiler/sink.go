package profiler

import (
	"context"
	"errors"
	"fmt"
)

// Sink receives every finished record exactly once, in batches, in the
// order the collector finishes them: host ranges when collected, device
// ranges once their times are resolved. Consume runs on whichever goroutine
// collects (the background collector, or a Snapshot, Flush, Reset or Ingest
// caller) with the profiler's lock held, the sinks one after another in the
// order they were added; with WithConcurrentSinks, each batch goes to every
// sink at once, each on a goroutine of its own, and all have consumed it
// before the next. A batch holds at most 32,768 records: a larger pass (an
// Ingest of a whole profile, say) comes in several. Consume must return
// quickly, must not call back into the Profiler, and must copy what it
// keeps, since the batch is reused.
// Exporters implement it. A sink whose Consume panics is removed (it gets
// nothing more, nor a Shutdown) and counted in Stats.SinkFailures; the
// other sinks and the run go on.
//
// A sink that holds resources (a connection, a queue, a server) also
// implements SinkShutdowner; Profiler.Close calls it once after the last
// delivery.
type Sink interface {
	Consume(batch []Record)
}

// Lost is what a recorder dropped while recording (its queue full because
// the collector fell behind, or nesting deeper than it holds): Ranges
// ranges of rank Rank labelled with step Step, None where no step was set
// or the recorder noted too many steps between two collections to say.
type Lost struct {
	Rank   int
	Step   int32
	Ranges uint64
}

// LostSink is a Sink told of the ranges dropped while recording, so that
// it can say which of its figures lack them (the pipeline analysis leaves
// a step that lost ranges out). ConsumeLost gets, before each batch of
// records (and at a collection with none), the drops noted since the last
// call; a drop is noted before any range its recorder publishes after it,
// so it comes before the records of its step that were kept. It runs as
// Consume does, with the same rules; a sink that panics in it is removed.
type LostSink interface {
	Sink
	ConsumeLost(lost []Lost)
}

// SinkShutdowner is a Sink with something to release: Profiler.Close
// calls Shutdown once, after the last record has been delivered, in the
// order the sinks were added, each within the context Close was given. A
// sink that delivers elsewhere flushes what it holds there; once Shutdown
// returns, it is sent no more records.
type SinkShutdowner interface {
	Sink
	Shutdown(ctx context.Context) error
}

// AddSink registers s for every record finished from now on. Like
// NewRecorder, it waits for the collector's lock at most 10 s. After
// Close it is an error: the profiler delivers nothing more.
func (p *Profiler) AddSink(s Sink) error {
	if s == nil {
		return errors.New("profiler: AddSink: nil sink")
	}
	if p == nil {
		return nil // profiling off: nothing will come
	}
	if p.closing() {
		return fmt.Errorf("profiler: AddSink: %w", ErrClosed)
	}
	if !p.lockForSetup() {
		return fmt.Errorf("profiler: AddSink: %w", errSetupStuck())
	}
	defer p.unlock()
	if p.sinksClosed {
		return fmt.Errorf("profiler: AddSink: %w", ErrClosed)
	}
	p.sinks = append(p.sinks, s)
	return nil
}

// shutdownSinks shuts down the sinks that implement SinkShutdowner, in
// the order they were added. Each gets ctx; a sink whose Shutdown fails
// does not stop the next one's.
func shutdownSinks(ctx context.Context, sinks []Sink) error {
	var errs []error
	for _, s := range sinks {
		if sd, ok := s.(SinkShutdowner); ok {
			if err := sd.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("profiler: shut down sink %T: %w", s, err))
			}
		}
	}
	return errors.Join(errs...)
}
