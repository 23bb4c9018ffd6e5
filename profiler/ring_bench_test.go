package profiler_test

import (
	"context"
	"testing"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// drainEvery is how many ranges the benchmarks record between two
// collections: half the default buffer, so no range is dropped.
const drainEvery = 4096

// BenchmarkRecorderFill is drainEvery host ranges into a new recorder,
// whose buffer they touch for the first time, beside the same into a
// recorder that has been round its whole buffer before (the baseline).
// Only recording is timed; ns/range is per range. The benchmarks of a
// single range on the hot path are in the benchmarks package (HostRange,
// DeviceRange).
func BenchmarkRecorderFill(b *testing.B) {
	record := func(r *profiler.Recorder) {
		for range drainEvery {
			r.Start("op")
			r.End()
		}
	}
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			p, r := benchRecorder(b, hostDevice)
			b.StartTimer()
			record(r)
			b.StopTimer()
			benchDropped(b, p)
			if err := p.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*drainEvery), "ns/range")
	})
	b.Run("warm", func(b *testing.B) {
		p, r := benchRecorder(b, hostDevice)
		for range 2 { // round the whole buffer
			record(r)
			p.Snapshot()
		}
		b.ReportAllocs()
		for b.Loop() {
			record(r)
			b.StopTimer()
			p.Snapshot()
			b.StartTimer()
		}
		benchDropped(b, p)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*drainEvery), "ns/range")
	})
}

// benchRecorder is a recorder on dev of a profiler with the default
// buffer, no background collector and no records kept.
func benchRecorder(b *testing.B, dev runtime.Device) (*profiler.Profiler, *profiler.Recorder) {
	b.Helper()
	p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithMaxRecords(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		b.Fatal(err)
	}
	return p, r
}

// benchDropped fails b if a range was dropped: a dropped range skips
// most of the work a recorded one does.
func benchDropped(b *testing.B, p *profiler.Profiler) {
	b.Helper()
	if st := p.Stats(); st.Dropped != 0 {
		b.Fatalf("%d ranges dropped", st.Dropped)
	}
}
