package profiler_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// TestConcurrentRecordingWhileReading covers the races a profiler shared by
// pipeline ranks is prone to: many ranks (as under VPP) record nested
// device-timed ranges while another goroutine snapshots, reports, resets
// and changes tags. Run under -race; every range
// recorded after the last Reset must come out exactly once.
func TestConcurrentRecordingWhileReading(t *testing.T) {
	const ranks, iters = 32, 40
	p := newProfiler(t, profiler.WithCollectInterval(time.Millisecond), profiler.WithBufferSize(1<<12))
	recs := make([]*profiler.Recorder, ranks)
	streams := make([]*runtime.Stream, ranks)
	for i := range ranks {
		dev := runtime.Device{Type: runtime.CPU, Index: i}
		var err error
		if recs[i], err = p.NewRecorder(i, dev); err != nil {
			t.Fatal(err)
		}
		if streams[i], err = runtime.NewStream(dev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = streams[i].Destroy() })
	}

	var stop atomic.Bool
	readerDone := make(chan struct{})
	var resets atomic.Int64
	readerStarted := make(chan struct{})
	go func() {
		defer close(readerDone)
		for n := 0; !stop.Load() || resets.Load() == 0; n++ {
			_ = p.Snapshot()
			if n == 0 {
				close(readerStarted) // the ranks record only once the reader runs
			}
			var buf bytes.Buffer
			_ = p.Report(&buf, profiler.SortDeviceTotal)
			p.SetTag(fmt.Sprintf("tag%d", n%3))
			_ = p.Stats()
			if n%7 == 0 {
				p.Reset()
				resets.Add(1)
			}
		}
	}()

	<-readerStarted
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func(r *profiler.Recorder, s *runtime.Stream) {
			defer wg.Done()
			for it := range iters {
				r.SetStep(it)
				r.Start("step")
				for mb := range 2 {
					r.SetMicrobatch(mb)
					r.SetChunk(mb % 2)
					r.SetPhase(profiler.Forward)
					r.StartDevice("forward", s)
					r.StartDevice("linear", s)
					r.End()
					r.StartCollective("AllReduce", s, profiler.Collective{Op: "AllReduce", Bytes: 1024, Peer: -1, Root: -1, GroupSize: ranks, BusFactor: 2 * float64(ranks-1) / ranks})
					r.End()
					r.End()
				}
				r.End()
			}
		}(recs[i], streams[i])
	}
	wg.Wait()
	stop.Store(true)
	<-readerDone
	if resets.Load() == 0 {
		t.Fatal("reader never reset")
	}

	// Everything after a final Reset is accounted for exactly.
	p.Reset()
	var wg2 sync.WaitGroup
	for i := range ranks {
		wg2.Add(1)
		go func(r *profiler.Recorder, s *runtime.Stream) {
			defer wg2.Done()
			r.StartDevice("last", s)
			r.End()
		}(recs[i], streams[i])
	}
	wg2.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := p.Snapshot()
	seen := map[int]int{}
	for _, rec := range got {
		if rec.Name != "last" {
			t.Fatalf("record %q survived the final Reset", rec.Name)
		}
		if !rec.HasDevice {
			t.Errorf("rank %d: device time not resolved after Flush", rec.Rank)
		}
		seen[rec.Rank]++
	}
	for i := range ranks {
		if seen[i] != 1 {
			t.Errorf("rank %d: %d records after the final reset, want 1", i, seen[i])
		}
	}
	if st := p.Stats(); st.Dropped != 0 || st.Unbalanced != 0 || st.Errors != 0 {
		t.Errorf("stats %+v: nothing should be dropped, unbalanced or failed", st)
	}
}
