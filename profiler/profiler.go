package profiler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Profiler owns the recorders of a run, resolves their device times off
// the hot path and keeps the completed records, up to a bound.
//
// A nil *Profiler is profiling switched off, like a nil *Recorder:
// NewRecorder returns a nil *Recorder and no error; every other method
// does nothing and returns nil or zero values (Report writes nothing,
// AddSink and Ingest take nothing in).
type Profiler struct {
	cfg   config
	clock monoClock
	// Tags live in an append-only table; ranges carry an index into it.
	// SetTag appends to the table in place, growing it geometrically, and
	// publishes the longer slice: an entry below a published length is
	// never written again, so a reader of any published slice reads
	// entries written before it was published, and a new tag costs O(1)
	// amortised, not a copy of the table.
	tagIndex atomic.Uint32
	tagMu    sync.Mutex
	tags     atomic.Pointer[[]string]
	tagIDs   map[string]uint32

	mu          sync.Mutex
	recorders   []*Recorder
	records     store
	unresolved  []unresolved
	trace       *traceState // WithWorkTrace's; nil without
	calib       map[runtime.Device]*clockSync
	sinks       []Sink
	sinksClosed bool                         // Close has shut the sinks down
	done        bool                         // Close has made its last pass: nothing is collected or resolved any more
	batch       []Record                     // records finished in this pass, for the sinks
	lost        []Lost                       // drops noted in this pass, for the sinks (LostSink)
	returned    map[*Recorder][]*pooledEvent // events to hand back, per owner
	waiting     map[waitingStream]bool       // in a resolve pass: streams with an end not yet done
	placed      map[*pooledEvent]placement   // in a resolve pass: where the device reached the end events resolved so far
	kick        chan struct{}                // a recorder running short asks for a collection
	// lockWaiters counts the callers polling for p.mu in lockBy: while
	// there are any, the collector starts no pass, which would otherwise
	// take the lock again an instant after its last pass released it
	// and keep a poller out for as long as its passes outlast the
	// interval (a slow sink).
	lockWaiters atomic.Int32
	// measuring is set while the background collector takes a
	// calibration point, outside the lock (recalibrate): Close need not
	// wait for it to stop then, since it holds nothing Close needs.
	measuring atomic.Bool
	// Timing events the collected device ranges recorded, and their
	// starts and ends that took the stream's latest event (Stats).
	eventsRecorded, eventsShared uint64

	storeDrops   atomic.Uint64
	resetDrops   atomic.Uint64 // device ranges Reset discarded unresolved
	abandoned    atomic.Uint64 // device ranges delivered without their unfinished device work (abandonLocked)
	collected    atomic.Uint64 // records finished: stored, delivered to sinks, or over the bound
	resolveErrs  atomic.Uint64
	firstErr     atomic.Pointer[error] // the first backend error counted in Stats.Errors
	sinkFailures atomic.Uint64
	sinkErr      atomic.Pointer[error] // the first sink's panic
	closeOnce    sync.Once
	stop, closed chan struct{}
	finished     atomic.Bool // a Close has made the last pass (done is set)

	// figs holds what Stats and PeakMemory read of the state p.mu
	// guards, as of the last release of p.mu (unlock): they never wait
	// for the lock, which a sink stuck in Consume holds.
	figs atomic.Pointer[figures]
}

// figures is the part of Stats that the state under p.mu makes, with the
// recorders, published as one so that its counts agree with one another.
type figures struct {
	recorders []*Recorder // append-only: a published slice is never written again
	counts
}

type counts struct {
	records, pending                                                       int
	collected, overflow, discarded, abandoned, resolveErrs, events, shared uint64
	traceLost, traceDropped, traceLate, traceEmpty, traceUnheld            uint64
}

// unlock publishes the figures (when they changed) and releases p.mu.
// Every release of p.mu goes through it, so while p.mu is free the
// published figures are current, and while it is held they are those of
// its last release. Publishing allocates only when a figure changed.
func (p *Profiler) unlock() {
	f := figures{recorders: p.recorders, counts: counts{
		records:     p.records.len(),
		pending:     len(p.unresolved),
		collected:   p.collected.Load(),
		overflow:    p.storeDrops.Load(),
		discarded:   p.resetDrops.Load(),
		abandoned:   p.abandoned.Load(),
		resolveErrs: p.resolveErrs.Load(),
		events:      p.eventsRecorded,
		shared:      p.eventsShared,
	}}
	if p.trace != nil {
		f.traceLost, f.traceDropped, f.traceLate, f.traceEmpty = p.trace.lost, p.trace.dropped, p.trace.late, p.trace.empty
		f.traceUnheld = p.trace.unheld
	}
	if old := p.figs.Load(); old == nil || !old.same(&f) {
		nf := f // only a changed figure escapes to the heap
		p.figs.Store(&nf)
	}
	p.mu.Unlock()
}

// same reports whether f and g hold the same figures; the recorders are
// the same when as many, the list being append-only.
func (f *figures) same(g *figures) bool {
	return len(f.recorders) == len(g.recorders) && f.counts == g.counts
}

// Option configures New.
type Option interface{ apply(*config) }

type config struct {
	buffer      int
	maxRecords  int
	eventPool   int
	interval    time.Duration
	syncEach    bool
	noAdjacent  bool
	deviceDepth int
	recalibrate time.Duration
	concurrent  bool
	trace       *runtime.WorkTrace
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithBufferSize bounds the completed ranges a recorder holds between two
// collections (default 8192, rounded up to a power of two); when full,
// further ranges are dropped and counted. A recorder takes memory for its
// buffer a part at a time (32 KiB or more), as ranges first reach it, and
// keeps what it took: the whole buffer, about 240 bytes a range, only
// once that many ranges have waited for a collection at once.
func WithBufferSize(n int) Option { return optionFunc(func(c *config) { c.buffer = n }) }

// WithMaxRecords bounds the records the profiler keeps for Snapshot
// (default 1<<18); beyond it records are not kept and are counted as
// overflow (sinks still receive them). 0 keeps none: for a profiler whose
// sinks hold what is wanted (summaries, a window of detail) in bounded
// memory.
func WithMaxRecords(n int) Option { return optionFunc(func(c *config) { c.maxRecords = n }) }

// WithConcurrentSinks has the sinks consume each batch at the same time,
// one goroutine each, rather than one after another: a delivery then
// takes as long as the slowest sink, not the sum of them, where cores
// allow. Each sink still sees every batch once, in order, one at a time,
// and every sink has consumed a batch before the next is delivered and
// before Snapshot, Flush, Ingest or Close return; but sinks that share
// state (one calling another from its Consume) must guard it.
func WithConcurrentSinks() Option { return optionFunc(func(c *config) { c.concurrent = true }) }

// WithEventPool bounds the timing events one recorder may hold (default
// 4096); a device range that finds none is timed on the host only, and
// counted.
func WithEventPool(n int) Option { return optionFunc(func(c *config) { c.eventPool = n }) }

// WithCollectInterval sets how often the background collector gathers
// and resolves ranges (default 20ms); 0 disables it, leaving collection to
// Snapshot and Flush.
func WithCollectInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.interval = d })
}

// WithRecalibration sets how often the collector takes a new calibration
// point for each device (default 10s; 0 keeps the first one only). Each
// point synchronises a private idle stream, never a rank's.
func WithRecalibration(d time.Duration) Option {
	return optionFunc(func(c *config) { c.recalibrate = d })
}

// WithSyncEachRange makes every device range synchronise its stream before
// it starts and wait for its end event when it ends, as simple event-based
// profilers do. It serialises host and device; it exists to measure what
// that costs, not for use.
func WithSyncEachRange() Option { return optionFunc(func(c *config) { c.syncEach = true }) }

// WithSeedStyleSync is the former name of WithSyncEachRange.
//
// Deprecated: use WithSyncEachRange.
func WithSeedStyleSync() Option { return WithSyncEachRange() }

// WithAdjacentRanges(false) gives every device range events of its own.
// By default a range's start or end takes the last event the recorder
// recorded on the same stream when nothing but events has been recorded on
// the stream since (runtime.Stream.WorkOps) instead of recording another:
// one recorded then would mark the same point of the stream. Where the
// stream has since waited for one point of another stream only, and the
// recorder holds an event marking that point, the boundary is the later
// of the two events (runtime.Stream.WaitsAfter). (A start the device
// reached before the range began, the stream idle in between, counts from
// the range's host start: no work of the range was issued before it.)
// Back-to-back ranges then cost one event record each instead of two, a
// range and the first range nested in it one start event, a range and the
// last range nested in it one end event, on the host and on the device.
func WithAdjacentRanges(on bool) Option { return optionFunc(func(c *config) { c.noAdjacent = !on }) }

// WithDeviceDepth(n) times on the device only the device ranges opened
// while fewer than n device-timed ranges are open: with n = 1, the
// outermost device range of each nest (a pipeline action, say) is timed on
// the device and the ranges inside it (its kernels) on the host only, as
// Start would. Collectives (StartCollective, Grouped) are always timed on
// the device. Each device-timed range costs an event record, about as much
// host time as a small kernel launch on CUDA; a launch-bound job that
// wraps every kernel in a range pays it on every launch. The default, 0,
// times every device range on the device.
func WithDeviceDepth(n int) Option { return optionFunc(func(c *config) { c.deviceDepth = n }) }

// WithWorkTrace times device ranges on the streams of t's backend from t,
// a trace of the device work itself (runtime.StartWorkTrace: CUPTI's
// activity records on CUDA), instead of recording events in the streams: a
// range's device time runs from the start of the first piece of work
// issued on its stream while it was open to the end of the last. Nothing
// is put in the streams, so timing every kernel costs the device nothing
// and the host what the trace costs its backend. A range is resolved once
// the trace has reported work issued on its stream after the range ended,
// or at Flush (which waits for its stream); one whose stream ran nothing
// while it was open has no device times. The caller starts t before the
// ranges it should time and stops it after Close. It cannot be combined
// with WithSyncEachRange.
func WithWorkTrace(t *runtime.WorkTrace) Option {
	return optionFunc(func(c *config) { c.trace = t })
}

func newConfig(opts []Option) (config, error) {
	c := config{buffer: 8192, maxRecords: 1 << 18, eventPool: 4096, interval: 20 * time.Millisecond, recalibrate: 10 * time.Second}
	for _, o := range opts {
		if o != nil { // a nil Option changes nothing
			o.apply(&c)
		}
	}
	switch {
	case c.buffer < 1:
		return c, fmt.Errorf("profiler: buffer size %d must be at least 1", c.buffer)
	case c.maxRecords < 0:
		return c, fmt.Errorf("profiler: max records %d is negative", c.maxRecords)
	case c.eventPool < 2:
		return c, fmt.Errorf("profiler: event pool %d must be at least 2", c.eventPool)
	case c.interval < 0:
		return c, fmt.Errorf("profiler: collect interval %v is negative", c.interval)
	case c.deviceDepth < 0:
		return c, fmt.Errorf("profiler: device depth %d is negative", c.deviceDepth)
	case c.recalibrate < 0:
		return c, fmt.Errorf("profiler: recalibration interval %v is negative", c.recalibrate)
	case c.trace != nil && c.syncEach:
		return c, errors.New("profiler: a work trace times ranges without synchronising; it cannot be combined with syncing each range")
	}
	return c, nil
}

// New returns a profiler and starts its background collector (stop it
// with Close). Nil options are ignored.
func New(opts ...Option) (*Profiler, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Profiler{
		cfg:      cfg,
		clock:    newMonoClock(),
		calib:    make(map[runtime.Device]*clockSync),
		returned: make(map[*Recorder][]*pooledEvent),
		waiting:  make(map[waitingStream]bool),
		placed:   make(map[*pooledEvent]placement),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		closed:   make(chan struct{}),
	}
	if cfg.trace != nil {
		p.trace = &traceState{t: cfg.trace, ordered: true, issued: map[any]time.Duration{}, idle: map[any]bool{}, work: map[any][]tracedWork{}, held: map[any][]tracedWork{}, groups: map[traceGroup][]int{}}
	}
	p.tagIDs = map[string]uint32{"": 0}
	p.tags.Store(&[]string{""})
	p.figs.Store(&figures{})
	if cfg.interval > 0 {
		go p.loop()
	} else {
		close(p.closed)
	}
	return p, nil
}

func (p *Profiler) now() time.Duration { return p.clock.since() }

// wake asks the background collector for an early pass, without waiting.
func (p *Profiler) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Epoch is the host time that record times count from.
func (p *Profiler) Epoch() time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.clock.epoch
}

// SetTag sets the tag that ranges started from now on carry (a label such
// as a phase of training, that the report groups ranges by); safe from
// any goroutine. Its cost does not grow with the tags set before: a map
// look-up, and for a new tag an append to the tag table, amortised
// constant time. Each distinct tag is kept for the profiler's lifetime
// (its string and under 100 bytes of table), and the report has a table
// per tag: a tag per step grows with the run (the step is a record's own
// label already: Recorder.SetStep).
func (p *Profiler) SetTag(tag string) {
	if p == nil {
		return
	}
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	id, ok := p.tagIDs[tag]
	if !ok {
		old := *p.tags.Load()
		id = uint32(len(old))
		p.tagIDs[tag] = id
		// In place where old has room: readers of old never read past
		// its length (the field's comment).
		tags := append(old, tag)
		p.tags.Store(&tags)
	}
	// After the table: a reader that loads this index, then the table,
	// finds the tag in it.
	p.tagIndex.Store(id)
}

// Tag returns the current tag.
func (p *Profiler) Tag() string {
	if p == nil {
		return ""
	}
	// The index first: the table SetTag stored before it holds it.
	id := p.tagIndex.Load()
	return (*p.tags.Load())[id]
}

// NewRecorder makes a recorder for one rank on dev; a rank that records
// from several goroutines makes one for each, and their ranges are the
// rank's, numbered apart (Record.ID). For a device with
// a registered backend it calibrates the device clock against the host
// clock first (once per device), which synchronises a private stream:
// call it at setup, not in the training loop. It waits for the
// collector's lock at most 10 s (a sink stuck in Consume holds it), then
// fails saying so. After Close it returns an error wrapping ErrClosed; on
// a nil *Profiler, a nil *Recorder (profiling off) and no error.
func (p *Profiler) NewRecorder(rank int, dev runtime.Device) (*Recorder, error) {
	if p == nil {
		return nil, nil
	}
	if rank < 0 {
		return nil, fmt.Errorf("profiler: rank %d is negative", rank)
	}
	if p.closing() {
		return nil, fmt.Errorf("profiler: recorder for rank %d: %w", rank, ErrClosed)
	}
	r := &Recorder{
		p:       p,
		rank:    rank,
		device:  dev,
		labels:  NoLabels,
		pending: newRing[pending](p.cfg.buffer),
		extras:  newRing[extra](p.cfg.buffer),
		sharing: !p.cfg.syncEach && !p.cfg.noAdjacent,
	}
	r.step.Store(None)
	if impl, err := runtime.Available(dev.Type); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), calibrationTimeout)
		err := p.Calibrate(ctx, impl, dev)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("profiler: recorder for rank %d: %w", rank, err)
		}
	}
	if !p.lockForSetup() {
		return nil, fmt.Errorf("profiler: recorder for rank %d: %w", rank, errSetupStuck())
	}
	defer p.unlock()
	if p.done {
		return nil, fmt.Errorf("profiler: recorder for rank %d: %w", rank, ErrClosed)
	}
	// The k-th recorder of a rank numbers its ranges from k·2^44 + 1, so
	// a rank's recorders (one per goroutine that records) never share an
	// ID: consumers key ranges and parents by rank and ID.
	k := 0
	for _, o := range p.recorders {
		if o.rank == rank {
			k++
		}
	}
	r.nextID = uint64(k) << recorderIDBits
	p.recorders = append(p.recorders, r)
	return r, nil
}

// recorderIDBits is the share of a rank's IDs each of its recorders
// numbers in: 2^44 ranges, 200 days at a million a second.
const recorderIDBits = 44

// closing reports whether Close has been called, whether or not it has
// made its last pass (a sink stuck in Consume may keep it from that).
func (p *Profiler) closing() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// setupLockTimeout is how long NewRecorder and AddSink, which take no
// context, wait for the profiler's lock: a collector pass holds it for
// milliseconds, a sink stuck in Consume for ever.
var setupLockTimeout = 10 * time.Second

// errSetupStuck is NewRecorder's and AddSink's error when the lock did
// not come within setupLockTimeout.
func errSetupStuck() error {
	return fmt.Errorf("the collector is still delivering to a sink that has not returned from Consume after %v", setupLockTimeout)
}

// lockForSetup takes p.mu within setupLockTimeout.
func (p *Profiler) lockForSetup() bool {
	ctx, cancel := context.WithTimeout(context.Background(), setupLockTimeout)
	defer cancel()
	return p.lockBy(ctx, 0)
}

// Calibrate places dev's clock on the host clock using impl; NewRecorder
// does not do it on its own because host-only recorders need none. It is
// idempotent per device and safe from any goroutine. It waits for the
// collector only until ctx ends (a sink stuck in Consume keeps it busy),
// returning an error wrapping ctx's. After Close it returns an error
// wrapping ErrClosed.
func (p *Profiler) Calibrate(ctx context.Context, impl runtime.Impl, dev runtime.Device) error {
	if p == nil {
		return nil
	}
	if p.closing() {
		return fmt.Errorf("profiler: calibrate %s: %w", dev, ErrClosed)
	}
	if !p.lockBy(ctx, 0) {
		return calibrateStuck(ctx, dev)
	}
	_, have := p.calib[dev]
	closed := p.done
	p.unlock()
	if closed {
		return fmt.Errorf("profiler: calibrate %s: %w", dev, ErrClosed)
	}
	if have {
		return nil
	}
	c, err := newClockSync(ctx, impl, dev, p.now)
	if err != nil {
		return err
	}
	c.next = p.now() + p.cfg.recalibrate
	if !p.lockBy(ctx, 0) {
		c.close()
		return calibrateStuck(ctx, dev)
	}
	if p.done {
		p.unlock()
		c.close()
		return fmt.Errorf("profiler: calibrate %s: %w", dev, ErrClosed)
	}
	if _, dup := p.calib[dev]; dup {
		p.unlock()
		c.close()
		return nil
	}
	p.calib[dev] = c
	p.unlock()
	return nil
}

// calibrateStuck is Calibrate's error when ctx ended before it had the
// profiler's lock.
func calibrateStuck(ctx context.Context, dev runtime.Device) error {
	return fmt.Errorf("profiler: calibrate %s: the collector is still delivering to a sink that has not returned from Consume: %w", dev, ctx.Err())
}

// Snapshot gathers what the recorders have completed, resolves the device
// times that are ready, and returns a copy of every record kept so far,
// ordered by rank, then start time. Ranges still open, and device ranges
// whose events have not completed, are not included yet. After Close it
// still gathers what the recorders completed, device ranges without
// device times (the calibration is released). It waits for a collector
// pass under way, as Reset does: a sink that never returns from Consume
// keeps both waiting (Flush, which takes a context, does not).
func (p *Profiler) Snapshot() []Record {
	if p == nil {
		return nil
	}
	// Deferred first, so it runs after the unlock: a calibration point
	// due is taken outside the lock (recalibrate).
	defer p.recalibrate(false)
	p.mu.Lock()
	defer p.unlock()
	p.collectLocked()
	out := p.records.all()
	sortRecords(out)
	return out
}

// Flush gathers everything completed and waits (until ctx ends) for the
// device work of every outstanding device range, so a following Snapshot
// holds all of it. An error means ctx ended first; the ranges still
// outstanding stay pending and nothing is lost (AbandonPending hands them
// on without device times, should their device work never finish). That includes ctx ending
// while the collector is stuck delivering to a sink that has not returned
// from Consume: Flush then gathers nothing and says so. A ctx that has
// ended already (a flush that must not wait for the device) gathers what
// is complete: the collector's lock is waited for as long as Close waits
// for it, so that a pass under way does not make Flush gather nothing.
// After Close it returns an error wrapping ErrClosed and changes nothing.
func (p *Profiler) Flush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if !p.lockBy(ctx, closeGrace) {
		return fmt.Errorf("profiler: flush: the collector is still delivering to a sink that has not returned from Consume (or another Flush is waiting on the device), so nothing was gathered: %w", ctx.Err())
	}
	defer p.recalibrate(false) // after the unlock below
	defer p.unlock()
	if p.done {
		return fmt.Errorf("profiler: flush: %w", ErrClosed)
	}
	p.collectLocked()
	for i := range p.unresolved {
		u := &p.unresolved[i]
		if u.traced {
			continue // syncTracedLocked waits for their streams
		}
		err := u.end.Synchronize(ctx)
		if err == nil && u.endAlso != nil {
			err = u.endAlso.Synchronize(ctx)
		}
		if err != nil && runtime.StatusOf(err) == runtime.StatusTimeout {
			p.resolveLocked(false)
			p.deliverLocked()
			return fmt.Errorf("profiler: flush: %d device ranges still pending: %w", len(p.unresolved), err)
		}
	}
	if err := p.syncTracedLocked(ctx); err != nil {
		p.resolveLocked(false)
		p.deliverLocked()
		return fmt.Errorf("profiler: flush: %d device ranges still pending: %w", len(p.unresolved), err)
	}
	p.collectTraceLocked(true)
	p.resolveLocked(true)
	p.deliverLocked()
	return nil
}

// AbandonPending gives up on the device work of the device ranges still
// pending: it gathers what is complete, tries once more, without waiting,
// to resolve each pending range, and hands every one still pending to the
// sinks (and the store) with its host times only, marked
// Record.DeviceUnfinished (HasDevice false), counting it in
// Stats.Abandoned. It returns how many it abandoned. Call it when the
// device will not get through its work — a kernel that hangs, a stopped
// run whose queued work is given up — so that the ranges that hung reach
// the traces and reports instead of staying pending; Flush first to wait
// for work that will finish. The events of an abandoned range do not go
// back to its recorder's pool: the device has not reached them, and one
// recorded again for a later range could complete with the stuck work and
// time that range wrong; each abandoned range keeps up to two of the
// recorder's WithEventPool events out of use for good.
//
// It waits for the collector's lock as Flush does: until ctx ends, and
// at least as long as Close waits, then returns an error saying a sink
// has not returned from Consume, abandoning nothing. After Close it
// returns an error wrapping ErrClosed and changes nothing (Close
// abandons what is pending then).
func (p *Profiler) AbandonPending(ctx context.Context) (int, error) {
	if p == nil {
		return 0, nil
	}
	if !p.lockBy(ctx, closeGrace) {
		return 0, fmt.Errorf("profiler: abandon pending: the collector is still delivering to a sink that has not returned from Consume (or a Flush is waiting on the device), so nothing was delivered: %w", ctx.Err())
	}
	defer p.unlock()
	if p.done {
		return 0, fmt.Errorf("profiler: abandon pending: %w", ErrClosed)
	}
	p.collectLocked()
	return p.abandonLocked(), nil
}

// Reset discards every record kept and every completed range not yet
// collected; ranges open now are kept and recorded when they end. Device
// ranges still waiting for their events are discarded too, before any
// sink saw them, and counted in Stats.Discarded. Drop counters are not
// reset.
func (p *Profiler) Reset() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.unlock()
	p.collectLocked()
	p.resetDrops.Add(uint64(len(p.unresolved)))
	for _, u := range p.unresolved {
		if !u.traced {
			p.returned[u.owner] = u.events(p.returned[u.owner])
		}
	}
	if p.trace != nil {
		p.trace.pending = 0
	}
	p.returnEventsLocked()
	clear(p.unresolved)
	p.unresolved = p.unresolved[:0]
	p.records.reset()
	for _, r := range p.recorders {
		r.peakMemory.Store(0)
	}
}

// Stats counts what the profiler holds and what it lost.
type Stats struct {
	Recorders  int
	Records    int    // records kept for Snapshot
	Collected  uint64 // records finished so far: kept, over the bound, or delivered to sinks only
	Pending    int    // device ranges whose times are not resolved yet
	Dropped    uint64 // ranges lost on the recording side: a full recorder buffer or too deep nesting
	Overflow   uint64 // records lost to the profiler's record bound (WithMaxRecords)
	EventDrops uint64 // device ranges timed on the host only for want of pooled events
	// Events counts the timing events the device ranges collected so far
	// recorded on their streams, and Adjacent their starts and ends that
	// took the stream's latest event instead (WithAdjacentRanges).
	Events     uint64
	Adjacent   uint64
	Unbalanced uint64 // End calls with no open range
	// Discarded counts device ranges Reset discarded while they still
	// waited for their events: no sink saw them.
	Discarded uint64
	// Abandoned counts device ranges whose device work had not finished
	// when the profiler gave up on it (AbandonPending, Close): they were
	// delivered with their host times only, marked
	// Record.DeviceUnfinished, and count in Collected too; they are not
	// backend errors.
	Abandoned uint64
	// TraceLost counts device ranges timed from the work trace
	// (WithWorkTrace) that were delivered without device times because
	// more waited for their work than the profiler holds; TraceDropped
	// the pieces of work the trace itself lost (runtime.WorkTrace's
	// Dropped), whose ranges are timed without them.
	// TraceLate counts pieces of work the trace reported after work on
	// the same stream issued later: a range they belong to may have
	// been resolved without them (a trace is expected to report each
	// stream's work in issue order; this says when it did not).
	// TraceEmpty counts device ranges timed from the work trace whose
	// stream ran nothing issued while they were open (it only waited
	// for another stream, or the range's work was on the host): they
	// have no device times, by their nature, not by a loss.
	// TraceUnheld counts pieces of work reported while a range they may
	// belong to was still open, let go because more were held than the
	// profiler holds (a range kept open across a great deal of work):
	// such ranges are timed without them.
	TraceLost    uint64
	TraceDropped uint64
	TraceLate    uint64
	TraceEmpty   uint64
	TraceUnheld  uint64
	Errors       uint64 // events the backend refused to record or resolve
	// FirstError is the first of those errors, to say what went wrong;
	// nil when Errors is 0.
	FirstError error
	// SinkFailures counts sinks removed because Consume panicked; they
	// get nothing more, the other sinks everything. SinkError is the
	// first such panic.
	SinkFailures uint64
	SinkError    error
}

// Stats returns current counts. It never waits: the counts the
// collector keeps (Recorders, Records, Collected, Pending, Overflow,
// Events, Adjacent, Discarded, Abandoned, TraceLost, TraceDropped, TraceLate, TraceEmpty, TraceUnheld, and Errors' backend part) are those of the
// end of its last pass, or of the last Snapshot, Flush, Reset, Ingest,
// NewRecorder, AbandonPending or Close, and agree with one another; during a pass,
// including one stuck in a sink's Consume, they lag it by that pass.
// The recorders' own counts (Dropped, EventDrops, Unbalanced, and
// Errors' recording part) and the sink failures are read as they are now.
func (p *Profiler) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	f := p.figs.Load()
	s := Stats{
		Recorders: len(f.recorders),
		Records:   f.records,
		Pending:   f.pending,
		Overflow:  f.overflow,
		Collected: f.collected,
		Discarded: f.discarded,
		Abandoned: f.abandoned,
		Errors:    f.resolveErrs,
		Events:    f.events,
		Adjacent:  f.shared,

		TraceLost:    f.traceLost,
		TraceDropped: f.traceDropped,
		TraceLate:    f.traceLate,
		TraceEmpty:   f.traceEmpty,
		TraceUnheld:  f.traceUnheld,
	}
	s.SinkFailures = p.sinkFailures.Load()
	if e := p.sinkErr.Load(); e != nil {
		s.SinkError = *e
	}
	for _, r := range f.recorders {
		s.Dropped += r.dropped.Load()
		s.EventDrops += r.eventDrops.Load()
		s.Unbalanced += r.unbalanced.Load()
		s.Errors += r.recordErrs.Load()
	}
	// FirstError is nil while Errors is 0, also when a pass under way
	// has met the first error and not yet published its count.
	if e := p.firstErr.Load(); e != nil && s.Errors > 0 {
		s.FirstError = *e
	}
	return s
}

// closeGrace is how long Close and Flush wait for the collector's lock
// even when their context has ended: a collector pass holds it for
// milliseconds, and giving up at the first look lost the last records and
// the sinks' shutdown (call logs left unclosed) whenever one was under
// way.
const closeGrace = 500 * time.Millisecond

// lockBy takes p.mu unless ctx ends, and grace has passed, first: a sink
// stuck in Consume holds it. It polls, backing off to 5 ms. Close and
// Flush wait with closeGrace, the others with none.
func (p *Profiler) lockBy(ctx context.Context, grace time.Duration) bool {
	var graceC <-chan time.Time // nil, never ready, without a grace
	graced := grace <= 0
	if !graced {
		g := time.NewTimer(grace)
		defer g.Stop()
		graceC = g.C
	}
	if p.mu.TryLock() {
		return true
	}
	p.lockWaiters.Add(1)
	defer p.lockWaiters.Add(-1)
	for pause := 50 * time.Microsecond; !p.mu.TryLock(); pause = min(2*pause, 5*time.Millisecond) {
		t := time.NewTimer(pause)
		select {
		case <-graceC:
			graced = true
		case <-t.C:
		}
		t.Stop()
		if graced && ctx.Err() != nil {
			return false
		}
	}
	return true
}

// collectorStopped waits for the background collector to stop unless
// ctx ends, and grace has passed, first (lockBy's rule).
func (p *Profiler) collectorStopped(ctx context.Context, grace time.Duration) bool {
	select {
	case <-p.closed:
		return true
	default:
	}
	g := time.NewTimer(grace)
	defer g.Stop()
	select {
	case <-p.closed:
		return true
	case <-g.C:
	}
	// A collector taking a calibration point, which takes microseconds
	// on a device that gets through its work, is blocked in a device
	// call outside the lock: it stops once the call returns, and holds
	// nothing Close needs meanwhile.
	tick := time.NewTicker(closeGrace / 10)
	defer tick.Stop()
	for {
		if p.measuring.Load() {
			return true
		}
		select {
		case <-p.closed:
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// backendError keeps err when it is the first backend error, for
// Stats.FirstError. Errors are rare: the store is off every normal path.
func (p *Profiler) backendError(err error) {
	if err != nil {
		e := err
		p.firstErr.CompareAndSwap(nil, &e)
	}
}

// PeakMemory returns the highest device memory mark seen by rank's
// device ranges since the last Reset (bytes), or 0. It never waits for
// the collector (a sink stuck in Consume): it reads the marks as they
// are now, of the recorders made before the last release of the
// profiler's lock (Stats).
func (p *Profiler) PeakMemory(rank int) int64 {
	if p == nil {
		return 0
	}
	var peak int64
	for _, r := range p.figs.Load().recorders {
		if r.rank == rank {
			peak = max(peak, r.peakMemory.Load())
		}
	}
	return peak
}

// ErrClosed (errors.Is) is what Close returns when called again after it
// made its last pass, and what NewRecorder, Calibrate, Flush, AddSink and
// Ingest return once Close has been called.
var ErrClosed = errors.New("profiler: already closed")

// Close stops the background collector, delivers what the recorders have
// completed, shuts the sinks down (SinkShutdowner, in the order they were
// added) and releases the calibration state; records kept remain readable
// through Snapshot. Everything waits at most until ctx ends: the
// collector's last pass, and each sink's Shutdown (a sink that never
// returns from Consume leaves the last pass and the sinks' Shutdown out,
// and Close returns when ctx ends, saying so; the profiler is closed all
// the same, and a later Close, once the sink has returned, makes the
// last pass and shuts the sinks down). Device ranges whose device work
// has not finished by the last pass are delivered without device times
// before the sinks shut down, as AbandonPending does: call Flush first to
// wait for their device work instead.
//
// After Close, recorders still accept Start and End, which cost what they
// did and allocate nothing; nothing collects their ranges in the
// background any more, so once a recorder's buffer is full they are
// counted in Stats.Dropped. Snapshot and Reset still gather them, device
// ranges without device times.
func (p *Profiler) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.closeOnce.Do(func() { close(p.stop) })
	if p.finished.Load() {
		return ErrClosed
	}
	var errs []error
	// One grace for both waits below: an idle collector stops an instant
	// after p.stop closes, one in a pass when the pass ends, so a context
	// that has already ended must not count either as still running.
	graceEnd := time.Now().Add(closeGrace)
	if !p.collectorStopped(ctx, closeGrace) {
		errs = append(errs, fmt.Errorf("profiler: close: collector still running: %w", ctx.Err()))
	}
	if !p.lockBy(ctx, time.Until(graceEnd)) {
		// The collector is stuck in a sink's Consume, holding the lock:
		// what it has not delivered stays undelivered, and the sinks are
		// not shut down (one of them would not return). A later Close
		// tries again.
		errs = append(errs, fmt.Errorf("profiler: close: a sink has not returned from Consume: the last records and the sinks' shutdown are left out (Close may be called again): %w", ctx.Err()))
		return errors.Join(errs...)
	}
	if p.done {
		// Another Close made the last pass while this one waited.
		p.unlock()
		return ErrClosed
	}
	p.collectLocked()
	// A last forced collect of the work trace resolves the trace-timed
	// ranges whose work was reported, or whose streams had run all
	// they were given.
	p.idleLocked()
	p.collectTraceLocked(true)
	p.resolveLocked(false)
	// What is still pending would stay pending for good: the sinks get
	// it with host times only before they shut down.
	p.abandonLocked()
	// The calibrations go: device ranges collected from now on are kept
	// without device times (deviceTimesLocked). They are released after
	// the sinks shut down, outside the lock: destroying an event or a
	// stream can block in the driver while the device does not get
	// through its work (CUDA's, while another thread waits in a copy or
	// a cudaFree behind a kernel that has not ended).
	calibs := slices.Collect(maps.Values(p.calib))
	clear(p.calib)
	p.done = true
	p.finished.Store(true)
	sinks := p.sinks
	p.sinks, p.sinksClosed = nil, true
	p.unlock()
	errs = append(errs, shutdownSinks(ctx, sinks))
	releaseCalibrations(ctx, calibs)
	return errors.Join(errs...)
}

// releaseCalibrations closes the clock syncs, waiting until ctx ends or
// closeGrace has passed, whichever is first; past that they are left to
// finish in the background (a device call that blocked), which loses
// nothing recorded.
func releaseCalibrations(ctx context.Context, calibs []*clockSync) {
	if len(calibs) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range calibs {
			c.close()
		}
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}
