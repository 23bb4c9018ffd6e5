package profiler_test

import (
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// keepSink keeps every record delivered to it, in delivery order.
type keepSink struct{ recs []profiler.Record }

func (s *keepSink) Consume(batch []profiler.Record) { s.recs = append(s.recs, batch...) }

// A recorder's buffer, filled to its capacity with nothing collecting,
// keeps the first ranges and drops the rest, counting each; then, drained
// a part at a time, it wraps round many times and delivers every range
// once, in the order recorded, device details with the right range. The
// rounds are not a divisor of the capacity, so they end anywhere in it.
func TestBufferFillsAndWraps(t *testing.T) {
	const (
		asked    = 1000 // rounded up to 1024
		capacity = 1024
		over     = 37
		round    = 700
		rounds   = 60 // about 41 times round the buffer
	)
	sink := &keepSink{}
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithBufferSize(asked), profiler.WithMaxRecords(0))
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	n := 0 // ranges recorded so far, each named by its number
	record := func() {
		name := fmt.Sprint(n)
		if n%3 == 0 {
			// A device range with no stream: its details go through the
			// second queue, and come back as its collective's bytes.
			r.StartCollective(name, nil, profiler.Collective{Op: "AllReduce", Bytes: int64(n), Peer: -1, Root: -1})
		} else {
			r.Start(name)
		}
		r.End()
		n++
	}
	check := func(from, to int, dropped uint64) {
		t.Helper()
		got := sink.recs
		sink.recs = nil
		if len(got) != to-from {
			t.Fatalf("ranges %d to %d: %d delivered, want %d", from, to, len(got), to-from)
		}
		for i, rec := range got {
			want := from + i
			if rec.Name != fmt.Sprint(want) {
				t.Fatalf("ranges %d to %d: record %d is %q, want %q", from, to, i, rec.Name, fmt.Sprint(want))
			}
			if isColl := want%3 == 0; isColl != (rec.Kind == profiler.KindCollective) || isColl && rec.Collective.Bytes != int64(want) {
				t.Fatalf("range %d: kind %v, bytes %d; want a collective %v with bytes %d", want, rec.Kind, rec.Collective.Bytes, isColl, want)
			}
		}
		if st := p.Stats(); st.Dropped != dropped {
			t.Fatalf("after range %d: Dropped = %d, want %d", to, st.Dropped, dropped)
		}
	}

	for range capacity + over {
		record()
	}
	p.Snapshot()
	check(0, capacity, over)

	// The dropped ranges took numbers but are gone; start again after them.
	base := n
	for i := range rounds {
		for range round {
			record()
		}
		p.Snapshot()
		check(base+i*round, base+(i+1)*round, over)
	}

	// Full again after all that wrapping: the same bound, counted the
	// same way.
	base = n
	for range capacity + over {
		record()
	}
	p.Snapshot()
	check(base, base+capacity, 2*over)
}
