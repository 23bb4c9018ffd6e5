package profiler

import (
	"context"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

const calibrationTimeout = 10 * time.Second

// calibration ties a device's event clock to the host clock: host is the
// host time at which event ev completed on the device.
type calibration struct {
	ev     *runtime.Event
	stream *runtime.Stream
	host   time.Duration
}

// calibrate records an event on an idle private stream several times and
// keeps the round with the tightest host bracket, placing the event at the
// middle of that bracket. It synchronises, so it runs at setup only.
func calibrate(ctx context.Context, impl runtime.Impl, dev runtime.Device, now func() time.Duration) (*calibration, error) {
	s, err := runtime.NewStreamWith(impl, dev)
	if err != nil {
		return nil, err
	}
	if err := s.Synchronize(ctx); err != nil {
		_ = s.Destroy()
		return nil, err
	}
	var best *calibration
	var bestSpan time.Duration
	for range 5 {
		ev, err := runtime.NewEventWith(impl, dev, runtime.EventDefault)
		if err != nil {
			_ = s.Destroy()
			return nil, err
		}
		t0 := now()
		if err := ev.Record(s); err != nil {
			_ = ev.Destroy()
			_ = s.Destroy()
			return nil, err
		}
		if err := ev.Synchronize(ctx); err != nil {
			_ = ev.Destroy()
			_ = s.Destroy()
			return nil, err
		}
		t1 := now()
		if best == nil || t1-t0 < bestSpan {
			if best != nil {
				_ = best.ev.Destroy()
			}
			best, bestSpan = &calibration{ev: ev, stream: s, host: t0 + (t1-t0)/2}, t1-t0
		} else {
			_ = ev.Destroy()
		}
	}
	return best, nil
}

func (c *calibration) close() {
	_ = c.ev.Destroy()
	_ = c.stream.Destroy()
}

// hostTime maps a completed device event onto the host clock.
func (c *calibration) hostTime(ev *runtime.Event) (time.Duration, error) {
	d, err := runtime.Elapsed(c.ev, ev)
	if err != nil {
		return 0, err
	}
	return c.host + d, nil
}

// resolveLocked turns unresolved device ranges whose end event completed
// into records. The elapsed-time query doubles as the completion check, so
// a resolved range costs the backend two calls. With wait, ranges that are
// still not ready (their events failed) are kept without device times.
func (p *Profiler) resolveLocked(wait bool) {
	kept := p.unresolved[:0]
	for _, u := range p.unresolved {
		rec := u.rec
		err := p.deviceTimesLocked(&rec, u)
		if err != nil && runtime.StatusOf(err) == runtime.StatusNotReady && !wait {
			kept = append(kept, u)
			continue
		}
		if err != nil {
			p.resolveErrs.Add(1)
		}
		finishBandwidth(&rec)
		p.returned[u.owner] = append(p.returned[u.owner], u.start, u.end)
		p.keepLocked(rec)
	}
	clear(p.unresolved[len(kept):])
	p.unresolved = kept
	p.returnEventsLocked()
}

// returnEventsLocked hands resolved events back to their recorders, one
// lock per recorder rather than one per event.
func (p *Profiler) returnEventsLocked() {
	for r, evs := range p.returned {
		r.releaseAll(evs)
		clear(evs)
		p.returned[r] = evs[:0]
	}
}

func (p *Profiler) deviceTimesLocked(rec *Record, u unresolved) error {
	dur, err := runtime.Elapsed(u.start, u.end)
	if err != nil {
		return err
	}
	c, ok := p.calib[rec.Device]
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), calibrationTimeout)
		nc, err := calibrate(ctx, u.impl, rec.Device, p.now)
		cancel()
		if err != nil {
			return err
		}
		p.calib[rec.Device], c = nc, nc
	}
	start, err := c.hostTime(u.start)
	if err != nil {
		return err
	}
	rec.HasDevice, rec.DeviceStart, rec.DeviceEnd = true, start, start+dur
	return nil
}

// finishBandwidth fills a collective's algorithm and bus bandwidth from
// its device time, or its host time where it has none.
func finishBandwidth(rec *Record) {
	if rec.Kind != KindCollective && rec.Kind != KindP2P {
		return
	}
	d := rec.DeviceDuration()
	if !rec.HasDevice {
		d = rec.HostDuration()
	}
	rec.AlgBandwidth = AlgBandwidth(rec.Collective.Bytes, d.Seconds())
	rec.BusBandwidth = rec.AlgBandwidth * rec.Collective.BusFactor
}
