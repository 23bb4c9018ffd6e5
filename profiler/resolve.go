package profiler

import (
	"context"

	"github.com/trainscope/trainscope/runtime"
)

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
	dur, err := runtime.Elapsed(u.start.Event, u.end.Event)
	if err != nil {
		return err
	}
	cs, ok := p.calib[rec.Device]
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), calibrationTimeout)
		ncs, err := newClockSync(ctx, u.impl, rec.Device, p.now)
		cancel()
		if err != nil {
			return err
		}
		ncs.next = p.now() + p.cfg.recalibrate
		p.calib[rec.Device], cs = ncs, ncs
	}
	// The calibration point must precede the start event on the device:
	// pick by the time that event was recorded.
	at := rec.HostStart
	if u.startAt != 0 {
		at = u.startAt
	}
	start, err := cs.pick(at).hostTime(u.start.Event)
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
