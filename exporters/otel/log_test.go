package otel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
)

// flaky fails its requests while down is set.
type flaky struct{ down atomic.Bool }

func (f *flaky) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	if f.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

func (f *flaky) Shutdown(context.Context) error { return nil }

// The logger hears of changes — the endpoint failing, then recovering —
// once each, not once per request; and of the first queue overflow only.
func TestLoggerHearsOfChangesOnly(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := &flaky{}
	f.down.Store(true)
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 4, RetryTime: 1},
		otelexp.WithSpanExporter(f), otelexp.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	recs, _ := records(30)
	exp.Consume(recs)
	if err := exp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := exp.Stats(); st.RequestErrors < 2 {
		t.Fatalf("%d failed requests; the test needs several", st.RequestErrors)
	}
	if n := logs.FilterMessageSnippet("not taking spans").Len(); n != 1 {
		t.Errorf("%d warnings for one outage, want 1: %v", n, logs.All())
	}
	f.down.Store(false)
	exp.Consume(recs)
	if err := exp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("taking spans again").Len(); n != 1 {
		t.Errorf("%d recovery messages, want 1: %v", n, logs.All())
	}

	// Overflow: a queue of 10 spans offered 30 spans, twice.
	core2, logs2 := observer.New(zapcore.InfoLevel)
	s := &stub{gate: make(chan struct{})}
	full, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, QueueSize: 10},
		otelexp.WithSpanExporter(s), otelexp.WithLogger(zap.New(core2)))
	if err != nil {
		t.Fatal(err)
	}
	full.Consume(recs)
	full.Consume(recs)
	close(s.gate)
	_ = full.Shutdown(context.Background())
	if n := logs2.FilterMessageSnippet("queue full").Len(); n != 1 || full.Stats().Dropped == 0 {
		t.Errorf("%d overflow warnings (want 1), %d spans dropped", n, full.Stats().Dropped)
	}
}
