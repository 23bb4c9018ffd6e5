package profiler_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// lostLog is a LostSink that keeps what it was told, in order.
type lostLog struct {
	mu     sync.Mutex
	events []lostEvent
}

// lostEvent is a ConsumeLost entry (lost set) or a record.
type lostEvent struct {
	lost *profiler.Lost
	rec  profiler.Record
}

func (l *lostLog) Consume(batch []profiler.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range batch {
		l.events = append(l.events, lostEvent{rec: r})
	}
}

func (l *lostLog) ConsumeLost(lost []profiler.Lost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range lost {
		l.events = append(l.events, lostEvent{lost: &x})
	}
}

func (l *lostLog) snapshot() []lostEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// A recorder whose buffer fills drops the ranges after, counts them by
// step, and a LostSink hears of them before the records published after
// them: here 16 ranges fit, 10 of step 3 are dropped and 1 of step 4,
// and the step's own range, ended once the buffer has room, comes after.
func TestLostRangesAreToldByStep(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithBufferSize(16))
	sink := &lostLog{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(2, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	r.SetStep(3)
	r.Start(profiler.StepName)
	for range 26 {
		r.Start("op")
		r.End()
	}
	r.SetStep(4)
	r.Start("op")
	r.End()
	r.SetStep(3)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.End() // the step range, with room again
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Dropped != 11 {
		t.Fatalf("Stats.Dropped %d, want 11 (27 ranges into 16 slots)", st.Dropped)
	}
	ev := sink.snapshot()
	var lost []profiler.Lost
	firstRecord, stepAt := -1, -1
	for i, e := range ev {
		switch {
		case e.lost != nil:
			lost = append(lost, *e.lost)
		case firstRecord < 0:
			firstRecord = i
		}
		if e.lost == nil && e.rec.Name == profiler.StepName {
			stepAt = i
		}
	}
	want := []profiler.Lost{{Rank: 2, Step: 3, Ranges: 10}, {Rank: 2, Step: 4, Ranges: 1}}
	if !slices.Equal(lost, want) {
		t.Fatalf("ConsumeLost was told %+v, want %+v", lost, want)
	}
	if firstRecord < len(want) {
		t.Errorf("a record (event %d) came before the drops were told", firstRecord)
	}
	if stepAt < 0 || stepAt != len(ev)-1 {
		t.Errorf("the step range is event %d of %d, want the last", stepAt, len(ev))
	}
}

// Told of drops concurrently with a rank recording and the background
// collector running, a LostSink never hears of a step's drops after the
// step range that ended it: the range's recorder dropped them before it
// published it.
func TestLostRangesComeBeforeTheirStep(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(time.Millisecond), profiler.WithBufferSize(64))
	sink := &lostLog{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	const ranks, steps, perStep = 2, 200, 100
	var wg sync.WaitGroup
	for rank := range ranks {
		r, err := p.NewRecorder(rank, hostDevice)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for step := range steps {
				r.SetStep(step)
				r.Start(profiler.StepName)
				for range perStep {
					r.Start("op")
					r.End()
				}
				r.End()
			}
		})
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	type key struct {
		rank int
		step int32
	}
	ended := map[key]bool{}
	var told uint64
	for _, e := range sink.snapshot() {
		if e.lost != nil {
			k := key{e.lost.Rank, e.lost.Step}
			if ended[k] {
				t.Fatalf("rank %d step %d: drops told after its step range", k.rank, k.step)
			}
			told += e.lost.Ranges
			continue
		}
		if e.rec.Name == profiler.StepName {
			ended[key{e.rec.Rank, e.rec.Step}] = true
		}
	}
	if d := p.Stats().Dropped; told != d {
		t.Errorf("ConsumeLost told of %d ranges, Stats.Dropped %d", told, d)
	}
	if told == 0 {
		t.Skip("no range was dropped: the collector kept up with 64-slot buffers on this machine, so the order was not tested")
	}
}

// A LostSink that panics in ConsumeLost is removed, as one that panics in
// Consume is, and the run goes on.
func TestLostSinkThatPanics(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithBufferSize(1))
	bad := &panicLost{}
	if err := p.AddSink(bad); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.Start("op")
		r.End()
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.Start("op")
	r.End()
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.SinkFailures != 1 || st.SinkError == nil {
		t.Fatalf("SinkFailures %d (%v), want 1", st.SinkFailures, st.SinkError)
	}
	if bad.consumed != 0 {
		t.Errorf("the removed sink consumed %d records", bad.consumed)
	}
}

type panicLost struct{ consumed int }

func (s *panicLost) Consume(batch []profiler.Record) { s.consumed += len(batch) }
func (s *panicLost) ConsumeLost([]profiler.Lost)     { panic("broken") }
