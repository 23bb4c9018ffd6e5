package profiler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// A recorder running short wakes the collector: with a timer that never
// fires in the test's lifetime and room for 8 ranges, the recorder asks
// for a collection each time another half of its ring has filled (ranges
// 4, 8, 12, …), and only the background collector, so woken, can gather
// them (Stats does not collect). After each such range the test waits for
// the collector to have gathered it: 100 ranges go through an 8-range ring
// with none lost. Were the wake ignored, nothing would be gathered.
func TestCollectorWakesWhenARecorderRunsShort(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(time.Hour), profiler.WithBufferSize(8))
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		r.Start("a")
		r.End()
		if i%4 != 3 {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for p.Stats().Records < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("after range %d the collector has gathered %d: it was not woken", i+1, p.Stats().Records)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if st := p.Stats(); st.Dropped != 0 {
		t.Errorf("%d of %d ranges dropped", st.Dropped, n)
	}
	if got := len(p.Snapshot()); got != n {
		t.Errorf("%d records, want %d", got, n)
	}
}

// lifecycleSink logs what happens to it into a shared log.
type lifecycleSink struct {
	name    string
	mu      *sync.Mutex
	log     *[]string
	records int
	block   time.Duration // Shutdown waits this long, or until ctx ends
	fail    error
}

func (s *lifecycleSink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records += len(batch)
	*s.log = append(*s.log, s.name+" consume")
}

func (s *lifecycleSink) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	*s.log = append(*s.log, s.name+" shutdown")
	s.mu.Unlock()
	if s.block > 0 {
		select {
		case <-time.After(s.block):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.fail
}

// plainSink has no Shutdown.
type plainSink struct{ n int }

func (s *plainSink) Consume(batch []profiler.Record) { s.n += len(batch) }

func TestCloseShutsSinksDownInOrderAfterTheLastDelivery(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	boom := errors.New("boom")
	a := &lifecycleSink{name: "a", mu: &mu, log: &log}
	plain := &plainSink{}
	b := &lifecycleSink{name: "b", mu: &mu, log: &log, fail: boom}
	for _, s := range []profiler.Sink{a, plain, b} {
		if err := p.AddSink(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddSink(nil); err == nil {
		t.Error("AddSink(nil): no error")
	}
	r, _ := p.NewRecorder(0, hostDevice)
	for range 3 {
		r.Start("x")
		r.End()
	}
	// Not collected yet (the timer is an hour): Close must deliver them
	// before it shuts anything down.
	err = p.Close(context.Background())
	if !errors.Is(err, boom) {
		t.Errorf("Close: %v, want b's Shutdown error", err)
	}
	want := []string{"a consume", "b consume", "a shutdown", "b shutdown"}
	mu.Lock()
	got := append([]string(nil), log...)
	mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
	if a.records != 3 || b.records != 3 || plain.n != 3 {
		t.Errorf("delivered %d, %d, %d records; want 3 to each sink", a.records, plain.n, b.records)
	}
	// Nothing reaches a sink after Close, and no sink can be added.
	r.Start("late")
	r.End()
	if n := len(p.Snapshot()); n != 4 {
		t.Errorf("%d records kept, want 4: records stay readable after Close", n)
	}
	if a.records != 3 || plain.n != 3 {
		t.Errorf("a sink got records after Close: %d, %d", a.records, plain.n)
	}
	if err := p.AddSink(&plainSink{}); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("AddSink after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(context.Background()); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

// A sink that does not finish its Shutdown in time costs Close no more
// than the context allows, and the sinks after it are still shut down.
func TestCloseKeepsToItsDeadline(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	slow := &lifecycleSink{name: "slow", mu: &mu, log: &log, block: time.Hour}
	next := &lifecycleSink{name: "next", mu: &mu, log: &log}
	_ = p.AddSink(slow)
	_ = p.AddSink(next)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Close(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want the slow sink's deadline error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(log) != 2 || log[1] != "next shutdown" {
		t.Errorf("events %q: want the next sink shut down too", log)
	}
}

// With WithMaxRecords(0) the sinks get every record and the store keeps
// none, without counting them as lost; Stats.Collected counts them all.
func TestNoStoreWithSinks(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithMaxRecords(0))
	sink := &plainSink{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	r, _ := p.NewRecorder(0, hostDevice)
	for range 50 {
		r.Start("a")
		r.End()
	}
	if n := len(p.Snapshot()); n != 0 {
		t.Errorf("store kept %d records", n)
	}
	if st := p.Stats(); sink.n != 50 || st.Collected != 50 || st.Overflow != 0 || st.Records != 0 {
		t.Errorf("sink got %d; stats %+v; want 50 collected and delivered, none kept or over the bound", sink.n, st)
	}
}
