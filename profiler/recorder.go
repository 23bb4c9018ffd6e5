package profiler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// maxDepth bounds range nesting; deeper Starts are counted as dropped.
const maxDepth = 64

// Recorder records the ranges of one rank. Start, End and the label
// setters belong to the goroutine that owns the recorder (one rank); the
// Profiler gathers completed ranges from any goroutine. The hot path takes
// only this recorder's own lock, once per End, and allocates nothing.
//
// All methods are no-ops on a nil *Recorder, which is how profiling is
// switched off without branches at call sites.
type Recorder struct {
	p      *Profiler
	rank   int
	device runtime.Device

	// Owner-only state.
	stack  [maxDepth]frame
	depth  int
	over   int // Starts beyond maxDepth not yet ended
	nextID uint64
	labels Labels
	step   atomic.Int32     // settable from any goroutine
	cache  []*runtime.Event // events only the owner touches

	// Shared with the Profiler, under mu.
	mu      sync.Mutex
	pending []pending
	colls   []Collective     // collective details of pending ranges
	free    []*runtime.Event // timing events ready for reuse
	events  int              // events this recorder created

	dropped    atomic.Uint64 // records lost to a full buffer or depth
	eventDrops atomic.Uint64 // device ranges recorded host-only for want of events
	unbalanced atomic.Uint64 // End without Start
	recordErrs atomic.Uint64 // event records the backend refused
	peakMemory atomic.Int64

	// Profiler-side state, under Profiler.mu.
	spare      []pending
	spareColls []Collective
}

// frame is an open range. Its pending part is what End copies out; the
// collective part is copied only for collective ranges.
type frame struct {
	pending
	collective Collective
}

// pending is a completed range in compact form, as End appends it; the
// Profiler turns it into a Record off the hot path.
type pending struct {
	id, parent         uint64
	name, tag          string
	labels             Labels
	depth              int32
	kind               Kind
	collIdx            int32 // index into the recorder's collectives, -1 if none
	hostStart, hostEnd time.Duration
	peak               int64
	stream             *runtime.Stream // device ranges only
	start, end         *runtime.Event
}

// Rank returns the rank the recorder was made for.
func (r *Recorder) Rank() int {
	if r == nil {
		return None
	}
	return r.rank
}

// Device returns the recorder's device.
func (r *Recorder) Device() runtime.Device {
	if r == nil {
		return runtime.Device{}
	}
	return r.device
}

// SetStep sets the step label; safe from any goroutine.
func (r *Recorder) SetStep(step int) {
	if r != nil {
		r.step.Store(int32(step))
	}
}

// SetStage sets the pipeline stage label (None to clear).
func (r *Recorder) SetStage(stage int) {
	if r != nil {
		r.labels.Stage = int16(stage)
	}
}

// SetChunk sets the VPP chunk label (None to clear).
func (r *Recorder) SetChunk(chunk int) {
	if r != nil {
		r.labels.Chunk = int16(chunk)
	}
}

// SetMicrobatch sets the microbatch label (None to clear).
func (r *Recorder) SetMicrobatch(mb int) {
	if r != nil {
		r.labels.Microbatch = int32(mb)
	}
}

// SetPhase sets the phase label.
func (r *Recorder) SetPhase(ph Phase) {
	if r != nil {
		r.labels.Phase = ph
	}
}

// SetLabels replaces the stage, chunk, microbatch and phase labels at once
// (the step is kept; see SetStep).
func (r *Recorder) SetLabels(l Labels) {
	if r != nil {
		r.labels.Stage, r.labels.Chunk, r.labels.Microbatch, r.labels.Phase = l.Stage, l.Chunk, l.Microbatch, l.Phase
	}
}

// Labels returns the current labels.
func (r *Recorder) Labels() Labels {
	if r == nil {
		return NoLabels
	}
	l := r.labels
	l.Step = r.step.Load()
	return l
}

// push opens a frame, or counts the range as dropped when nesting is too
// deep. It returns nil in that case.
func (r *Recorder) push(name string, kind Kind) *frame {
	if r.depth >= maxDepth {
		r.over++
		r.dropped.Add(1)
		return nil
	}
	f := &r.stack[r.depth]
	r.nextID++
	f.id = r.nextID
	f.parent = 0
	if r.depth > 0 {
		f.parent = r.stack[r.depth-1].id
	}
	f.name = name
	f.kind = kind
	f.depth = int32(r.depth)
	f.labels = r.labels
	f.labels.Step = r.step.Load()
	f.tag = ""
	if t := r.p.tag.Load(); t != nil {
		f.tag = *t
	}
	f.collIdx = -1
	f.peak = 0
	f.stream, f.start, f.end = nil, nil, nil
	r.depth++
	return f
}

// Start opens a host-timed range. Ranges nest: End closes the innermost.
func (r *Recorder) Start(name string) {
	if r == nil {
		return
	}
	if f := r.push(name, KindHost); f != nil {
		f.hostStart = r.p.now()
	}
}

// StartDevice opens a range timed both on the host and on stream s: an
// event from the recorder's pool is recorded on s now and another at End;
// nothing waits for the device. Device times are resolved later.
func (r *Recorder) StartDevice(name string, s *runtime.Stream) {
	if r == nil {
		return
	}
	if f := r.push(name, KindDevice); f != nil {
		r.startDevice(f, s)
	}
}

// StartCollective opens a device-timed range for a collective or
// point-to-point call on stream s, carrying what moved and between whom.
func (r *Recorder) StartCollective(name string, s *runtime.Stream, c Collective) {
	if r == nil {
		return
	}
	kind := KindCollective
	if c.Peer >= 0 {
		kind = KindP2P
	}
	if f := r.push(name, kind); f != nil {
		f.collective = c
		f.collIdx = 0 // marks a collective; the real index is set at End
		r.startDevice(f, s)
	}
}

func (r *Recorder) startDevice(f *frame, s *runtime.Stream) {
	if s != nil {
		if r.p.cfg.seedSync {
			if err := s.Synchronize(context.Background()); err != nil {
				r.recordErrs.Add(1)
			}
		}
		f.stream = s
		if ev := r.event(s); ev != nil {
			if err := ev.Record(s); err == nil {
				f.start = ev
			} else {
				r.recordErrs.Add(1)
				r.keep(ev)
			}
		}
	}
	f.hostStart = r.p.now()
}

// End closes the innermost open range. An End with no open range is
// counted (Stats.Unbalanced) and otherwise ignored.
func (r *Recorder) End() {
	if r == nil {
		return
	}
	now := r.p.now()
	if r.over > 0 {
		r.over--
		return
	}
	if r.depth == 0 {
		r.unbalanced.Add(1)
		return
	}
	r.depth--
	f := &r.stack[r.depth]
	f.hostEnd = now
	if f.start != nil {
		r.endDevice(f)
	}
	r.mu.Lock()
	if n := len(r.pending); n < cap(r.pending) {
		if n == cap(r.pending)/2 {
			r.p.wake()
		}
		if f.collIdx >= 0 {
			f.collIdx = int32(len(r.colls))
			r.colls = append(r.colls, f.collective)
		}
		r.pending = append(r.pending, f.pending)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.dropped.Add(1)
	r.keep(f.start)
	r.keep(f.end)
}

// endDevice records the end event of a device range and notes the
// device's memory mark.
func (r *Recorder) endDevice(f *frame) {
	end := r.event(f.stream)
	if end != nil {
		if err := end.Record(f.stream); err != nil {
			r.recordErrs.Add(1)
			r.keep(end)
			end = nil
		}
	}
	if end == nil {
		r.keep(f.start)
		f.start = nil
		return
	}
	f.end = end
	if r.p.cfg.seedSync {
		if err := end.Synchronize(context.Background()); err != nil {
			r.recordErrs.Add(1)
		}
		f.hostEnd = r.p.now()
	}
	if st, err := f.stream.Impl().MemoryStats(f.stream.Device().Index); err == nil {
		f.peak = st.Peak
		if st.Peak > r.peakMemory.Load() {
			r.peakMemory.Store(st.Peak)
		}
	}
}

// event takes a timing event for s's device: from the owner's cache, else
// by moving the shared free list into the cache in one locked swap, else a
// new one while under the pool's bound; nil when none can be had.
func (r *Recorder) event(s *runtime.Stream) *runtime.Event {
	for {
		if n := len(r.cache); n > 0 {
			ev := r.cache[n-1]
			r.cache = r.cache[:n-1]
			if ev.Device() == s.Device() {
				return ev
			}
			// A recorder normally times one device; an event of another
			// device is destroyed rather than kept.
			_ = ev.Destroy()
			r.mu.Lock()
			r.events--
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		if len(r.free) > 0 {
			r.cache, r.free = r.free, r.cache
			r.mu.Unlock()
			continue
		}
		if r.events >= r.p.cfg.eventPool {
			r.mu.Unlock()
			r.eventDrops.Add(1)
			r.p.wake()
			return nil
		}
		r.events++
		created := r.events
		r.mu.Unlock()
		if created > r.p.cfg.eventPool/2 {
			// Running through the pool: resolved events should come back.
			r.p.wake()
		}
		ev, err := runtime.NewEventWith(s.Impl(), s.Device(), runtime.EventDefault)
		if err != nil {
			r.mu.Lock()
			r.events--
			r.mu.Unlock()
			r.recordErrs.Add(1)
			return nil
		}
		return ev
	}
}

// keep returns an event to the pool from the owner's goroutine.
func (r *Recorder) keep(ev *runtime.Event) {
	if ev != nil {
		r.cache = append(r.cache, ev)
	}
}

// releaseAll returns events to the pool from the collector.
func (r *Recorder) releaseAll(evs []*runtime.Event) {
	r.mu.Lock()
	for _, ev := range evs {
		if ev != nil {
			r.free = append(r.free, ev)
		}
	}
	r.mu.Unlock()
}

// take moves the completed ranges out, swapping in the empty spare
// buffers so the owner is held only for the swap.
func (r *Recorder) take(spare []pending, spareColls []Collective) ([]pending, []Collective) {
	r.mu.Lock()
	out, colls := r.pending, r.colls
	r.pending, r.colls = spare[:0], spareColls[:0]
	r.mu.Unlock()
	return out, colls
}

// record turns a compact range into a Record.
func (r *Recorder) record(pd *pending, colls []Collective) Record {
	rec := Record{
		ID:        pd.id,
		Parent:    pd.parent,
		Depth:     int(pd.depth),
		Name:      pd.name,
		Kind:      pd.kind,
		Rank:      r.rank,
		Device:    r.device,
		Tag:       pd.tag,
		Labels:    pd.labels,
		HostStart: pd.hostStart,
		HostEnd:   pd.hostEnd,
	}
	if pd.stream != nil {
		rec.Device = pd.stream.Device()
		rec.PeakMemory = pd.peak
	}
	if pd.collIdx >= 0 && int(pd.collIdx) < len(colls) {
		rec.Collective = colls[pd.collIdx]
	}
	return rec
}

// Range is a convenience for defer: it starts a host range and returns
// the recorder, so `defer r.Range("name").End()` brackets a function.
func (r *Recorder) Range(name string) *Recorder {
	r.Start(name)
	return r
}
