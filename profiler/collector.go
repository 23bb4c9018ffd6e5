package profiler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// The collector: recorder → ring → collector → records → sinks.
//
// Each Recorder publishes completed ranges into its own single-producer
// rings (recorder.go, ring.go). The collector — the background loop below,
// or whoever calls Snapshot, Flush, Reset or Close — drains every ring under
// the profiler's lock, turns host ranges into Records at once and parks
// device ranges in the unresolved list until their end event completes,
// then keeps each finished Record in the bounded store and hands the
// pass's records to every sink (deliverLocked). A recorder whose ring is
// half full wakes the loop (Profiler.wake) rather than wait for its timer.

type unresolved struct {
	rec        Record
	owner      *Recorder
	impl       runtime.Impl
	start, end *pooledEvent
	// The other streams' events the range's boundaries are the later of
	// (extra.startAlso, extra.endAlso); nil where none.
	startAlso, endAlso *pooledEvent
	startAt            time.Duration // host time of a shared start event's record; 0 for the range's own
	stream             *runtime.Stream
	// A range timed from the work trace (WithWorkTrace) has no events:
	// the span of the work placed in it so far.
	traced           bool
	hasWork          bool
	devStart, devEnd time.Duration
}

func (p *Profiler) loop() {
	defer close(p.closed)
	t := time.NewTicker(p.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick: // a recorder's ring is half full, or was full
		case <-t.C:
		}
		// A Flush, Calibrate or Close polling for the lock (lockBy) goes
		// first: a pass begun now could keep it out for good.
		for p.lockWaiters.Load() > 0 {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
		p.mu.Lock()
		select {
		case <-p.stop:
			// Close has begun: it makes the last pass itself.
			p.unlock()
			return
		default:
		}
		p.collectLocked()
		p.unlock()
		p.recalibrate(true)
	}
}

// collectLocked gathers every recorder's completed ranges and resolves the
// device times that are ready, without waiting for any device.
func (p *Profiler) collectLocked() {
	if p.trace != nil {
		p.trace.floor = p.traceFloor()
	}
	for _, r := range p.recorders {
		q, xq := r.pending, r.extras
		h, t := q.head.Load(), q.tail.Load()
		// After the tail: a drop before any range published up to it is
		// noted by now, and goes to the sinks before that range does.
		if d := r.dropped.Load(); d != r.droppedSeen {
			r.droppedSeen = d
			p.lost = r.takeLost(p.lost)
		}
		// The tag table after the tail: a range published by then was
		// tagged from this table or an older one (SetTag stores the
		// table before the index), never a newer one.
		tags := *p.tags.Load()
		xh := xq.head.Load()
		for i := h; i < t; i++ {
			pd := q.at(i)
			var x *extra
			if pd.hasExtra() {
				x = xq.at(xh)
				xh++
				p.eventsRecorded += uint64(x.recorded)
				p.eventsShared += uint64(x.shared)
			}
			if x != nil && x.traced {
				u := unresolved{owner: r, impl: x.stream.Impl(), traced: true, stream: x.stream}
				r.fill(&u.rec, pd, x, tags)
				p.unresolved = append(p.unresolved, u)
				p.trace.pending++
				continue
			}
			if x != nil && x.end != nil {
				u := unresolved{owner: r, impl: x.stream.Impl(), start: x.start, end: x.end, startAlso: x.startAlso, endAlso: x.endAlso, startAt: x.startAt, stream: x.stream}
				r.fill(&u.rec, pd, x, tags)
				p.unresolved = append(p.unresolved, u)
				continue
			}
			p.collected.Add(1)
			if len(p.sinks) > 0 {
				var rec Record
				r.fill(&rec, pd, x, tags)
				finishBandwidth(&rec)
				p.keepLocked(rec)
				continue
			}
			if p.records.len() >= p.cfg.maxRecords {
				p.storeDrops.Add(1)
				continue
			}
			// Built in place: a Record is large, and this loop must keep
			// up with every rank's recording.
			rec := p.records.add()
			r.fill(rec, pd, x, tags)
			finishBandwidth(rec)
		}
		xq.head.Store(xh)
		q.head.Store(t)
	}
	p.collectTraceLocked(false)
	p.boundTracedLocked()
	p.resolveLocked(false)
	p.deliverLocked()
}

// recalibrate takes a new calibration point for each device whose
// interval has passed. It runs in the collector's goroutine without the
// collector's lock, which it takes only to add the point: the device calls
// a point needs (an event recorded and waited for on the clock sync's
// private stream) can block in the driver behind another thread's call
// (CUDA's cudaEventRecord waits while another thread is in a cudaFree
// that waits for a kernel that does not end), and a Flush, AbandonPending
// or Close must not wait behind them. It gives way to any of those
// waiting for the lock, and to Close. collector says the background
// collector calls it (Profiler.measuring).
func (p *Profiler) recalibrate(collector bool) {
	if p.cfg.recalibrate <= 0 {
		return
	}
	p.mu.Lock()
	if p.done {
		p.unlock()
		return
	}
	now := p.now()
	var due []*clockSync
	for _, cs := range p.calib {
		if now >= cs.next {
			cs.next = now + p.cfg.recalibrate
			due = append(due, cs)
		}
	}
	p.unlock()
	for _, cs := range due {
		if p.lockWaiters.Load() > 0 || p.closing() {
			return
		}
		if collector {
			p.measuring.Store(true)
		}
		c, ok, err := cs.measure(p.now)
		if collector {
			p.measuring.Store(false)
		}
		if err != nil {
			p.resolveErrs.Add(1)
			p.backendError(err)
		}
		if !ok {
			continue
		}
		p.mu.Lock()
		var old *runtime.Event
		if !p.done {
			old, c.ev = cs.insert(c), nil
		}
		p.unlock()
		// Back to the spares: the point pushed out, or the new one if
		// Close came first.
		cs.putSpare(old, c.ev)
	}
}

// keepLocked stores a finished record and queues it for the sinks. Sinks
// see every record, also those beyond the store's bound. With a bound of
// 0 and a sink, the store keeps nothing and nothing counts as overflow:
// the sinks are where records go.
func (p *Profiler) keepLocked(rec Record) {
	if len(p.sinks) > 0 {
		p.batch = append(p.batch, rec)
		if len(p.batch) == maxKeptBatch {
			// A pass this large (an Ingest, a collector that fell
			// behind a thousand ranks) goes to the sinks in parts: the
			// batch never outgrows the room kept for it.
			p.deliverLocked()
		}
		if p.cfg.maxRecords == 0 {
			return
		}
	}
	if p.records.len() >= p.cfg.maxRecords {
		p.storeDrops.Add(1)
		return
	}
	*p.records.add() = rec
}

// resolveLocked turns unresolved device ranges whose end event completed
// into records. The elapsed-time query doubles as the completion check, so
// a resolved range costs the backend two calls, or one where its start is
// the end of a range resolved before it in the pass (placeStart). With wait, ranges that are
// still not ready (their events failed) are kept without device times.
//
// Without wait, a pass asks at most once per recorder and stream about
// work not yet done: a recorder publishes its ranges in the order it
// recorded their end events, and a stream completes in that order, so
// once one end is not ready neither is any later one of the same
// recorder on the same stream. A host running a step ahead of the device
// leaves hundreds of ranges waiting; asking each of them every pass would
// be hundreds of driver calls, each taking the driver's locks that the
// ranks' launches need.
func (p *Profiler) resolveLocked(wait bool) {
	kept := p.unresolved[:0]
	for _, u := range p.unresolved {
		rec := u.rec
		if u.traced {
			if !p.tracedReady(&u, wait) {
				kept = append(kept, u)
				continue
			}
			p.trace.pending--
			if !u.hasWork {
				p.trace.empty++
			}
			tracedTimes(&rec, &u)
			finishBandwidth(&rec)
			p.collected.Add(1)
			p.keepLocked(rec)
			continue
		}
		key := waitingStream{u.owner, u.stream}
		if !wait && p.waiting[key] {
			kept = append(kept, u)
			continue
		}
		err := p.deviceTimesLocked(&rec, u)
		if err != nil && runtime.StatusOf(err) == runtime.StatusNotReady && !wait {
			p.waiting[key] = true
			kept = append(kept, u)
			continue
		}
		if err != nil && !errors.Is(err, ErrClosed) {
			p.resolveErrs.Add(1)
			p.backendError(err)
		}
		finishBandwidth(&rec)
		p.returned[u.owner] = u.events(p.returned[u.owner])
		p.collected.Add(1)
		p.keepLocked(rec)
	}
	clear(p.unresolved[len(kept):])
	p.unresolved = kept
	clear(p.waiting)
	// Before the events go back: one recorded again would mark a new
	// point.
	clear(p.placed)
	p.returnEventsLocked()
}

// waitingStream is one recorder's device ranges on one stream, whose
// completion resolveLocked checks in order.
type waitingStream struct {
	owner  *Recorder
	stream *runtime.Stream
}

// abandonLocked gives up on the device work of every device range still
// pending after a last try to resolve it: each goes to the sinks (and the
// store) with its host times only, marked DeviceUnfinished, and counts in
// Stats.Abandoned. Their events do not go back to the recorders' pools:
// the device has not reached them, so one recorded again for a later
// range could complete when the stuck work does and time that range
// wrong. They stay out of the pool for good, two events of WithEventPool
// at most per range (four where its boundaries shared another stream's
// events, which later ranges may hold too). It returns how many ranges it
// abandoned. Its callers collect first, which tries each pending range
// once more.
func (p *Profiler) abandonLocked() int {
	n := len(p.unresolved)
	for _, u := range p.unresolved {
		rec := u.rec
		// No bandwidths: the transfer did not finish, and the host time
		// (an enqueue) says nothing of how fast it would have been.
		rec.HasDevice, rec.DeviceUnfinished = false, true
		p.collected.Add(1)
		p.abandoned.Add(1)
		p.keepLocked(rec)
	}
	clear(p.unresolved)
	p.unresolved = p.unresolved[:0]
	if p.trace != nil {
		p.trace.pending = 0
	}
	p.deliverLocked()
	return n
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

// events appends the range's events to evs.
func (u *unresolved) events(evs []*pooledEvent) []*pooledEvent {
	evs = append(evs, u.start, u.end)
	if u.startAlso != nil {
		evs = append(evs, u.startAlso)
	}
	if u.endAlso != nil {
		evs = append(evs, u.endAlso)
	}
	return evs
}

func (p *Profiler) deviceTimesLocked(rec *Record, u unresolved) error {
	dur, err := runtime.Elapsed(u.start.Event, u.end.Event)
	if err != nil {
		return err
	}
	if u.endAlso != nil {
		// Both ends must have completed before the range is resolved.
		if err := u.endAlso.Query(); err != nil {
			return err
		}
	}
	if p.done {
		// Close released the calibrations: the range keeps its host
		// times only.
		return ErrClosed
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
	point := cs.pick(at)
	start, err := p.placeStart(u.start, point)
	if err != nil {
		return err
	}
	end := start + dur
	p.placed[u.end] = placement{point.ev, end}
	// A boundary shared with another stream's point is the later of the
	// two (Recorder.share).
	if u.startAlso != nil {
		also, err := point.hostTime(u.startAlso.Event)
		if err != nil {
			return err
		}
		start = max(start, also)
	}
	if u.endAlso != nil {
		also, err := point.hostTime(u.endAlso.Event)
		if err != nil {
			return err
		}
		end = max(end, also)
	}
	end = max(end, start)
	if u.startAt != 0 && start < rec.HostStart {
		// A shared start the device reached before the range began:
		// the stream was idle in between, and none of the range's work
		// was issued before its host start (Recorder.share).
		start = rec.HostStart
		end = max(end, start)
	}
	rec.HasDevice, rec.DeviceStart, rec.DeviceEnd = true, start, end
	return nil
}

// placement is where the device reached an event, on the host clock
// through the calibration point whose event is point.
type placement struct {
	point *runtime.Event
	at    time.Duration
}

// placeStart places a range's start event on the host clock through
// point. A start shared with the end of a range resolved earlier in the
// pass (Recorder.share: adjacent ranges of a stream) is where that range
// placed its end, the same event's point, which costs the backend no
// call; the resolve pass then asks one elapsed time per range rather
// than two.
func (p *Profiler) placeStart(ev *pooledEvent, point *calibration) (time.Duration, error) {
	if pl, ok := p.placed[ev]; ok && pl.point == point.ev {
		return pl.at, nil
	}
	return point.hostTime(ev.Event)
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

// deliverLocked hands the pass's records to every sink: in registration
// order, or (WithConcurrentSinks) to all at once, the first on this
// goroutine, returning when every sink has consumed them.
func (p *Profiler) deliverLocked() {
	if len(p.lost) > 0 {
		p.deliverLostLocked()
	}
	if len(p.batch) == 0 {
		return
	}
	if p.cfg.concurrent && len(p.sinks) > 1 {
		batch := p.batch
		var wg sync.WaitGroup
		ok := make([]bool, len(p.sinks))
		for i, s := range p.sinks[1:] {
			wg.Go(func() { ok[i+1] = p.consume(s, batch) })
		}
		ok[0] = p.consume(p.sinks[0], batch)
		wg.Wait()
		kept := p.sinks[:0]
		for i, s := range p.sinks {
			if ok[i] {
				kept = append(kept, s)
			}
		}
		clear(p.sinks[len(kept):])
		p.sinks = kept
	} else {
		for i := 0; i < len(p.sinks); {
			if p.consume(p.sinks[i], p.batch) {
				i++
				continue
			}
			p.sinks = slices.Delete(p.sinks, i, i+1)
		}
	}
	clear(p.batch)
	p.batch = p.batch[:0]
}

// deliverLostLocked tells the sinks that implement LostSink of the drops
// noted in this pass, before its records.
func (p *Profiler) deliverLostLocked() {
	for i := 0; i < len(p.sinks); {
		ls, ok := p.sinks[i].(LostSink)
		if !ok || p.consumeLost(ls, p.lost) {
			i++
			continue
		}
		p.sinks = slices.Delete(p.sinks, i, i+1)
	}
	clear(p.lost)
	p.lost = p.lost[:0]
}

// consumeLost hands lost to s, as consume hands a batch.
func (p *Profiler) consumeLost(s LostSink, lost []Lost) bool {
	return p.guarded(s, "ConsumeLost", func() { s.ConsumeLost(lost) })
}

// maxKeptBatch is the most records (about 300 bytes each) the collector
// hands its sinks at once: a larger pass goes in parts (keepLocked), so
// the batch's room, kept between passes, stays within about 10 MB.
const maxKeptBatch = 1 << 15

// consume hands batch to s. A sink that panics is a broken exporter, not
// a reason to end the training run or to deliver the batch again: the
// panic is kept (Stats.SinkFailures, SinkError) and consume reports false,
// and the caller drops the sink.
func (p *Profiler) consume(s Sink, batch []Record) bool {
	return p.guarded(s, "Consume", func() { s.Consume(batch) })
}

// guarded runs call, sink s's method, and reports false, the panic kept,
// where it panicked.
func (p *Profiler) guarded(s Sink, method string, call func()) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			p.sinkFailures.Add(1)
			err := fmt.Errorf("profiler: sink %T panicked in %s and was removed: %v", s, method, v)
			p.sinkErr.CompareAndSwap(nil, &err)
			ok = false
		}
	}()
	call()
	return true
}
