package runtime_test

import (
	"errors"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// TestSleep: a sleep holds the stream for at least its duration between
// two events, counts as one enqueue, and is refused where it cannot be
// honoured. Only a lower bound is checked: a loaded host may stretch the
// sleep, never shorten it.
func TestSleep(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	start, _ := runtime.NewEvent(dev, runtime.EventDefault)
	end, _ := runtime.NewEvent(dev, runtime.EventDefault)
	defer start.Destroy()
	defer end.Destroy()
	const nap = 30 * time.Millisecond
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	before := s.Ops()
	if err := runtime.Sleep(s, nap); err != nil {
		t.Fatal(err)
	}
	if got := s.Ops() - before; got != 1 {
		t.Errorf("a sleep counted %d enqueues, want 1", got)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	el, err := runtime.Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if el < nap {
		t.Errorf("events around a %v sleep are %v apart", nap, el)
	}

	before = s.Ops()
	if err := runtime.Sleep(s, 0); err != nil || s.Ops() != before {
		t.Errorf("a sleep of 0: %v, %d enqueues; want nil and none", err, s.Ops()-before)
	}
	if err := runtime.Sleep(s, -time.Millisecond); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("a negative sleep: %v, want InvalidArgument", err)
	}
	host, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := runtime.NewStreamWith(plainBackend{host}, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Destroy()
	if err := runtime.Sleep(ps, time.Millisecond); !errors.Is(err, runtime.StatusNotSupported) {
		t.Errorf("a backend without Sleeper: %v, want NotSupported", err)
	}
	// The backend checks its own handle, as for any other operation.
	sl := host.(runtime.Sleeper)
	if err := sl.Sleep("not a stream", time.Millisecond); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("a foreign handle: %v, want InvalidArgument", err)
	}
	gone, _ := runtime.NewStream(dev)
	gone.Destroy()
	if err := runtime.Sleep(gone, time.Millisecond); err == nil {
		t.Error("a sleep on a destroyed stream succeeded")
	}
}
