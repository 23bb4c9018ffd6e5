package cuda_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Stream.WaitStream on CUDA: a stream made to follow another through the
// timing event recorded last there (a profiler's, say), with no event of
// its own, waits for the other stream's work all the same; and the event
// may be recorded again at once without moving the wait.
func TestWaitStreamWaitsForTheLatestEvent(t *testing.T) {
	gpu(t)
	d := dev(0)
	s, o := newStream(t, d), newStream(t, d)
	theirs, err := runtime.NewEvent(d, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Destroy()
	spare, err := runtime.NewEvent(d, runtime.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Destroy()
	after, err := runtime.NewEvent(d, runtime.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Destroy()

	const held = 200 * time.Millisecond
	if err := runtime.Sleep(o, held); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Record(o); err != nil {
		t.Fatal(err)
	}
	ops := o.Ops()
	recorded, err := s.WaitStream(o, spare)
	if err != nil || recorded {
		t.Fatalf("WaitStream: recorded %v, %v; want false, nil (the latest event waited for)", recorded, err)
	}
	if o.Ops() != ops {
		t.Errorf("WaitStream enqueued %d operations on the other stream, want none", o.Ops()-ops)
	}
	// Recorded again at once (as a profiler reuses its events): the wait
	// is for the record made before it.
	if err := theirs.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := after.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := after.Query(); !errors.Is(err, runtime.StatusNotReady) {
		t.Fatalf("s's event right after WaitStream for a stream sleeping %v: Query %v, want not ready", held, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.Query(); err != nil {
		t.Errorf("the other stream after s, which waited for it, finished: %v, want idle", err)
	}
}
