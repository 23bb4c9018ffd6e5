package cpu_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestEventQueryFollowsStream(t *testing.T) {
	s := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)

	wantStatus(t, ev.Query(), runtime.StatusSuccess) // never recorded: complete, as in CUDA
	release := block(t, s)
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ev.Query(), runtime.StatusNotReady)
	wantStatus(t, s.Query(), runtime.StatusNotReady)
	release()
	if err := ev.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ev.Query(), runtime.StatusSuccess)
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s.Query(), runtime.StatusSuccess)
}

func TestSynchronizeDeadline(t *testing.T) {
	s := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	block(t, s)
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sync func(context.Context) error
	}{
		{"event", ev.Synchronize},
		{"stream", s.Synchronize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			wantStatus(t, tc.sync(ctx), runtime.StatusTimeout)
		})
	}
}

// A re-recorded event reports on its latest record only.
func TestEventRerecord(t *testing.T) {
	a, b := newStream(t, dev0), newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	if err := ev.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := ev.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	release := block(t, b)
	if err := ev.Record(b); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ev.Query(), runtime.StatusNotReady)
	release()
	if err := ev.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ev.Query(), runtime.StatusSuccess)
}

func TestElapsedCoversStreamWork(t *testing.T) {
	const nap = 15 * time.Millisecond
	s := newStream(t, dev0)
	start, end := newEvent(t, dev0, runtime.EventDefault), newEvent(t, dev0, runtime.EventDefault)
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := cpu.Enqueue(s, func() { time.Sleep(nap) }); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	// Not complete yet: the stream is still asleep.
	if _, err := runtime.Elapsed(start, end); err != nil {
		wantStatus(t, err, runtime.StatusNotReady)
	}
	if err := end.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	d, err := runtime.Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if d < nap {
		t.Fatalf("elapsed %v, want at least the %v the stream slept", d, nap)
	}
}

func TestElapsedErrors(t *testing.T) {
	impl := registered(t)
	s := newStream(t, dev0)
	timed := newEvent(t, dev0, runtime.EventDefault)
	untimed := newEvent(t, dev0, runtime.EventDisableTiming)
	never := newEvent(t, dev0, runtime.EventDefault)
	pending := newEvent(t, dev0, runtime.EventDefault)
	for _, ev := range []*runtime.Event{timed, untimed} {
		if err := ev.Record(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	block(t, s)
	if err := pending.Record(s); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		start, end any
		want       runtime.Status
		msg        string
	}{
		{"same event", timed.Handle(), timed.Handle(), runtime.StatusSuccess, ""},
		{"disable timing start", untimed.Handle(), timed.Handle(), runtime.StatusInvalidArgument, "created with EventDisableTiming"},
		{"disable timing end", timed.Handle(), untimed.Handle(), runtime.StatusInvalidArgument, "created with EventDisableTiming"},
		{"never recorded", never.Handle(), timed.Handle(), runtime.StatusInvalidArgument, "never recorded"},
		{"not complete", timed.Handle(), pending.Handle(), runtime.StatusNotReady, ""},
		{"foreign handle", 42, timed.Handle(), runtime.StatusInvalidArgument, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := impl.EventElapsed(tc.start, tc.end)
			wantStatus(t, err, tc.want)
			if err == nil && d != 0 {
				t.Fatalf("elapsed from an event to itself = %v", d)
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not say %q", err, tc.msg)
			}
		})
	}
	// Through the runtime wrapper too.
	_, err := runtime.Elapsed(untimed, timed)
	wantStatus(t, err, runtime.StatusInvalidArgument)
}

// StreamWaitEvent orders B after A's recorded work without blocking the
// host.
func TestStreamWaitEvent(t *testing.T) {
	a, b := newStream(t, dev0), newStream(t, dev0)
	onA, onB := newEvent(t, dev0, runtime.EventDisableTiming), newEvent(t, dev0, runtime.EventDefault)
	release := block(t, a)
	if err := onA.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEvent(onA); err != nil { // returns at once although A is blocked
		t.Fatal(err)
	}
	ran := make(chan struct{})
	if err := cpu.Enqueue(b, func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	if err := onB.Record(b); err != nil {
		t.Fatal(err)
	}
	// B cannot pass the wait while A is held; give it every chance to.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	wantStatus(t, onB.Synchronize(ctx), runtime.StatusTimeout)
	select {
	case <-ran:
		t.Fatal("work on B ran before the event it waits for")
	default:
	}
	release()
	if err := onB.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, onA.Query(), runtime.StatusSuccess)
	<-ran
}

func TestWaitOnNeverRecordedEventDoesNotBlock(t *testing.T) {
	s := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	if err := s.WaitEvent(ev); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEventHandleErrors(t *testing.T) {
	impl := registered(t)
	other := cpu.New()
	s := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	dev1 := runtime.Device{Type: runtime.CPU, Index: 1}
	ev1 := newEvent(t, dev1, runtime.EventDefault)
	foreign, err := other.EventCreate(0, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	destroyed, err := impl.EventCreate(0, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := impl.EventDestroy(destroyed); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"record non-event", func() error { return impl.EventRecord("event", s.Handle()) }},
		{"record nil", func() error { return impl.EventRecord(nil, s.Handle()) }},
		{"record on non-stream", func() error { return impl.EventRecord(ev.Handle(), 3) }},
		{"record on another device", func() error { return impl.EventRecord(ev1.Handle(), s.Handle()) }},
		{"record another instance's event", func() error { return impl.EventRecord(foreign, s.Handle()) }},
		{"query destroyed", func() error { return impl.EventQuery(destroyed) }},
		{"record destroyed", func() error { return impl.EventRecord(destroyed, s.Handle()) }},
		{"destroy twice", func() error { return impl.EventDestroy(destroyed) }},
		{"synchronize non-event", func() error { return impl.EventSynchronize(s.Handle()) }},
		{"create on bad device", func() error { _, err := impl.EventCreate(-1, 0); return err }},
		{"create with unknown flag", func() error { _, err := impl.EventCreate(0, 64); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), runtime.StatusInvalidArgument) })
	}
}

func TestEventRecordDoesNotAllocate(t *testing.T) {
	impl := registered(t)
	s := newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDefault)
	eh, sh := ev.Handle(), s.Handle()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := impl.EventRecord(eh, sh); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("EventRecord: %v allocations per call, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		if err := ev.Record(s); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Event.Record: %v allocations per call, want 0", allocs)
	}
	if err := ev.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	allocs = testing.AllocsPerRun(1000, func() { _ = impl.EventQuery(eh) })
	if allocs != 0 {
		t.Fatalf("EventQuery: %v allocations per call, want 0", allocs)
	}
}

// BenchmarkEventRecord measures the profiler's hot path: recording a
// timing event on a stream, through the Impl and through runtime.Event,
// with concurrent ranks each on their own stream, and beside a plain
// buffered channel send as the baseline for handing work to a goroutine.
func BenchmarkEventRecord(b *testing.B) {
	impl := registered(b)
	b.Run("impl", func(b *testing.B) {
		s := newStream(b, dev0)
		ev := newEvent(b, dev0, runtime.EventDefault)
		eh, sh := ev.Handle(), s.Handle()
		b.ReportAllocs()
		for b.Loop() {
			if err := impl.EventRecord(eh, sh); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_ = s.Synchronize(context.Background())
	})
	b.Run("runtime.Event", func(b *testing.B) {
		s := newStream(b, dev0)
		ev := newEvent(b, dev0, runtime.EventDefault)
		b.ReportAllocs()
		for b.Loop() {
			if err := ev.Record(s); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_ = s.Synchronize(context.Background())
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s, err := impl.StreamCreate(0, 0)
			if err != nil {
				b.Error(err)
				return
			}
			defer impl.StreamDestroy(s)
			ev, err := impl.EventCreate(0, runtime.EventDefault)
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if err := impl.EventRecord(ev, s); err != nil {
					b.Error(err)
					return
				}
			}
			_ = impl.StreamSynchronize(s)
		})
	})
	b.Run("baseline-chan", func(b *testing.B) {
		type rec struct {
			ev  *int
			gen uint64
		}
		ch := make(chan rec, 1024)
		done := make(chan struct{})
		go func() {
			for range ch {
			}
			close(done)
		}()
		var x int
		b.ReportAllocs()
		for b.Loop() {
			ch <- rec{&x, 1}
		}
		close(ch)
		<-done
	})
}
