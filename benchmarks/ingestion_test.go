package benchmarks

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// ingestRecorders is how many ranks record at once.
const ingestRecorders = 8

// countingSink counts what reaches the sinks, and accounts steps as the
// report and the metrics do, so "aggregated" includes the busy/idle work.
type countingSink struct {
	n    atomic.Uint64
	acct *profiler.StepAccountant
}

func (s *countingSink) Consume(batch []profiler.Record) {
	for i := range batch {
		s.acct.Add(&batch[i])
	}
	s.acct.Finish(func(profiler.StepTime) {}, nil)
	s.n.Add(uint64(len(batch)))
}

// BenchmarkIngestion: 8 recorders record nested host ranges (a step, then
// actions of three ranges each) with the default buffers and collector,
// flat out ("max") or paced at a total rate ("paced-…"), and the
// benchmark reports ranges per second recorded and collected through a
// sink, and the ranges dropped on the recording side. Run it for 10 s:
//
//	go test -run '^$' -bench Ingestion -benchtime 10s ./benchmarks/
//
// b.N is the number of ranges per recorder.
func BenchmarkIngestion(b *testing.B) {
	for _, c := range []struct {
		name string
		rate float64 // ranges per second over all recorders; 0 for flat out
	}{
		{"max", 0},
		{"paced-100k", 100e3},
		{"paced-1M", 1e6},
		{"paced-2M", 2e6},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := profiler.New()
			if err != nil {
				b.Fatal(err)
			}
			sink := &countingSink{acct: profiler.NewStepAccountant()}
			if err := p.AddSink(sink); err != nil {
				b.Fatal(err)
			}
			// The store is for a window of detail; keep it small so the
			// benchmark measures collection, not a growing slice.
			recs := make([]*profiler.Recorder, ingestRecorders)
			for i := range recs {
				if recs[i], err = p.NewRecorder(i, runtime.Device{Type: runtime.DeviceType(99)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, r := range recs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					record(r, b.N, c.rate/ingestRecorders, start)
				}()
			}
			wg.Wait()
			recorded := time.Since(start)
			if err := p.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			collected := time.Since(start)
			b.StopTimer()
			st := p.Stats()
			total := float64(ingestRecorders * b.N)
			b.ReportMetric(total/recorded.Seconds(), "recorded/s")
			b.ReportMetric(float64(sink.n.Load())/collected.Seconds(), "collected/s")
			b.ReportMetric(float64(st.Dropped), "dropped")
			if got := sink.n.Load() + st.Dropped; got != uint64(total) {
				b.Errorf("%d ranges reached the sink and %d were dropped, of %d recorded", sink.n.Load(), st.Dropped, uint64(total))
			}
			_ = p.Close(context.Background())
		})
	}
}

// record makes n ranges on r: a step range around groups of an action
// range holding two kernel ranges, at rate ranges per second when rate > 0.
func record(r *profiler.Recorder, n int, rate float64, start time.Time) {
	done := 0
	for step := 0; done < n; step++ {
		r.SetStep(step)
		r.Start("step")
		done++
		for a := 0; a < 32 && done+3 <= n; a++ {
			r.Start("forward")
			r.Start("linear")
			r.End()
			r.Start("tanh")
			r.End()
			r.End()
			done += 3
			if rate > 0 {
				if ahead := time.Duration(float64(done)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
		r.End()
	}
}
