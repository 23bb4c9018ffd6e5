package cpu_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// The CPU backend's work trace reports each piece of work a stream ran —
// not its event records or waits — once, in the order it was issued,
// stamped when enqueued and when run; work enqueued before the trace or
// after Stop is not reported.
func TestWorkTraceReportsStreamWork(t *testing.T) {
	impl := cpu.New()
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStreamWith(impl, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Destroy() }()
	if err := cpu.Enqueue(s, func() {}); err != nil { // before the trace
		t.Fatal(err)
	}
	tr, err := runtime.StartWorkTrace(impl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.StartWorkTrace(impl); !errors.Is(err, runtime.StatusAlreadyExists) {
		t.Fatalf("second trace: %v, want StatusAlreadyExists", err)
	}
	ev, err := runtime.NewEventWith(impl, dev, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ev.Destroy() }()
	before := time.Now()
	const n, sleep = 5, 2 * time.Millisecond
	for range n {
		if err := runtime.Sleep(s, sleep); err != nil {
			t.Fatal(err)
		}
		if err := ev.Record(s); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	issuedBy := time.Now()
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []runtime.Work
	if _, err := tr.Collect(false, func(w runtime.Work) { got = append(got, w) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d pieces of work reported, want the %d sleeps", len(got), n)
	}
	for i, w := range got {
		if w.Stream != s.Handle() {
			t.Fatalf("work %d on %v, not the stream", i, w.Stream)
		}
		if w.Issued.Before(before) || w.Issued.After(issuedBy) || w.Start.Before(w.Issued) || w.End.Sub(w.Start) < sleep {
			t.Fatalf("work %d: issued %v start %v end %v", i, w.Issued.Sub(before), w.Start.Sub(before), w.End.Sub(before))
		}
		if i > 0 && (w.Issued.Before(got[i-1].Issued) || w.Start.Before(got[i-1].End)) {
			t.Fatalf("work %d out of order", i)
		}
	}
	if _, err := tr.Collect(true, func(runtime.Work) { t.Fatal("work reported twice") }); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stop(); err == nil {
		t.Fatal("second Stop accepted")
	}
	if _, err := tr.Collect(false, func(runtime.Work) {}); err == nil {
		t.Fatal("Collect after Stop accepted")
	}
	if tr.Dropped() != 0 {
		t.Fatalf("dropped %d", tr.Dropped())
	}
	// A new trace may start once the first stopped, and sees only its own work.
	tr2, err := runtime.StartWorkTrace(impl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr2.Stop() }()
	if _, err := tr2.Collect(false, func(runtime.Work) { t.Fatal("old work in a new trace") }); err != nil {
		t.Fatal(err)
	}
}
