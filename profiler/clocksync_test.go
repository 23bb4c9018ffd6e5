package profiler

import (
	"context"
	"sync/atomic"
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

// countingImpl is the cpu backend counting the events created; with
// stuck set, every event query says the device has not got there yet (a
// device that does not get through its work, which the cpu backend cannot
// be made into on demand).
type countingImpl struct {
	*cpu.Impl
	created atomic.Int64
	stuck   atomic.Bool
}

func (c *countingImpl) EventCreate(device int, flags runtime.EventFlag) (any, error) {
	c.created.Add(1)
	return c.Impl.EventCreate(device, flags)
}

func (c *countingImpl) EventQuery(ev any) error {
	if c.stuck.Load() {
		return runtime.Errorf("EventQuery", runtime.StatusNotReady, "held")
	}
	return c.Impl.EventQuery(ev)
}

// countingClockSync returns a clock sync of a cpu device through a
// countingImpl, its first point taken, closed at cleanup, and its clock.
func countingClockSync(t *testing.T) (*countingImpl, *clockSync, func() time.Duration) {
	t.Helper()
	impl := &countingImpl{Impl: cpu.New()}
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) }
	cs, err := newClockSync(context.Background(), impl, runtime.Device{Type: runtime.CPU, Index: 2}, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.close)
	return impl, cs, now
}

// TestClockSyncCreatesNoEventAfterTheFirstPoint: every event a clock sync
// uses is created with its first point, so the collector, which takes the
// later ones holding its lock, never waits in an event's creation (CUDA's
// blocked behind another thread's copy queued after a kernel that did
// not end). The points kept hold distinct events all along.
func TestClockSyncCreatesNoEventAfterTheFirstPoint(t *testing.T) {
	impl, cs, now := countingClockSync(t)
	first := impl.created.Load()
	for i := range 2*maxCalibrations + 3 {
		if err := cs.add(context.Background(), now); err != nil {
			t.Fatal(err)
		}
		seen := map[any]bool{}
		for _, p := range cs.points {
			if seen[p.ev.Handle()] {
				t.Fatalf("after point %d, two points share one event", i+2)
			}
			seen[p.ev.Handle()] = true
		}
	}
	if n := impl.created.Load() - first; n != 0 {
		t.Errorf("%d events created after the first point, want none", n)
	}
	if len(cs.points) != maxCalibrations {
		t.Errorf("%d points kept, want %d", len(cs.points), maxCalibrations)
	}
}

// TestRecalibrationSkipsAStuckDevice: on a device whose events do not
// complete, a recalibration gives up within its short bound, reports no
// error (the points kept stay right), keeps its points and creates no
// event; once the device gets through its work, the next one takes a
// point again. (The event left recorded on the private stream is
// re-recorded then.)
func TestRecalibrationSkipsAStuckDevice(t *testing.T) {
	impl, cs, now := countingClockSync(t)
	created := impl.created.Load()
	impl.stuck.Store(true)
	start := time.Now()
	if _, ok, err := cs.measure(now); ok || err != nil {
		t.Errorf("measuring on a stuck device: took a point %v, error %v; want it skipped without an error", ok, err)
	}
	if took := time.Since(start); took < recalibrationTimeout || took > calibrationTimeout {
		t.Errorf("measuring on a stuck device took %v, want its bound %v (not the first point's %v)", took, recalibrationTimeout, calibrationTimeout)
	}
	impl.stuck.Store(false)
	c, ok, err := cs.measure(now)
	if !ok || err != nil {
		t.Fatalf("measuring once the device recovered: took a point %v, error %v", ok, err)
	}
	cs.putSpare(cs.insert(c))
	if len(cs.points) != 2 {
		t.Errorf("%d points after the device recovered, want 2", len(cs.points))
	}
	if n := impl.created.Load() - created; n != 0 {
		t.Errorf("%d events created by recalibrations, want none", n)
	}
}
