package otel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
)

// stuckLog is a log destination that stops taking writes (a full pipe
// nobody reads) until released; entered is closed at the first write.
type stuckLog struct {
	entered, release chan struct{}
	once             sync.Once
}

func newStuckLog() *stuckLog {
	return &stuckLog{entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *stuckLog) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return len(p), nil
}

func (s *stuckLog) Sync() error { return nil }

func (s *stuckLog) logger() *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), s, zapcore.InfoLevel))
}

// returnsWithin reports whether f returns within d. The limit only
// bounds a failing run: a passing f returns at once.
func returnsWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// A log write that does not return (the endpoint started failing, and
// the log's pipe is full) holds up neither Consume, on the profiler's
// collector, nor Stats, which a scrape calls.
func TestStuckLogBlocksNeitherConsumeNorStats(t *testing.T) {
	l := newStuckLog()
	f := &flaky{}
	f.down.Store(true)
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, RetryTime: -1},
		otelexp.WithSpanExporter(f), otelexp.WithLogger(l.logger()))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(30)
	exp.Consume(recs)
	<-l.entered // the failure is being logged
	if !returnsWithin(10*time.Second, func() { exp.Consume(recs) }) {
		t.Error("Consume waited for the log")
	}
	if !returnsWithin(10*time.Second, func() { _ = exp.Stats() }) {
		t.Error("Stats waited for the log")
	}
	close(l.release)
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := exp.Stats(); st.Failed != uint64(2*spans) {
		t.Errorf("%d spans failed, want %d", st.Failed, 2*spans)
	}
}

// Nor does a stuck log hold up the Consume whose records overflow the
// queue.
func TestStuckLogDoesNotBlockOverflowingConsume(t *testing.T) {
	l := newStuckLog()
	s := &stub{gate: make(chan struct{})}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, QueueSize: 10},
		otelexp.WithSpanExporter(s), otelexp.WithLogger(l.logger()))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(30)
	if !returnsWithin(10*time.Second, func() { exp.Consume(recs) }) {
		t.Error("Consume waited for the log")
	}
	close(l.release)
	close(s.gate)
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := exp.Stats(); st.Exported+st.Dropped != uint64(spans) || st.Dropped == 0 {
		t.Errorf("exported %d, dropped %d, want %d in all, some dropped", st.Exported, st.Dropped, spans)
	}
}

// Nor does it hold up a Shutdown past its deadline: the counts are final
// (every span failed, none pending) when Shutdown returns, the log line
// still unwritten.
func TestStuckLogDoesNotHoldUpShutdown(t *testing.T) {
	l := newStuckLog()
	defer close(l.release)
	f := &flaky{}
	f.down.Store(true)
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 4, RetryTime: -1},
		otelexp.WithSpanExporter(f), otelexp.WithLogger(l.logger()))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(30)
	exp.Consume(recs)
	<-l.entered // the failure is being logged
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- exp.Shutdown(ctx) }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, otelexp.ErrShutdownDeadline) {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited for the log past its deadline")
	}
	if st := exp.Stats(); st.Failed != uint64(spans) || st.Pending != 0 || st.Exported != 0 {
		t.Errorf("stats %+v; want all %d spans failed, none pending", st, spans)
	}
}
