package local

import (
	"testing"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// An abort or destroy from another goroutine (a watchdog's) while a round
// holds the endpoint's scratch must not free it under the round: the
// executor may still be enqueueing writes into it and the peers copies
// out of it. The round frees it when it lets go.
func TestScratchOutlivesAbortWhileHeld(t *testing.T) {
	for _, retire := range []struct {
		name string
		call func(*Backend, ccl.Comm) error
	}{
		{"abort", (*Backend).CommAbort},
		{"destroy", (*Backend).CommDestroy},
	} {
		t.Run(retire.name, func(t *testing.T) {
			b := NewShared(runtime.CPU)
			dev := runtime.Device{Type: runtime.CPU}
			comms, err := b.CommInitAll([]runtime.Device{dev, dev})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms[1:] {
					_ = b.CommAbort(c)
				}
			}()
			s, err := runtime.NewStream(dev)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			c := comms[0].(*comm)
			acc, private, err := c.scratch(64, s)
			if err != nil || private {
				t.Fatalf("scratch: private %v, %v", private, err)
			}
			if err := retire.call(b, comms[0]); err != nil {
				t.Fatal(err)
			}
			if err := runtime.Memset(acc, 1, s); err != nil {
				t.Fatalf("the held scratch was freed by %s: %v", retire.name, err)
			}
			if err := c.releaseScratch(&sharedRound{acc: acc}, s); err != nil {
				t.Fatal(err)
			}
			if err := runtime.Memset(acc, 1, s); err == nil {
				t.Fatalf("the scratch of a retired communicator is still allocated after its round let go")
			}
		})
	}
}

// Without a round holding it, the scratch goes at once.
func TestScratchFreedByAbortWhenIdle(t *testing.T) {
	b := NewShared(runtime.CPU)
	dev := runtime.Device{Type: runtime.CPU}
	comms, err := b.CommInitAll([]runtime.Device{dev, dev})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.CommAbort(comms[1]) }()
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	c := comms[0].(*comm)
	acc, _, err := c.scratch(64, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.releaseScratch(&sharedRound{acc: acc}, s); err != nil {
		t.Fatal(err)
	}
	if err := b.CommAbort(comms[0]); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Memset(acc, 1, s); err == nil {
		t.Fatal("an idle scratch outlived the abort")
	}
}
