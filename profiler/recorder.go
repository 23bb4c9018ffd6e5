package profiler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/runtime"
)

// maxDepth bounds range nesting; deeper Starts are counted as dropped.
const maxDepth = 64

// Recorder records the ranges of one rank. Start, End and the label
// setters belong to the goroutine that owns the recorder (one rank); the
// Profiler gathers completed ranges from any goroutine. The hot path takes
// no lock and allocates nothing: a completed range is one 64-byte slot of a
// single-producer queue that the collector drains.
//
// All methods are no-ops on a nil *Recorder, which is how profiling is
// switched off without branches at call sites.
type Recorder struct {
	p      *Profiler
	rank   int
	device runtime.Device

	// Owner-only state.
	stack   [maxDepth]frame
	depth   int
	over    int // Starts beyond maxDepth not yet ended
	devOpen int // open device-timed ranges (WithDeviceDepth)
	// devTimed counts the open ranges whose start event was recorded:
	// those that will have a device time. A device range started while
	// one is open is Record.DeviceNested.
	devTimed int
	// traceOpen counts the open ranges timed from the work trace;
	// openSince is the host start of the oldest of them plus one (0: none
	// open), for the collector to hold the trace's work that such a
	// range, published later, may hold (traceState.held).
	traceOpen int
	openSince atomic.Int64
	nextID    uint64
	labels    Labels
	step      atomic.Int32   // settable from any goroutine
	cache     []*pooledEvent // pooled events only the owner touches
	grouped   []frame        // scratch for Grouped
	// latest holds, per stream recently timed on, the last timing event
	// recorded there, while a range may start or end on it (see share).
	latest     [latestStreams]latestEvent
	latestNext int // the slot to reuse when every one holds a stream
	waitsBuf   []runtime.StreamPoint
	sharing    bool // ranges may share events (not WithAdjacentRanges(false) nor WithSyncEachRange)

	// Completed ranges, and the device details of those that have them,
	// in the same order, handed to the collector through lock-free
	// single-producer queues.
	pending *ring[pending]
	extras  *ring[extra]

	// The event pool's shared side, under mu.
	mu     sync.Mutex
	free   []*pooledEvent // timing events ready for reuse
	events int            // events this recorder created

	dropped atomic.Uint64 // records lost to a full queue or depth
	// The ranges counted in dropped, by step, until the collector takes
	// them (takeLost): lostN those of step lostStep, lost (under lostMu)
	// those of the steps before it. A drop of the same step as the last
	// takes no lock; lostStep changes only under lostMu.
	lostStep    atomic.Int32
	lostN       atomic.Uint64
	lostMu      sync.Mutex
	lost        []Lost
	lostUnnoted uint64        // dropped while lost was full: no step known; under lostMu
	droppedSeen uint64        // dropped as the collector last looked; under the profiler's lock
	eventDrops  atomic.Uint64 // device ranges recorded host-only for want of events
	unbalanced  atomic.Uint64 // End without Start
	recordErrs  atomic.Uint64 // event records the backend refused
	peakMemory  atomic.Int64
}

// pending is a completed range in compact form, one cache line, as End
// publishes it; the collector turns it into a Record off the hot path.
type pending struct {
	id                 uint64
	parentGap          uint32 // id − parent's id; 0 for a top-level range
	depth              uint8
	kind               Kind
	phase              Phase
	flags              uint8 // flagExtra, flagCutShort
	name               string
	step, microbatch   int32
	stage, chunk       int16
	tag                uint32 // index into the profiler's tag table
	hostStart, hostEnd time.Duration
}

// pending.flags.
const (
	flagExtra        uint8 = 1 << iota // device details follow in the extras queue
	flagCutShort                       // ended by EndCutShort
	flagOuterInGroup                   // Record.OuterInGroup
)

// hasExtra reports whether device details follow in the extras queue.
func (pd *pending) hasExtra() bool { return pd.flags&flagExtra != 0 }

// The queue's slots are one cache line each, so a range costs the
// collector one line transfer between cores.
var _ [64 - unsafe.Sizeof(pending{})]struct{}

// extra holds what only device-timed ranges have.
type extra struct {
	stream     *runtime.Stream
	start, end *pooledEvent
	// startAlso and endAlso, where set, are events of another stream that
	// the range's stream waited for at its start or end with no work of
	// its own since start or end was recorded: the boundary is the later
	// of the two events (Recorder.share).
	startAlso, endAlso *pooledEvent
	startAt            time.Duration // when start was recorded, if it is the previous range's end; else 0
	peak               int64
	hasCollective      bool
	nested             bool // Record.DeviceNested
	groupNested        bool // a device-timed range enclosing it is in its report group
	traced             bool // timed from the profiler's work trace (WithWorkTrace), not events
	// Of the range's start and end events, how many it recorded and how
	// many it took from the stream's latest (Stats.Events, Stats.Adjacent;
	// counted by the collector, off the recording path).
	recorded, shared uint8
	collective       Collective
}

// latestEvent is the last timing event the recorder recorded on a
// stream, held by the recorder (one reference) while a range may start or
// end on it instead of recording another, and the few before it.
type latestEvent struct {
	stream *runtime.Stream
	ev     *pooledEvent  // nil once other work followed it on the stream (it is then in past)
	ops    uint64        // stream.WorkOps() right after ev was recorded
	all    uint64        // stream.Ops() then
	waits  uint64        // stream.Waits() then
	at     time.Duration // host time of the record
	// The stream's earlier events, with a reference each: another stream
	// may wait for one of their points after later work here (a compute
	// stream waiting for a receive issued a round before), and a boundary
	// there shares it (waitedFor).
	past     [pastEvents]pastEvent
	pastNext int
}

// pastEvent is one of a stream's earlier events and its point.
type pastEvent struct {
	ev         *pooledEvent
	ops, waits uint64
}

// pastEvents is how many earlier events a recorder keeps per stream.
const pastEvents = 4

// retire moves l's latest event to its past: other work followed it.
func (r *Recorder) retire(l *latestEvent) {
	if l.ev == nil {
		return
	}
	p := &l.past[l.pastNext]
	r.drop(p.ev)
	*p = pastEvent{ev: l.ev, ops: l.ops, waits: l.waits}
	l.pastNext = (l.pastNext + 1) % pastEvents
	l.ev = nil
}

// forgetPast releases every stream's past events (latestEvent.past).
func (r *Recorder) forgetPast() {
	for i := range r.latest {
		l := &r.latest[i]
		for j := range l.past {
			r.drop(l.past[j].ev)
			l.past[j] = pastEvent{}
		}
	}
}

// eventAt returns l's event, latest or past, recorded at the stream's point
// (ops, waits); nil if none.
func (l *latestEvent) eventAt(ops, waits uint64) *pooledEvent {
	if l.ev != nil && l.ops == ops && l.waits == waits {
		return l.ev
	}
	for i := range l.past {
		if p := &l.past[i]; p.ev != nil && p.ops == ops && p.waits == waits {
			return p.ev
		}
	}
	return nil
}

// latestStreams is how many streams a recorder keeps a latest event for:
// a rank times ranges on its compute stream and on a communication stream
// or two.
const latestStreams = 4

// frame is an open range.
type frame struct {
	pending
	extra extra
	// groupDevAbove reports that a device-timed range enclosing this one
	// is in its report group (see placeInGroup).
	groupDevAbove bool
}

// timed reports whether the open range f has a device time coming: its
// start event was recorded. A host range's slot may still hold the events
// of the device range that last used it, so the flag is checked first.
func (f *frame) timed() bool { return f.hasExtra() && f.extra.timed() }

// timed reports whether the range is timed on the device: by its events,
// or from the work trace.
func (x *extra) timed() bool { return x.start != nil || x.traced }

// placeInGroup places f, opened at depth among the open ranges
// r.stack[:depth], in its report group (TagOf): it sets flagOuterInGroup
// when no enclosing range is in f's group, and f.groupDevAbove. A range
// in its parent's group, the usual case, costs two comparisons; one whose
// tag or step differs from its parent's looks further up the stack.
func (r *Recorder) placeInGroup(f *frame, depth int) {
	f.groupDevAbove = false
	f.flags &^= flagOuterInGroup
	if depth == 0 {
		return // top level: Record.Depth 0 says it
	}
	a := &r.stack[depth-1]
	if a.tag == f.tag && (f.tag != 0 || a.step == f.step) {
		f.groupDevAbove = a.groupDevAbove || a.timed()
		return
	}
	// The table after f.tag was loaded holds it (SetTag), and the
	// ancestors' older indices.
	tags := *r.p.tags.Load()
	for i := depth - 1; i >= 0; i-- {
		a := &r.stack[i]
		if sameGroup(tags[a.tag], a.step, tags[f.tag], f.step) {
			f.groupDevAbove = a.groupDevAbove || a.timed()
			return
		}
	}
	f.flags |= flagOuterInGroup
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
		r.lose(r.step.Load(), 1)
		return nil
	}
	f := &r.stack[r.depth]
	r.initFrame(f, name, kind)
	r.depth++
	return f
}

// initFrame fills f as a range opened now at the current depth, its parent
// the innermost open range.
func (r *Recorder) initFrame(f *frame, name string, kind Kind) {
	r.nextID++
	f.id = r.nextID
	f.parentGap = 0
	if r.depth > 0 {
		if gap := f.id - r.stack[r.depth-1].id; gap <= 1<<32-1 {
			f.parentGap = uint32(gap)
		}
	}
	f.name = name
	f.kind = kind
	f.depth = uint8(r.depth)
	f.phase = r.labels.Phase
	f.step = r.step.Load()
	f.microbatch = r.labels.Microbatch
	f.stage = r.labels.Stage
	f.chunk = r.labels.Chunk
	f.tag = r.p.tagIndex.Load()
	f.flags = 0
	r.placeInGroup(f, r.depth)
}

// maxLost bounds the steps a recorder notes dropped ranges of between
// two collections; beyond them the drops are counted without a step.
const maxLost = 256

// lose counts n ranges of step dropped while recording (a full queue, or
// nesting too deep), for Stats and for the sinks told of them
// (LostSink). A drop of the step the last one was of costs two atomic
// adds: in a storm of drops (the collector far behind), the rank goes on
// at the cost it had.
func (r *Recorder) lose(step int32, n uint64) {
	if r.lostStep.Load() != step {
		r.lostMu.Lock()
		if c := r.lostN.Swap(0); c > 0 {
			r.noteLocked(r.lostStep.Load(), c)
		}
		r.lostStep.Store(step)
		r.lostMu.Unlock()
	}
	r.lostN.Add(n)
	// Counted once noted: a collector that sees the count move finds
	// the drop noted (collectLocked).
	r.dropped.Add(n)
}

// noteLocked adds n drops of step to the list; the caller holds lostMu.
func (r *Recorder) noteLocked(step int32, n uint64) {
	switch k := len(r.lost); {
	case k > 0 && r.lost[k-1].Step == step:
		r.lost[k-1].Ranges += n
	case k < maxLost:
		r.lost = append(r.lost, Lost{Rank: r.rank, Step: step, Ranges: n})
	default:
		r.lostUnnoted += n
	}
}

// takeLost appends the drops noted since the last call to lost, oldest
// first: those the list had no room for as one of step None.
func (r *Recorder) takeLost(lost []Lost) []Lost {
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	lost = append(lost, r.lost...)
	if c := r.lostN.Swap(0); c > 0 {
		lost = append(lost, Lost{Rank: r.rank, Step: r.lostStep.Load(), Ranges: c})
	}
	if r.lostUnnoted > 0 {
		lost = append(lost, Lost{Rank: r.rank, Step: None, Ranges: r.lostUnnoted})
	}
	clear(r.lost)
	r.lost, r.lostUnnoted = r.lost[:0], 0
	return lost
}

// Start opens a host-timed range. Ranges nest: End closes the innermost.
func (r *Recorder) Start(name string) {
	if r == nil {
		return
	}
	// push, written out: this is the hottest call in the package.
	if r.depth >= maxDepth {
		r.over++
		r.lose(r.step.Load(), 1)
		return
	}
	f := &r.stack[r.depth]
	r.nextID++
	f.id = r.nextID
	f.parentGap = 0
	if r.depth > 0 {
		if gap := f.id - r.stack[r.depth-1].id; gap <= 1<<32-1 {
			f.parentGap = uint32(gap)
		}
	}
	f.name = name
	f.kind = KindHost
	f.depth = uint8(r.depth)
	f.phase = r.labels.Phase
	f.step = r.step.Load()
	f.microbatch = r.labels.Microbatch
	f.stage = r.labels.Stage
	f.chunk = r.labels.Chunk
	f.tag = r.p.tagIndex.Load()
	f.flags = 0
	r.placeInGroup(f, r.depth)
	r.depth++
	f.hostStart = r.p.now()
}

// StartDevice opens a range timed both on the host and on stream s: an
// event from the recorder's pool is recorded on s now and another at End;
// nothing waits for the device. Device times are resolved later.
func (r *Recorder) StartDevice(name string, s *runtime.Stream) {
	if r == nil {
		return
	}
	if d := r.p.cfg.deviceDepth; d > 0 && r.devOpen >= d {
		r.Start(name) // deeper than WithDeviceDepth: a host range
		return
	}
	if f := r.push(name, KindDevice); f != nil {
		f.extra.hasCollective = false
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
		f.extra.hasCollective = true
		f.extra.collective = c
		r.startDevice(f, s)
	}
}

func (r *Recorder) startDevice(f *frame, s *runtime.Stream) {
	f.flags |= flagExtra
	r.devOpen++
	x := &f.extra
	x.stream, x.start, x.end, x.startAt, x.peak = s, nil, nil, 0, 0
	x.startAlso, x.endAlso = nil, nil
	x.recorded, x.shared, x.traced = 0, 0, false
	x.nested = r.devTimed > 0
	x.groupNested = f.groupDevAbove
	if t := r.p.cfg.trace; t != nil && s != nil && s.Impl() == t.Impl() {
		// The trace times the stream's work: nothing goes in the stream.
		x.traced = true
		r.devTimed++
	} else if s != nil {
		if r.p.cfg.syncEach {
			if err := s.Synchronize(context.Background()); err != nil {
				r.recordErrs.Add(1)
				r.p.backendError(err)
			}
		}
		x.start, x.startAt, x.startAlso = r.share(s)
		if x.start != nil {
			x.shared++
		} else if x.start = r.record(s); x.start != nil {
			x.recorded++
		}
	}
	if x.start != nil {
		r.devTimed++
	}
	f.hostStart = r.p.now()
	if x.traced {
		// Before any of the range's work is issued: the collector holds
		// work issued since then until the range is published.
		if r.traceOpen++; r.traceOpen == 1 {
			r.openSince.Store(int64(f.hostStart) + 1)
		}
	}
}

// tracedEnded notes that a range timed from the work trace was published
// (or dropped): once none is open, the collector need hold no work for
// this recorder's ranges.
func (r *Recorder) tracedEnded() {
	if r.traceOpen--; r.traceOpen == 0 {
		r.openSince.Store(0)
	}
}

// record records a new timing event on s and makes it the stream's latest
// (see share); nil when there is no event or the backend refuses it.
func (r *Recorder) record(s *runtime.Stream) *pooledEvent {
	ev := r.event(s)
	if ev == nil {
		return nil
	}
	if err := ev.Record(s); err != nil {
		r.recordErrs.Add(1)
		r.p.backendError(err)
		r.drop(ev)
		return nil
	}
	if r.sharing {
		r.keepLatest(s, ev)
	}
	return ev
}

// share returns the last event recorded on s, with a reference for the
// caller, when a range's start or end can take it instead of a new one:
// nothing but other events has been recorded on s since it was recorded
// (Stream.WorkOps), so an event recorded now would mark the same point of
// the stream. (A backend's own events, such as those ordering a transfer
// against the stream, thus leave the boundary shared.)
// Back-to-back ranges thus share their boundary, and a range and the first
// (or last) range nested in it their start (or end). It returns nil, 0,
// nil otherwise.
//
// Where s was also told to wait for another stream's point since
// (Stream.WaitsAfter: a communication stream following the compute
// stream's work, a compute stream waiting for a receive), an event
// recorded now would complete at the later of the two. If that point is
// the other stream's latest event of this recorder, or one of the few
// before it (waitedFor), share returns it as well (also, with a
// reference), and the boundary is the later of the two events; if not, or
// if s waited for more than one point, share returns nil.
//
// On a stream gone idle the device has passed the event before the range
// began, and the idle time would count as the range's: the collector
// moves a shared start that the device reached before the range began to
// the range's host start, before which none of its work was issued
// (deviceTimesLocked). Asking the device here instead would cost every
// range a driver call on the recording thread.
func (r *Recorder) share(s *runtime.Stream) (ev *pooledEvent, at time.Duration, also *pooledEvent) {
	if !r.sharing {
		return nil, 0, nil
	}
	for i := range r.latest {
		l := &r.latest[i]
		if l.stream != s {
			continue
		}
		if l.ev == nil {
			return nil, 0, nil
		}
		if s.WorkOps() != l.ops {
			// Nothing later on s can take it either.
			r.retire(l)
			return nil, 0, nil
		}
		if s.Waits() != l.waits {
			if also = r.waitedFor(s, l); also == nil {
				return nil, 0, nil
			}
			also.refs.Add(1)
		}
		l.ev.refs.Add(1)
		return l.ev, l.at, also
	}
	return nil, 0, nil
}

// waitedFor returns the event of another stream that s waited for after
// l's event was recorded, when that is the one point s waited for since
// and it is that stream's latest or a recent event of this recorder,
// recorded with no work and no wait on that stream between them (the same
// WorkOps and Waits); else nil.
func (r *Recorder) waitedFor(s *runtime.Stream, l *latestEvent) *pooledEvent {
	pts, ok := s.WaitsAfter(l.all, r.waitsBuf[:0])
	r.waitsBuf = pts[:0]
	if !ok || len(pts) == 0 {
		return nil
	}
	for _, pt := range pts[1:] {
		if pt != pts[0] {
			return nil
		}
	}
	for i := range r.latest {
		o := &r.latest[i]
		if o.stream != nil && o.stream != s && o.stream.ID() == pts[0].Stream {
			return o.eventAt(pts[0].WorkOps, pts[0].Waits)
		}
	}
	return nil
}

// dropAll releases the range's events.
func (r *Recorder) dropAll(x *extra) {
	r.drop(x.start)
	r.drop(x.startAlso)
	r.drop(x.end)
	r.drop(x.endAlso)
	x.start, x.startAlso, x.end, x.endAlso = nil, nil, nil, nil
}

// keepLatest makes ev, just recorded on s, the stream's latest event, in
// the stream's slot, else a free one, else the next in turn.
func (r *Recorder) keepLatest(s *runtime.Stream, ev *pooledEvent) {
	slot := -1
	for i := range r.latest {
		if r.latest[i].stream == s {
			slot = i
			break
		}
		if slot < 0 && r.latest[i].stream == nil {
			slot = i
		}
	}
	if slot < 0 {
		slot = r.latestNext
		r.latestNext = (r.latestNext + 1) % len(r.latest)
	}
	l := &r.latest[slot]
	if l.stream == s {
		r.retire(l)
	} else { // a free slot, or another stream's
		r.drop(l.ev)
		for i := range l.past {
			r.drop(l.past[i].ev)
		}
		*l = latestEvent{stream: s}
	}
	ev.refs.Add(1)
	l.ev, l.ops, l.all, l.waits, l.at = ev, s.WorkOps(), s.Ops(), s.Waits(), r.p.now()
}

// End closes the innermost open range. An End with no open range is
// counted (Stats.Unbalanced) and otherwise ignored.
func (r *Recorder) End() {
	if r == nil {
		return
	}
	r.end(0)
}

// EndCutShort closes the innermost open range as End does and marks it
// Record.CutShort: its work failed or was interrupted before it finished.
// A step range ended this way is kept in traces and spans but left out of
// step statistics, busy time and the pipeline analysis, which count it.
func (r *Recorder) EndCutShort() {
	if r == nil {
		return
	}
	r.end(flagCutShort)
}

func (r *Recorder) end(flags uint8) {
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
	f.flags |= flags
	if f.hasExtra() {
		r.devOpen--
		if f.extra.timed() {
			r.devTimed--
			r.endDevice(f)
		}
	}
	if !r.publish(f) {
		r.lose(f.step, 1)
		if f.hasExtra() {
			// A host range's slot still holds the events of the device
			// range that last used it, now a published record's.
			r.dropAll(&f.extra)
		}
	}
	if f.hasExtra() && f.extra.traced {
		r.tracedEnded() // after publishing: see collectLocked
	}
}

// publish hands a completed range to the collector; false when a queue is
// full. The extra part is published before the range that refers to it.
func (r *Recorder) publish(f *frame) bool {
	// tryReserve is inlined, reserve is not: reserve only when
	// tryReserve leaves it to.
	slot, seq := r.pending.tryReserve()
	if slot == nil {
		if slot, seq = r.pending.reserve(); slot == nil {
			r.p.wake()
			return false
		}
	}
	if f.hasExtra() {
		x, xseq := r.extras.tryReserve()
		if x == nil {
			if x, xseq = r.extras.reserve(); x == nil {
				r.p.wake()
				return false
			}
		}
		*x = f.extra
		r.extras.publish(xseq)
	}
	*slot = f.pending
	r.pending.publish(seq)
	if (seq+1)&r.pending.halfMask == 0 {
		// Each time another half queue has filled, ask for a collection
		// rather than wait for the collector's timer (not at the first
		// range: a few ranges wait for the timer, or Flush, or Close).
		r.p.wake()
	}
	return true
}

// endDevice records the end event of a device range and notes the
// device's memory mark.
func (r *Recorder) endDevice(f *frame) {
	x := &f.extra
	if x.traced {
		r.notePeak(x)
		return
	}
	end, _, also := r.share(x.stream)
	x.endAlso = also
	if end != nil {
		x.shared++
	} else if end = r.record(x.stream); end != nil {
		x.recorded++
	}
	if end == nil {
		r.dropAll(x)
		return
	}
	x.end = end
	if r.p.cfg.syncEach {
		if err := end.Synchronize(context.Background()); err != nil {
			r.recordErrs.Add(1)
			r.p.backendError(err)
		}
		f.hostEnd = r.p.now()
	}
	r.notePeak(x)
}

// notePeak notes the device's memory mark in a device range ending now.
func (r *Recorder) notePeak(x *extra) {
	if st, err := x.stream.Impl().MemoryStats(x.stream.Device().Index); err == nil {
		x.peak = st.Peak
		if st.Peak > r.peakMemory.Load() {
			r.peakMemory.Store(st.Peak)
		}
	}
}

// fill writes a compact range, and its extra part when it has one, into a
// zeroed Record.
func (r *Recorder) fill(rec *Record, pd *pending, x *extra, tags []string) {
	rec.ID = pd.id
	if pd.parentGap != 0 {
		rec.Parent = pd.id - uint64(pd.parentGap)
	}
	rec.Depth = int(pd.depth)
	rec.Name = pd.name
	rec.Kind = pd.kind
	rec.Rank = r.rank
	rec.Device = r.device
	if int(pd.tag) < len(tags) {
		rec.Tag = tags[pd.tag]
	}
	rec.Labels = Labels{Step: pd.step, Microbatch: pd.microbatch, Stage: pd.stage, Chunk: pd.chunk, Phase: pd.phase}
	rec.HostStart = pd.hostStart
	rec.HostEnd = pd.hostEnd
	rec.CutShort = pd.flags&flagCutShort != 0
	rec.OuterInGroup = pd.flags&flagOuterInGroup != 0
	if x != nil {
		if x.stream != nil {
			rec.Device = x.stream.Device()
			rec.Stream = x.stream.ID()
		}
		rec.PeakMemory = x.peak
		rec.DeviceNested = x.nested
		rec.DeviceOuterInGroup = x.nested && !x.groupNested
		if x.hasCollective {
			rec.Collective = x.collective
		}
	}
}

// Range is a convenience for defer: it starts a host range and returns
// the recorder, so `defer r.Range("name").End()` brackets a function.
func (r *Recorder) Range(name string) *Recorder {
	r.Start(name)
	return r
}

// GroupedCollective is one call of a fused group, for Recorder.Grouped.
type GroupedCollective struct {
	Name       string
	Stream     *runtime.Stream
	Collective Collective
	// Labels are the recorder's labels when the call was issued (see
	// Recorder.Labels); the range carries them rather than those current
	// at launch.
	Labels Labels
}

// Grouped records the calls of a fused group — issued between GroupStart
// and GroupEnd, launched together by GroupEnd — as sibling ranges inside
// the current range. Each is timed on its own stream from just before
// launch to just after it, so the calls of one group share the group's
// device interval: that is what a fused launch makes measurable. It returns
// launch's error; with a nil recorder it only calls launch. A nil launch
// is an error, and nothing is recorded.
func (r *Recorder) Grouped(calls []GroupedCollective, launch func() error) error {
	if launch == nil {
		return errors.New("profiler: Grouped: nil launch function")
	}
	if r == nil || len(calls) == 0 {
		return launch()
	}
	if r.depth >= maxDepth {
		for _, c := range calls {
			r.lose(c.Labels.Step, 1)
		}
		return launch()
	}
	frames := r.grouped[:0]
	// The calls are siblings: none encloses another.
	nested := r.devTimed > 0
	for _, c := range calls {
		frames = append(frames, frame{})
		f := &frames[len(frames)-1]
		kind := KindCollective
		if c.Collective.Peer >= 0 {
			kind = KindP2P
		}
		r.initFrame(f, c.Name, kind)
		f.step, f.microbatch, f.stage, f.chunk, f.phase = c.Labels.Step, c.Labels.Microbatch, c.Labels.Stage, c.Labels.Chunk, c.Labels.Phase
		r.placeInGroup(f, r.depth) // again: the step is the call's
		f.extra.hasCollective = true
		f.extra.collective = c.Collective
		r.startDevice(f, c.Stream)
		f.extra.nested = nested
	}
	err := r.launchGrouped(frames, launch)
	r.endGrouped(frames, 0)
	return err
}

// launchGrouped runs launch; should it panic (a backend's), the group's
// ranges are ended, cut short, before the panic goes on, so the recorder's
// device counts and events stay right for the ranges after it.
func (r *Recorder) launchGrouped(frames []frame, launch func() error) error {
	defer func() {
		if v := recover(); v != nil {
			r.endGrouped(frames, flagCutShort)
			panic(v)
		}
	}()
	return launch()
}

// endGrouped ends and publishes Grouped's ranges.
func (r *Recorder) endGrouped(frames []frame, flags uint8) {
	now := r.p.now()
	for i := range frames {
		f := &frames[i]
		f.hostEnd = now
		f.flags |= flags
		r.devOpen--
		if f.extra.timed() {
			r.devTimed--
			r.endDevice(f)
		}
		if !r.publish(f) {
			r.lose(f.step, 1)
			r.dropAll(&f.extra)
		}
		if f.extra.traced {
			r.tracedEnded()
		}
	}
	clear(frames)
	r.grouped = frames[:0]
}
