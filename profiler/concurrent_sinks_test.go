package profiler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// meetSink's Consume waits, for at most its wait, until want meetSinks
// sharing its meeting are inside Consume at once: it can only succeed
// when the sinks consume a batch at the same time.
type meetSink struct {
	m    *meeting
	want int32
	wait time.Duration
	met  atomic.Bool
}

type meeting struct {
	inside   atomic.Int32
	together atomic.Bool // want sinks were inside at once
}

func (s *meetSink) Consume([]profiler.Record) {
	if s.m.inside.Add(1) >= s.want {
		s.m.together.Store(true)
	}
	defer s.m.inside.Add(-1)
	deadline := time.Now().Add(s.wait)
	for time.Now().Before(deadline) {
		if s.m.together.Load() {
			s.met.Store(true)
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestConcurrentSinksConsumeTogether(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		var opts []profiler.Option
		if concurrent {
			opts = append(opts, profiler.WithConcurrentSinks())
		}
		p, err := profiler.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		m := &meeting{}
		// Concurrent, each waits up to 5 s for the other two; one after
		// another (the default), 20 ms for another, which never comes.
		want, wait := int32(3), 5*time.Second
		if !concurrent {
			want, wait = 2, 20*time.Millisecond
		}
		sinks := make([]*meetSink, 3)
		for i := range sinks {
			sinks[i] = &meetSink{m: m, want: want, wait: wait}
			if err := p.AddSink(sinks[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Ingest(context.Background(), []profiler.Record{{ID: 1, Name: "a", Rank: 0}}); err != nil {
			t.Fatal(err)
		}
		for i, s := range sinks {
			if s.met.Load() != concurrent {
				t.Errorf("concurrent %v: sink %d met the others inside Consume: %v", concurrent, i, s.met.Load())
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// orderSink checks that its batches come one at a time and keeps the IDs
// in the order they came.
type orderSink struct {
	busy    atomic.Bool
	overlap atomic.Int32
	ids     []uint64
}

func (s *orderSink) Consume(batch []profiler.Record) {
	if s.busy.Swap(true) {
		s.overlap.Add(1)
	}
	for i := range batch {
		s.ids = append(s.ids, batch[i].ID)
	}
	time.Sleep(10 * time.Microsecond) // room for an overlap to show
	s.busy.Store(false)
}

func TestConcurrentSinksEachInOrder(t *testing.T) {
	p, err := profiler.New(profiler.WithConcurrentSinks(), profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	sinks := make([]*orderSink, 5)
	for i := range sinks {
		sinks[i] = &orderSink{}
		if err := p.AddSink(sinks[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Four ingesting goroutines, each its own rank and IDs 1..n: every
	// sink must see each rank's IDs in order, each once.
	const ranks, n, per = 4, 2000, 7
	done := make(chan error, ranks)
	for r := range ranks {
		go func() {
			for id := 1; id <= n; id += per {
				var batch []profiler.Record
				for k := id; k < id+per && k <= n; k++ {
					batch = append(batch, profiler.Record{ID: uint64(r*n + k), Name: "x", Rank: r})
				}
				if err := p.Ingest(context.Background(), batch); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range ranks {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Ingest returned: every sink has every record now, without waiting.
	for i, s := range sinks {
		if got := len(s.ids); got != ranks*n {
			t.Fatalf("sink %d has %d records after the last Ingest returned, want %d", i, got, ranks*n)
		}
		if o := s.overlap.Load(); o != 0 {
			t.Errorf("sink %d consumed %d batches while consuming another", i, o)
		}
		last := make([]uint64, ranks)
		for _, id := range s.ids {
			r := int((id - 1) / n)
			if id <= last[r] {
				t.Fatalf("sink %d: rank %d's record %d after %d", i, r, id, last[r])
			}
			last[r] = id
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
