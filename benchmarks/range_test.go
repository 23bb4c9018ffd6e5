package benchmarks

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// hostOnly is a device type with no backend, so recorders on it are
// host-only and calibrate nothing.
var hostOnly = runtime.Device{Type: runtime.DeviceType(99)}

// newQuietProfiler has no background collector: the benchmark collects.
func newQuietProfiler(b *testing.B, opts ...profiler.Option) *profiler.Profiler {
	b.Helper()
	p, err := profiler.New(append([]profiler.Option{profiler.WithCollectInterval(0)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func newProfiler(b *testing.B) *profiler.Profiler {
	b.Helper()
	// A buffer deep enough, and a collector frequent enough, that the
	// benchmark measures recording rather than dropping.
	p, err := profiler.New(profiler.WithMaxRecords(1), profiler.WithCollectInterval(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func rangeWithLabels(r *profiler.Recorder, i int) {
	r.SetStage(1)
	r.SetChunk(i & 1)
	r.SetMicrobatch(i & 7)
	r.SetPhase(profiler.Forward)
	r.Start("forward")
	r.End()
}

// drainEvery is how many ranges a benchmark records between collections:
// half the default recorder queue, as the collector's wake-up asks.
const drainEvery = 4096

// BenchmarkHostRange: Start+End with four labels, beside the baselines.
// "trainscope" is what the recording rank pays: collection happens every
// drainEvery ranges with the timer stopped. "trainscope+collect" counts the
// collector's work too, on the same goroutine.
func BenchmarkHostRange(b *testing.B) {
	b.Run("trainscope", func(b *testing.B) {
		p := newQuietProfiler(b)
		r, _ := p.NewRecorder(0, hostOnly)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rangeWithLabels(r, i)
			if i%drainEvery == drainEvery-1 {
				b.StopTimer()
				p.Reset()
				b.StartTimer()
			}
		}
		b.StopTimer()
		if st := p.Stats(); st.Dropped != 0 {
			b.Fatalf("ranges dropped: %+v", st)
		}
	})
	b.Run("trainscope+collect", func(b *testing.B) {
		p := newQuietProfiler(b)
		r, _ := p.NewRecorder(0, hostOnly)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rangeWithLabels(r, i)
			if i%drainEvery == drainEvery-1 {
				p.Reset()
			}
		}
		b.StopTimer()
		if st := p.Stats(); st.Dropped != 0 {
			b.Fatalf("ranges dropped: %+v", st)
		}
	})
	b.Run("trainscope-off", func(b *testing.B) {
		var r *profiler.Recorder
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			rangeWithLabels(r, i)
		}
	})
	b.Run("mutex-append", func(b *testing.B) {
		var mu sync.Mutex
		recs := make([]profiler.Record, 0, 1<<16)
		start := time.Now()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			t0 := time.Since(start)
			rec := profiler.Record{Name: "forward", Labels: profiler.Labels{Stage: 1, Chunk: int16(i & 1), Microbatch: int32(i & 7), Phase: profiler.Forward}, HostStart: t0}
			rec.HostEnd = time.Since(start)
			mu.Lock()
			if len(recs) == cap(recs) {
				recs = recs[:0]
			}
			recs = append(recs, rec)
			mu.Unlock()
		}
	})
	b.Run("otel-sdk-span", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}, sdktrace.WithBlocking()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		tr := tp.Tracer("bench")
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			// Attributes known at the start go in the start options, as
			// OpenTelemetry recommends (samplers see them).
			_, span := tr.Start(ctx, "forward", trace.WithAttributes(
				attribute.Int("training.stage", 1),
				attribute.Int("training.chunk", i&1),
				attribute.Int("training.microbatch", i&7),
				attribute.String("training.phase", "forward"),
			))
			span.End()
		}
	})
}

// BenchmarkHostRangeParallel: one recorder per goroutine, as ranks have;
// run with -cpu 1,2 to see that per-op cost does not grow with procs.
func BenchmarkHostRangeParallel(b *testing.B) {
	b.Run("trainscope", func(b *testing.B) {
		p := newProfiler(b)
		var mu sync.Mutex
		rank := 0
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			r, _ := p.NewRecorder(rank, hostOnly)
			rank++
			mu.Unlock()
			i := 0
			for pb.Next() {
				rangeWithLabels(r, i)
				i++
			}
		})
		// The goroutines record faster than one collector drains their
		// buffers, and what it cannot take is dropped: the figure is a
		// mix of recorded ranges and the drop path, in this proportion.
		b.ReportMetric(float64(p.Stats().Dropped)/float64(b.N), "drops/op")
	})
	b.Run("mutex-append", func(b *testing.B) {
		var mu sync.Mutex
		recs := make([]profiler.Record, 0, 1<<16)
		start := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				t0 := time.Since(start)
				rec := profiler.Record{Name: "forward", Labels: profiler.Labels{Stage: 1, Chunk: int16(i & 1), Microbatch: int32(i & 7), Phase: profiler.Forward}, HostStart: t0}
				rec.HostEnd = time.Since(start)
				mu.Lock()
				if len(recs) == cap(recs) {
					recs = recs[:0]
				}
				recs = append(recs, rec)
				mu.Unlock()
				i++
			}
		})
	})
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
