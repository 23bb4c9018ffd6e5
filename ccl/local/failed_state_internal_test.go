package local

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// held counts what a communicator keeps for operations in flight: host
// rounds, messages in mailboxes, shared rounds and shared messages.
func held(w *world) (rounds, msgs, shared, sharedMsgs int) {
	w.mu.Lock()
	rounds, shared, sharedMsgs = len(w.rounds), len(w.shared), len(w.msgs)
	w.mu.Unlock()
	w.boxesMu.Lock()
	defer w.boxesMu.Unlock()
	for _, m := range w.boxes {
		m.mu.Lock()
		msgs += len(m.msgs)
		m.mu.Unlock()
	}
	return rounds, msgs, shared, sharedMsgs
}

// A failed communicator runs nothing more, so it lets go of what its
// pending operations held: the copies of messages never received and the
// rounds some ranks never reached. A caller that keeps the communicator
// (to read GetAsyncError, say) must not keep those too.
func TestFailureReleasesPendingState(t *testing.T) {
	const size = 1 << 16
	dt := runtime.Float32
	sync := func(t *testing.T, s *runtime.Stream) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, shared := range []bool{false, true} {
		name := "host"
		if shared {
			name = "shared"
		}
		t.Run(name, func(t *testing.T) {
			b := New(WithTimeout(time.Minute))
			devs := []runtime.Device{{Type: runtime.CPU, Index: 0}, {Type: runtime.CPU, Index: 1}, {Type: runtime.CPU, Index: 2}}
			if shared {
				b = NewShared(runtime.CPU, WithTimeout(time.Minute))
			}
			comms, err := b.CommInitAll(devs)
			if err != nil {
				t.Fatal(err)
			}
			s, err := runtime.NewStream(devs[0])
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			buf, err := runtime.Malloc(devs[0], size*4)
			if err != nil {
				t.Fatal(err)
			}
			defer runtime.Free(buf)
			c0 := comms[0].(*comm)
			if shared {
				// Inside a group the calls are posted at GroupEnd; the
				// group returns once the abort fails the communicator.
				done := make(chan error, 1)
				go func() {
					done <- ccl.Group(b, func() error {
						if err := b.Send(buf, size, dt, 1, comms[0], s); err != nil {
							return err
						}
						return b.AllReduce(buf, buf, size, dt, ccl.Sum, comms[0], s)
					})
				}()
				deadline := time.Now().Add(10 * time.Second)
				for {
					_, _, r, m := held(c0.w)
					if r == 1 && m == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the group did not post: %d rounds, %d messages", r, m)
					}
					time.Sleep(time.Millisecond)
				}
				if err := b.CommAbort(comms[2]); err != nil {
					t.Fatal(err)
				}
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the group still waits 10 s after the abort")
				}
			} else {
				if err := b.Send(buf, size, dt, 1, comms[0], s); err != nil {
					t.Fatal(err)
				}
				sync(t, s) // eager: the message is in the mailbox
				if err := b.AllReduce(buf, buf, size, dt, ccl.Sum, comms[0], s); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					r, m, _, _ := held(c0.w)
					if r == 1 && m == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("not pending: %d rounds, %d messages", r, m)
					}
					time.Sleep(time.Millisecond)
				}
				if err := b.CommAbort(comms[2]); err != nil {
					t.Fatal(err)
				}
				sync(t, s)
			}
			if err := b.GetAsyncError(comms[0]); err == nil {
				t.Fatal("no failure after the abort")
			}
			if r, m, sr, sm := held(c0.w); r+m+sr+sm != 0 {
				t.Fatalf("the failed communicator still holds %d rounds, %d messages, %d shared rounds, %d shared messages", r, m, sr, sm)
			}
			for _, c := range comms[:2] {
				_ = b.CommAbort(c)
			}
		})
	}
}
