package profiler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

const (
	calibrationTimeout = 10 * time.Second
	// recalibrationTimeout bounds a later point's wait (the collector's,
	// outside its lock): an event on the idle private stream completes
	// within microseconds, so one that has not within this is on a device
	// that is not getting through its work, and the point is skipped (the
	// ones kept stay correct).
	recalibrationTimeout = 250 * time.Millisecond
	// maxCalibrations bounds the points a device keeps; older ranges use
	// the oldest one kept, which is still correct, only less precise.
	maxCalibrations = 16
)

// clockSync places one device's event clock on the host clock through
// calibration points taken over the run. Device elapsed times come as
// float32 milliseconds from some backends (CUDA), whose resolution decays
// with distance from the reference event: a range is measured from the
// newest point taken before it started, so the distance stays short.
//
// points and next belong to the profiler's lock. The device calls that
// take a point run outside it, under mu (Profiler.recalibrate).
type clockSync struct {
	impl   runtime.Impl
	dev    runtime.Device
	points []calibration // ascending by after
	next   time.Duration // host time of the next recalibration

	mu     sync.Mutex
	stream *runtime.Stream // private and idle, for calibration only
	// spare holds the events a point is taken with, all created with the
	// first point: creating one later can block in the driver behind
	// another thread's call (CUDA's cudaEventCreate waits while another
	// thread copies into pageable memory behind a kernel that has not
	// ended).
	spare  []*runtime.Event
	closed bool
}

// clockEvents is how many events a clockSync uses: one per point kept and
// two to take the next point with (the best round's, and the next
// round's).
const clockEvents = maxCalibrations + 2

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
	for range clockEvents {
		ev, err := runtime.NewEventWith(impl, dev, runtime.EventDefault)
		if err != nil {
			cs.close()
			return nil, err
		}
		cs.spare = append(cs.spare, ev)
	}
	if err := cs.add(ctx, now); err != nil {
		cs.close()
		return nil, err
	}
	return cs, nil
}

// add takes a calibration point and keeps it (see take).
func (cs *clockSync) add(ctx context.Context, now func() time.Duration) error {
	cs.mu.Lock()
	c, err := cs.take(ctx, now)
	cs.mu.Unlock()
	if err != nil {
		return err
	}
	cs.putSpare(cs.insert(c))
	return nil
}

// take measures a calibration point: it records an event on the idle
// private stream five times and keeps the round with the tightest host
// bracket, placing the event at the bracket's middle. It synchronises
// that stream only, never a rank's, and creates no event while the spares
// last. cs.mu must be held.
func (cs *clockSync) take(ctx context.Context, now func() time.Duration) (calibration, error) {
	if cs.closed {
		return calibration{}, fmt.Errorf("clock sync of %s: %w", cs.dev, ErrClosed)
	}
	if err := cs.stream.Synchronize(ctx); err != nil {
		return calibration{}, err
	}
	best, err := cs.event()
	if err != nil {
		return calibration{}, err
	}
	scratch, err := cs.event()
	if err != nil {
		cs.spare = append(cs.spare, best)
		return calibration{}, err
	}
	var host, after, span time.Duration
	for round := range 5 {
		t0 := now()
		err := scratch.Record(cs.stream)
		if err == nil {
			err = scratch.Synchronize(ctx)
		}
		if err != nil {
			cs.spare = append(cs.spare, best, scratch)
			return calibration{}, err
		}
		t1 := now()
		if round == 0 || t1-t0 < span {
			// The round just taken is the best: its event is kept, the
			// old best's is recorded next.
			best, scratch = scratch, best
			host, after, span = t0+(t1-t0)/2, t1, t1-t0
		}
	}
	cs.spare = append(cs.spare, scratch)
	return calibration{ev: best, host: host, after: after}, nil
}

// insert keeps c as the newest point and returns the event of the point
// it pushed out, if any (for putSpare). Under the profiler's lock.
func (cs *clockSync) insert(c calibration) *runtime.Event {
	var old *runtime.Event
	if len(cs.points) == maxCalibrations {
		old = cs.points[0].ev
		cs.points = append(cs.points[:0], cs.points[1:]...)
	}
	cs.points = append(cs.points, c)
	return old
}

// putSpare gives events back to the spares, or destroys them once the
// clock sync is closed; nil ones are skipped.
func (cs *clockSync) putSpare(evs ...*runtime.Event) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, ev := range evs {
		switch {
		case ev == nil:
		case cs.closed:
			_ = ev.Destroy()
		default:
			cs.spare = append(cs.spare, ev)
		}
	}
}

// event takes a spare event, or creates one when none is left. cs.mu must
// be held.
func (cs *clockSync) event() (*runtime.Event, error) {
	if n := len(cs.spare); n > 0 {
		ev := cs.spare[n-1]
		cs.spare = cs.spare[:n-1]
		return ev, nil
	}
	return runtime.NewEventWith(cs.impl, cs.dev, runtime.EventDefault)
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

// measure takes a point for a recalibration, bounded by
// recalibrationTimeout, outside the profiler's lock. ok is false when no
// point was taken; a device that did not get through the private
// stream's event in time is no error: the points kept stay correct, and
// the next recalibration tries again.
func (cs *clockSync) measure(now func() time.Duration) (c calibration, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), recalibrationTimeout)
	defer cancel()
	cs.mu.Lock()
	c, err = cs.take(ctx, now)
	cs.mu.Unlock()
	switch {
	case err == nil:
		return c, true, nil
	case runtime.StatusOf(err) == runtime.StatusTimeout, errors.Is(err, ErrClosed):
		return calibration{}, false, nil
	}
	return calibration{}, false, err
}

// close destroys the points' events, the spares and the private stream.
// The points must be out of use (the profiler closed); it waits for a
// point being measured.
func (cs *clockSync) close() {
	for _, c := range cs.points {
		_ = c.ev.Destroy()
	}
	cs.points = nil
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, ev := range cs.spare {
		_ = ev.Destroy()
	}
	cs.spare, cs.closed = nil, true
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
