package profiler

import (
	"context"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

const (
	calibrationTimeout = 10 * time.Second
	// maxCalibrations bounds the points a device keeps; older ranges use
	// the oldest one kept, which is still correct, only less precise.
	maxCalibrations = 16
)

// clockSync places one device's event clock on the host clock through
// calibration points taken over the run. Device elapsed times come as
// float32 milliseconds from some backends (CUDA), whose resolution decays
// with distance from the reference event: a range is measured from the
// newest point taken before it started, so the distance stays short.
type clockSync struct {
	impl   runtime.Impl
	dev    runtime.Device
	stream *runtime.Stream // private and idle, for calibration only
	points []calibration   // ascending by after
	next   time.Duration   // host time of the next recalibration
}

// calibration ties a device event to the host clock: ev completed on the
// device at host time host, and was known complete at host time after.
type calibration struct {
	ev          *runtime.Event
	host, after time.Duration
}

// newClockSync creates the private stream and the first point.
func newClockSync(ctx context.Context, impl runtime.Impl, dev runtime.Device, now func() time.Duration) (*clockSync, error) {
	s, err := runtime.NewStreamWith(impl, dev)
	if err != nil {
		return nil, err
	}
	cs := &clockSync{impl: impl, dev: dev, stream: s}
	if err := cs.add(ctx, now); err != nil {
		cs.close()
		return nil, err
	}
	return cs, nil
}

// add takes a calibration point: it records an event on the idle private
// stream five times and keeps the round with the tightest host bracket,
// placing the event at the bracket's middle. It synchronises that stream
// only, never a rank's.
func (cs *clockSync) add(ctx context.Context, now func() time.Duration) error {
	if err := cs.stream.Synchronize(ctx); err != nil {
		return err
	}
	var best calibration
	var bestSpan time.Duration
	for range 5 {
		ev, err := runtime.NewEventWith(cs.impl, cs.dev, runtime.EventDefault)
		if err != nil {
			return err
		}
		t0 := now()
		if err := ev.Record(cs.stream); err != nil {
			_ = ev.Destroy()
			return err
		}
		if err := ev.Synchronize(ctx); err != nil {
			_ = ev.Destroy()
			return err
		}
		t1 := now()
		if best.ev == nil || t1-t0 < bestSpan {
			if best.ev != nil {
				_ = best.ev.Destroy()
			}
			best, bestSpan = calibration{ev: ev, host: t0 + (t1-t0)/2, after: t1}, t1-t0
		} else {
			_ = ev.Destroy()
		}
	}
	if len(cs.points) == maxCalibrations {
		_ = cs.points[0].ev.Destroy()
		cs.points = append(cs.points[:0], cs.points[1:]...)
	}
	cs.points = append(cs.points, best)
	return nil
}

// pickMargin keeps a range away from a point taken just as it started: a
// device range's start event is recorded a moment before its host start
// time is read.
const pickMargin = time.Millisecond

// pick returns the newest point known complete before hostStart (less a
// margin): an event recorded after that instant cannot complete before the
// point's event, so the elapsed time from it is never negative. Ranges
// older than every point kept use the oldest.
func (cs *clockSync) pick(hostStart time.Duration) *calibration {
	for i := len(cs.points) - 1; i > 0; i-- {
		if cs.points[i].after+pickMargin <= hostStart {
			return &cs.points[i]
		}
	}
	return &cs.points[0]
}

// maybeRecalibrate takes a new point when the interval has passed.
func (cs *clockSync) maybeRecalibrate(every time.Duration, now func() time.Duration) error {
	t := now()
	if every <= 0 || t < cs.next {
		return nil
	}
	cs.next = t + every
	ctx, cancel := context.WithTimeout(context.Background(), calibrationTimeout)
	defer cancel()
	return cs.add(ctx, now)
}

func (cs *clockSync) close() {
	for _, c := range cs.points {
		_ = c.ev.Destroy()
	}
	cs.points = nil
	_ = cs.stream.Destroy()
}

// hostTime maps a completed device event onto the host clock.
func (c *calibration) hostTime(ev *runtime.Event) (time.Duration, error) {
	d, err := runtime.Elapsed(c.ev, ev)
	if err != nil {
		return 0, err
	}
	return c.host + d, nil
}
