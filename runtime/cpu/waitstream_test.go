package cpu_test

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// marker enqueues on s a host function that closes the returned channel
// when the stream reaches it.
func marker(t *testing.T, s *runtime.Stream) <-chan struct{} {
	t.Helper()
	ran := make(chan struct{})
	if err := cpu.Enqueue(s, func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	return ran
}

// heldBack fails the test if ran is closed within a moment: the stream
// that closes it must still be waiting. (A slow machine can only make this
// pass where it should not, never fail where it should pass.)
func heldBack(t *testing.T, ran <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ran:
		t.Errorf("%s ran before the work it waits for", what)
	case <-time.After(20 * time.Millisecond):
	}
}

// reaches fails the test unless ran is closed within a deadline.
func reaches(t *testing.T, ran <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not run within 5s", what)
	}
}

// WaitStream waits for the event another caller recorded last on the other
// stream when it still marks that stream's point, and records none of its
// own; the wait holds s back all the same.
func TestWaitStreamWaitsForTheLatestEvent(t *testing.T) {
	s, o := newStream(t, dev0), newStream(t, dev0)
	theirs := newEvent(t, dev0, 0) // a profiler's, say: timing
	spare := newEvent(t, dev0, runtime.EventDisableTiming)
	release := block(t, o)
	if err := theirs.Record(o); err != nil {
		t.Fatal(err)
	}
	waitStreamHeld(t, s, o, spare, false, release)
}

// waitStreamHeld has s WaitStream for o, which release holds, and checks
// whether it recorded spare (one operation more on o) as wanted, and that
// work enqueued on s after it runs only once o is released.
func waitStreamHeld(t *testing.T, s, o *runtime.Stream, spare *runtime.Event, want bool, release func()) {
	t.Helper()
	ops := o.Ops()
	recorded, err := s.WaitStream(o, spare)
	if err != nil || recorded != want {
		t.Fatalf("WaitStream: recorded %v, %v; want %v, nil", recorded, err, want)
	}
	wantOps := uint64(0)
	if want {
		wantOps = 1 // the spare's record
	}
	if got := o.Ops() - ops; got != wantOps {
		t.Errorf("WaitStream enqueued %d operations on the other stream, want %d", got, wantOps)
	}
	ran := marker(t, s)
	heldBack(t, ran, "work after WaitStream")
	release()
	reaches(t, ran, "work after WaitStream")
}

// Where the other stream has work, or a wait for a point of a third
// stream, after its latest event, WaitStream records spare and s waits for
// that work too.
func TestWaitStreamRecordsAfterWorkOrWait(t *testing.T) {
	for _, after := range []string{"work", "a wait"} {
		t.Run(after, func(t *testing.T) {
			s, o, x := newStream(t, dev0), newStream(t, dev0), newStream(t, dev0)
			theirs := newEvent(t, dev0, 0)
			spare := newEvent(t, dev0, runtime.EventDisableTiming)
			if err := theirs.Record(o); err != nil {
				t.Fatal(err)
			}
			var release func()
			if after == "work" {
				release = block(t, o)
			} else {
				release = block(t, x)
				onX := newEvent(t, dev0, runtime.EventDisableTiming)
				if err := onX.Record(x); err != nil {
					t.Fatal(err)
				}
				if err := o.WaitEvent(onX); err != nil {
					t.Fatal(err)
				}
			}
			waitStreamHeld(t, s, o, spare, true, release)
		})
	}
}

// The other stream's latest event, recorded since on a third stream or
// destroyed, is not waited for.
func TestWaitStreamLatestEventMovedOrDestroyed(t *testing.T) {
	s, o, x := newStream(t, dev0), newStream(t, dev0), newStream(t, dev0)
	spare := newEvent(t, dev0, runtime.EventDisableTiming)
	release := block(t, x)
	moved := newEvent(t, dev0, 0)
	if err := moved.Record(o); err != nil {
		t.Fatal(err)
	}
	if err := moved.Record(x); err != nil { // x is held: moved is not reached
		t.Fatal(err)
	}
	if recorded, err := s.WaitStream(o, spare); err != nil || !recorded {
		t.Fatalf("WaitStream with the latest event moved to another stream: recorded %v, %v; want true, nil", recorded, err)
	}
	reaches(t, marker(t, s), "work after WaitStream (the held stream's point waited for)")

	gone, err := runtime.NewEvent(dev0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Record(o); err != nil {
		t.Fatal(err)
	}
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	if recorded, err := s.WaitStream(o, spare); err != nil || !recorded {
		t.Fatalf("WaitStream with the latest event destroyed: recorded %v, %v; want true, nil", recorded, err)
	}
	reaches(t, marker(t, s), "work after WaitStream")
	release()
}

// WaitStream's misuse is an error naming it: nil or destroyed streams, and
// no spare where one is needed.
func TestWaitStreamMisuse(t *testing.T) {
	s, o := newStream(t, dev0), newStream(t, dev0)
	spare := newEvent(t, dev0, runtime.EventDisableTiming)
	if _, err := s.WaitStream(nil, spare); runtime.StatusOf(err) != runtime.StatusInvalidArgument {
		t.Errorf("WaitStream(nil, spare): %v, want StatusInvalidArgument", err)
	}
	if _, err := (*runtime.Stream)(nil).WaitStream(o, spare); runtime.StatusOf(err) != runtime.StatusInvalidArgument {
		t.Errorf("nil stream's WaitStream: %v, want StatusInvalidArgument", err)
	}
	if _, err := s.WaitStream(o, nil); runtime.StatusOf(err) != runtime.StatusInvalidArgument {
		t.Errorf("WaitStream(o, nil) with no event recorded on o: %v, want StatusInvalidArgument", err)
	}
	gone, err := runtime.NewStream(dev0)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitStream(gone, spare); runtime.StatusOf(err) != runtime.StatusInvalidArgument {
		t.Errorf("WaitStream on a destroyed stream: %v, want StatusInvalidArgument", err)
	}
}

// An event that its owner records on one stream and then another, on
// another goroutine, is never waited for at the wrong stream's point: a
// stream that WaitStream made follow o never waits for x, which is held
// throughout. (Both loops stay below a stream's queue depth, so that a
// wrong wait fails the test rather than blocking it.)
func TestWaitStreamWhileTheLatestEventMoves(t *testing.T) {
	s, o, x := newStream(t, dev0), newStream(t, dev0), newStream(t, dev0)
	spare := newEvent(t, dev0, runtime.EventDisableTiming)
	moving := newEvent(t, dev0, 0)
	release := block(t, x)
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for range 400 {
			if err := moving.Record(o); err != nil {
				t.Error(err)
				return
			}
			if err := moving.Record(x); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	waits := 0
loop:
	for ; waits < 900; waits++ {
		select {
		case <-moved:
			break loop
		default:
		}
		if _, err := s.WaitStream(o, spare); err != nil {
			t.Fatal(err)
		}
	}
	<-moved
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Synchronize(ctx); err != nil {
		t.Errorf("s after %d WaitStreams for o while o's latest event moved to a held stream: %v", waits, err)
	}
	release()
}
