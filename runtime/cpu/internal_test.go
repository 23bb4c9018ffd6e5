package cpu

import (
	"testing"
	"time"
)

// The stream's goroutine exits once a destroyed stream has drained.
func TestDestroyedStreamGoroutineExits(t *testing.T) {
	m := New(WithDevices(1))
	h, err := m.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := h.(*stream)
	gate := make(chan struct{})
	if err := EnqueueHandle(h, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	if err := m.StreamDestroy(h); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		t.Fatal("the goroutine exited before draining its work")
	default:
	}
	close(gate)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine of a destroyed stream did not exit")
	}
	d := &m.devices[0]
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.streams) != 0 {
		t.Fatalf("%d streams still listed on the device", len(d.streams))
	}
}

// The ring grows past its first size and keeps items in order.
func TestQueueGrowsInOrder(t *testing.T) {
	m := New(WithDevices(1), WithQueueDepth(1000))
	h, err := m.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.StreamDestroy(h)
	gate := make(chan struct{})
	if err := EnqueueHandle(h, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	var got []int
	for i := range 900 {
		if err := EnqueueHandle(h, func() { got = append(got, i) }); err != nil {
			t.Fatal(err)
		}
	}
	s := h.(*stream)
	s.mu.Lock()
	size := len(s.ring)
	s.mu.Unlock()
	if size != 1024 {
		t.Fatalf("ring of %d entries holding 900+ items, want 1024", size)
	}
	close(gate)
	if err := m.StreamSynchronize(h); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("item %d ran as number %d", v, i)
		}
	}
	if len(got) != 900 {
		t.Fatalf("%d items ran", len(got))
	}
}
