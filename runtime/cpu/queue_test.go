package cpu

import (
	"math"
	"testing"
	"time"
)

// A queue depth too large to round up to a power of two (math.MaxInt, a
// natural way to ask for "unbounded") still makes streams: rounding it up
// overflowed and StreamCreate spun forever.
func TestHugeQueueDepth(t *testing.T) {
	for _, depth := range []int{math.MaxInt, math.MaxInt/2 + 2} {
		m := New(WithDevices(1), WithQueueDepth(depth))
		made := make(chan any, 1)
		go func() {
			h, err := m.StreamCreate(0, 0)
			if err != nil {
				t.Error(err)
			}
			made <- h
		}()
		var h any
		select {
		case h = <-made:
		case <-time.After(10 * time.Second):
			t.Fatalf("StreamCreate with queue depth %d did not return", depth)
		}
		if h == nil {
			continue
		}
		ran := 0
		for range 3 * initialQueue { // past the ring's first size
			if err := EnqueueHandle(h, func() { ran++ }); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.StreamSynchronize(h); err != nil {
			t.Fatal(err)
		}
		if ran != 3*initialQueue {
			t.Fatalf("%d of %d items ran", ran, 3*initialQueue)
		}
		if err := m.StreamDestroy(h); err != nil {
			t.Fatal(err)
		}
	}
}
