package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// BenchmarkDeviceRange: a device-timed range on the host backend beside the
// two raw event records it is made of.
func BenchmarkDeviceRange(b *testing.B) {
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	s, err := runtime.NewStream(dev)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Destroy() })

	b.Run("trainscope", func(b *testing.B) {
		// A pool deep enough that every range gets its events: the stream
		// goroutine, not the pool, paces both this and the baseline.
		p, err := profiler.New(profiler.WithBufferSize(1<<16), profiler.WithMaxRecords(1),
			profiler.WithCollectInterval(time.Millisecond), profiler.WithEventPool(1<<18))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(context.Background()) })
		r, err := p.NewRecorder(0, dev)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r.SetMicrobatch(i & 7)
			r.StartDevice("forward", s)
			r.End()
		}
		b.StopTimer()
		st := p.Stats()
		b.ReportMetric(float64(st.EventDrops)/float64(b.N), "host-only/op")
	})
	b.Run("two-raw-event-records", func(b *testing.B) {
		e1, _ := runtime.NewEvent(dev, runtime.EventDefault)
		e2, _ := runtime.NewEvent(dev, runtime.EventDefault)
		b.Cleanup(func() { _ = e1.Destroy(); _ = e2.Destroy() })
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = e1.Record(s)
			_ = e2.Record(s)
		}
	})
}
