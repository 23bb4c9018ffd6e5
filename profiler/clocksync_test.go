package profiler

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestClockSyncPointsAndPick(t *testing.T) {
	impl := cpu.New()
	dev := runtime.Device{Type: runtime.CPU, Index: 3}
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) }
	cs, err := newClockSync(context.Background(), impl, dev, now)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.close()
	for range maxCalibrations + 5 {
		time.Sleep(2 * time.Millisecond)
		if err := cs.add(context.Background(), now); err != nil {
			t.Fatal(err)
		}
	}
	if len(cs.points) != maxCalibrations {
		t.Fatalf("%d points kept, want %d", len(cs.points), maxCalibrations)
	}
	for i := 1; i < len(cs.points); i++ {
		if cs.points[i].after <= cs.points[i-1].after || cs.points[i].host > cs.points[i].after {
			t.Fatalf("points out of order or placed after they were known complete: %+v", cs.points)
		}
	}
	last := cs.points[len(cs.points)-1]
	if got := cs.pick(last.after + pickMargin); got.ev != last.ev {
		t.Error("a range starting after the newest point did not get it")
	}
	if got := cs.pick(last.after); got.ev == last.ev {
		t.Error("a range starting as the newest point completed got it, within the margin")
	}
	if got := cs.pick(0); got.ev != cs.points[0].ev {
		t.Error("a range older than every point did not get the oldest")
	}

	// A device event recorded now maps onto the host clock within the
	// bracket of its recording, from whichever point pick chooses.
	s, err := runtime.NewStreamWith(impl, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ev, _ := runtime.NewEventWith(impl, dev, runtime.EventDefault)
	defer ev.Destroy()
	t0 := now()
	_ = ev.Record(s)
	_ = ev.Synchronize(context.Background())
	t1 := now()
	at, err := cs.pick(t0).hostTime(ev)
	if err != nil {
		t.Fatal(err)
	}
	if at < t0-time.Millisecond || at > t1+time.Millisecond {
		t.Errorf("event placed at %v, recorded in [%v, %v]", at, t0, t1)
	}
}

func TestCollectorRecalibrates(t *testing.T) {
	p, err := New(WithCollectInterval(0), WithRecalibration(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	dev := runtime.Device{Type: runtime.CPU, Index: 4}
	if _, err := p.NewRecorder(0, dev); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		time.Sleep(2 * time.Millisecond)
		_ = p.Snapshot()
	}
	p.mu.Lock()
	n := len(p.calib[dev].points)
	p.mu.Unlock()
	if n < 3 {
		t.Fatalf("%d calibration points after five collections 2ms apart with a 1ms interval", n)
	}
}
