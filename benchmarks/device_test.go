package benchmarks

import (
	"testing"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// deviceDrainEvery is a quarter of the default event pool's worth of
// ranges (two events each), so the pool never runs dry between drains.
const deviceDrainEvery = 1024

// BenchmarkDeviceRange: a device-timed range on the host backend beside the
// two raw event records it is made of.
func BenchmarkDeviceRange(b *testing.B) {
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	s, err := runtime.NewStream(dev)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Destroy() })

	// With adjacent ranges sharing an event (the default), and with an
	// event of its own for every start and end.
	for _, adjacent := range []bool{true, false} {
		name := "trainscope"
		if !adjacent {
			name += "/own-events"
		}
		b.Run(name, func(b *testing.B) {
			p := newQuietProfiler(b, profiler.WithAdjacentRanges(adjacent))
			r, err := p.NewRecorder(0, dev)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.SetMicrobatch(i & 7)
				r.StartDevice("forward", s)
				// The range's work, as far as the profiler can tell: a
				// range with nothing enqueued in it would take the
				// stream's latest event at both ends and record none.
				s.MarkEnqueued()
				r.End()
				if i%deviceDrainEvery == deviceDrainEvery-1 {
					// Collection, with its event queries, is the collector's
					// work, not the rank's.
					b.StopTimer()
					p.Reset()
					b.StartTimer()
				}
			}
			b.StopTimer()
			st := p.Stats()
			if st.Dropped != 0 || st.EventDrops != 0 {
				b.Fatalf("ranges dropped or timed on the host only: %+v", st)
			}
		})
	}
	b.Run("two-raw-event-records", func(b *testing.B) {
		e1, _ := runtime.NewEvent(dev, runtime.EventDefault)
		e2, _ := runtime.NewEvent(dev, runtime.EventDefault)
		b.Cleanup(func() { _ = e1.Destroy(); _ = e2.Destroy() })
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = e1.Record(s)
			s.MarkEnqueued()
			_ = e2.Record(s)
		}
	})
}
