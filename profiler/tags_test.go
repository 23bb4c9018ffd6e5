package profiler_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// A run that sets a new tag per step: every range carries the tag set
// before it started, the ten-thousandth as the first.
func TestManyDistinctTags(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithMaxRecords(0))
	sink := newNameSink()
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	for i := range n {
		tag := fmt.Sprintf("step-%d", i)
		p.SetTag(tag)
		if got := p.Tag(); got != tag {
			t.Fatalf("after SetTag(%q): Tag = %q", tag, got)
		}
		r.Start(fmt.Sprintf("range %d", i))
		r.End()
		if i%1000 == 999 {
			p.Snapshot()
		}
	}
	p.SetTag("step-17") // an old tag again
	r.Start("again")
	r.End()
	p.SetTag("")
	r.Start("untagged")
	r.End()
	p.Snapshot()

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.tags) != n+2 {
		t.Fatalf("%d records delivered, want %d", len(sink.tags), n+2)
	}
	for i := range n {
		if got, want := sink.tags[fmt.Sprintf("range %d", i)], fmt.Sprintf("step-%d", i); got != want {
			t.Fatalf("range %d: tag %q, want %q", i, got, want)
		}
	}
	if got := sink.tags["again"]; got != "step-17" {
		t.Errorf("range after setting an old tag again: tag %q, want %q", got, "step-17")
	}
	if got := sink.tags["untagged"]; got != "" {
		t.Errorf("range after SetTag(\"\"): tag %q, want none", got)
	}
}

// tagBytes is the heap SetTag allocates for n new tags (their strings
// made beforehand), on a profiler that has had before distinct tags.
func tagBytes(t *testing.T, before, n int) uint64 {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	for i := range before {
		p.SetTag(fmt.Sprintf("old-%d", i))
	}
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("new-%d", i)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for _, tag := range tags {
		p.SetTag(tag)
	}
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A new tag costs what it costs whatever the tags before it: 2,000 new
// tags allocate about as much after 50,000 others as after none. A table
// copied whole per new tag costs each of them 50,000 × 16 bytes, 800 KB.
func TestSetTagCostDoesNotGrowWithTags(t *testing.T) {
	const n = 2000
	fresh := tagBytes(t, 0, n)
	late := tagBytes(t, 50000, n)
	t.Logf("%d new tags: %d bytes on a fresh profiler, %d after 50,000 others", n, fresh, late)
	// 50,000 tags of 16-byte headers are 800 KB: one growth of the table
	// past them may fall among the 2,000 and is allowed, twice over, on
	// top of 4× the fresh profiler's bytes.
	if limit := 4*fresh + 2*50000*16*5/4; late > limit {
		t.Errorf("%d new tags after 50,000 others allocated %d bytes (%d per tag), over %d: SetTag's cost grows with the tags before it",
			n, late, late/n, limit)
	}
}

// Tag is safe while SetTag adds tags: it never reads past the table it
// loaded.
func TestTagWhileSetTagAddsTags(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	const n = 20000
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("step-%d", i)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Go(func() {
		for !stop.Load() {
			got := p.Tag()
			if got != "" && (len(got) < 5 || got[:5] != "step-") {
				bad.Store(got)
			}
		}
	})
	for _, tag := range tags {
		p.SetTag(tag)
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Errorf("Tag returned %q while tags were added", v)
	}
	if got := p.Tag(); got != tags[n-1] {
		t.Errorf("Tag = %q, want %q", got, tags[n-1])
	}
}

// BenchmarkSetTag sets n tags, recording a range under each and
// collecting every 1024, with n distinct tags (a tag per step) and, as the
// baseline, one tag set n times. ns/tag is the time per SetTag and range;
// on a table whose cost does not grow with its tags, distinct and repeated
// stay within a small factor of each other at every n.
func BenchmarkSetTag(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		distinct := make([]string, n)
		repeated := make([]string, n)
		for i := range distinct {
			distinct[i] = fmt.Sprintf("step-%d", i)
			repeated[i] = "step"
		}
		for _, c := range []struct {
			name string
			tags []string
		}{{"repeated", repeated}, {"distinct", distinct}} {
			b.Run(fmt.Sprintf("%s/tags=%d", c.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithMaxRecords(0))
					if err != nil {
						b.Fatal(err)
					}
					sink := &countSink{}
					if err := p.AddSink(sink); err != nil {
						b.Fatal(err)
					}
					r, err := p.NewRecorder(0, hostDevice)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					for i, tag := range c.tags {
						p.SetTag(tag)
						r.Start("step")
						r.End()
						if i%1024 == 1023 {
							p.Snapshot()
						}
					}
					p.Snapshot()
					b.StopTimer()
					if sink.n != n || sink.last != c.tags[n-1] {
						b.Fatalf("%d records, last tagged %q; want %d, %q", sink.n, sink.last, n, c.tags[n-1])
					}
					if err := p.Close(context.Background()); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tag")
			})
		}
	}
}

// countSink counts its records and keeps the last one's tag.
type countSink struct {
	n    int
	last string
}

func (s *countSink) Consume(batch []profiler.Record) {
	s.n += len(batch)
	if len(batch) > 0 {
		s.last = batch[len(batch)-1].Tag
	}
}
