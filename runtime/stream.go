package runtime

import (
	"context"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Stream is an ordered queue of device work. Create one with NewStream and
// release it with Destroy; work enqueued on one stream runs in order, work
// on different streams may overlap.
type Stream struct {
	id        uint64
	dev       Device
	impl      Impl
	h         any
	priority  int
	destroyed atomic.Bool
	ops       atomic.Uint64 // operations enqueued through this package (Ops)
	work      atomic.Uint64 // the same less event records and waits for known points (WorkOps)
	records   atomic.Uint64 // event records (Records)

	// The latest waits for events of other streams of the device whose
	// point is known (WaitsAfter); waitMu guards waited.
	waitMu   sync.Mutex
	waited   [keptWaits]waitPoint
	forgotAt uint64        // the Ops after the latest wait no longer in waited
	waits    atomic.Uint64 // such waits so far (Waits)

	latest atomic.Pointer[Event] // the event last recorded on s (WaitStream)
}

// keptWaits is how many waits a stream remembers: a range boundary follows
// one or two (a communication stream's wait for the compute stream).
const keptWaits = 4

// waitPoint is one wait of a stream for another stream's point.
type waitPoint struct {
	StreamPoint
	ops  uint64 // the waiting stream's Ops after the wait
	work uint64 // its WorkOps then
}

// StreamPoint is a point in a stream's work: where an event recorded on
// the stream (by ID) completes, recorded when the stream's WorkOps and
// Waits were these. Two events recorded on a stream with the same counts
// complete together; a wait between them (Waits differ) may hold the
// later one back.
type StreamPoint struct {
	Stream  uint64
	WorkOps uint64
	Waits   uint64
}

// StreamOption configures NewStream.
type StreamOption interface{ apply(*streamConfig) }

type streamConfig struct {
	priority    int
	hasPriority bool
}

type streamOptionFunc func(*streamConfig)

func (f streamOptionFunc) apply(c *streamConfig) { f(c) }

// WithPriority asks for a priority stream; lower numbers run first. The
// value must lie in the device's StreamPriorityRange.
func WithPriority(p int) StreamOption {
	return streamOptionFunc(func(c *streamConfig) { c.priority, c.hasPriority = p, true })
}

// NewStream creates a stream on dev through the backend registered for
// dev.Type.
func NewStream(dev Device, opts ...StreamOption) (*Stream, error) {
	impl, err := Available(dev.Type)
	if err != nil {
		return nil, err
	}
	return NewStreamWith(impl, dev, opts...)
}

// NewStreamWith is NewStream on a given backend, bypassing the registry.
func NewStreamWith(impl Impl, dev Device, opts ...StreamOption) (*Stream, error) {
	if isNilImpl(impl) {
		return nil, Errorf("NewStream", StatusInvalidArgument, "nil backend for device %s", dev)
	}
	var cfg streamConfig
	for i, o := range opts {
		if o == nil {
			return nil, Errorf("NewStream", StatusInvalidArgument, "stream option %d is nil", i)
		}
		o.apply(&cfg)
	}
	if err := checkDevice(impl, dev, "NewStream"); err != nil {
		return nil, err
	}
	if cfg.hasPriority {
		least, greatest, err := impl.StreamPriorityRange(dev.Index)
		if err != nil {
			return nil, err
		}
		lo, hi := min(least, greatest), max(least, greatest)
		if cfg.priority < lo || cfg.priority > hi {
			return nil, Errorf("NewStream", StatusInvalidArgument, "priority %d outside %s's range [%d, %d]", cfg.priority, dev, lo, hi)
		}
	}
	h, err := impl.StreamCreate(dev.Index, cfg.priority)
	if err != nil {
		return nil, err
	}
	return &Stream{id: streamIDs.Add(1), dev: dev, impl: impl, h: h, priority: cfg.priority}, nil
}

// streamIDs numbers the streams of the process, from 1.
var streamIDs atomic.Uint64

// ID identifies the stream among every stream this process created, from
// 1; it is never reused, so records of work on one stream can be grouped
// by it after the stream is gone.
func (s *Stream) ID() uint64 { return s.id }

func checkDevice(impl Impl, dev Device, op string) error {
	if dev.Type != impl.Type() {
		return Errorf(op, StatusInvalidArgument, "device %s given to the %s backend", dev, impl.Type())
	}
	n, err := impl.DeviceCount()
	if err != nil {
		return err
	}
	if dev.Index < 0 || dev.Index >= n {
		return Errorf(op, StatusInvalidArgument, "invalid device %s: %d %s device(s) present", dev, n, dev.Type)
	}
	return nil
}

// Device returns the stream's device.
func (s *Stream) Device() Device { return s.dev }

// Impl returns the backend that owns the stream.
func (s *Stream) Impl() Impl { return s.impl }

// Handle returns the backend's handle, for backends (a CCL implementation
// enqueues its work on it).
func (s *Stream) Handle() any { return s.h }

// Priority returns the priority the stream was created with.
func (s *Stream) Priority() int { return s.priority }

// Err says why s cannot take work — it is nil, a zero Stream (not made
// by NewStream) or destroyed — with status StatusInvalidArgument; nil
// when it can. A library that enqueues on a caller's stream checks it
// before committing to the call.
func (s *Stream) Err() error { return s.live("Stream") }

func (s *Stream) live(op string) error {
	if s == nil {
		return Errorf(op, StatusInvalidArgument, "nil stream")
	}
	if s.impl == nil {
		return Errorf(op, StatusInvalidArgument, "zero Stream (not made by NewStream)")
	}
	if s.destroyed.Load() {
		return Errorf(op, StatusInvalidArgument, "stream on %s used after Destroy", s.dev)
	}
	return nil
}

// Synchronize waits until all work enqueued on the stream has completed.
// With a context that can end, it polls and returns ctx's error wrapped in
// StatusTimeout when the context ends first.
func (s *Stream) Synchronize(ctx context.Context) error {
	if err := s.live("StreamSynchronize"); err != nil {
		return err
	}
	if ctx == nil || ctx.Done() == nil {
		return s.impl.StreamSynchronize(s.h)
	}
	return poll(ctx, "StreamSynchronize", func() error { return s.impl.StreamQuery(s.h) })
}

// Query returns nil when the stream is idle and an error wrapping
// StatusNotReady while work is pending.
func (s *Stream) Query() error {
	if err := s.live("StreamQuery"); err != nil {
		return err
	}
	return s.impl.StreamQuery(s.h)
}

// Ops counts the operations enqueued on s so far through this package —
// kernels, copies, memsets, event records, waits — and those reported with
// MarkEnqueued. Equal counts at two moments mean nothing was enqueued on s
// in between.
func (s *Stream) Ops() uint64 { return s.ops.Load() }

// WorkOps is Ops less the event records and the waits for events whose
// point is known (see WaitsAfter): the operations that can take the
// stream's time of their own. An event completes as the stream reaches
// it, so events recorded with nothing else between them mark the same
// point of the stream; equal counts at two moments mean that an event
// recorded at the second marks the point an event recorded at the first
// did, or the later of it and the points waited for in between. The
// profiler relies on it to let a range start where the previous one on the
// stream ended though another caller (a communication backend ordering its
// streams) recorded an event of its own between them, or had the stream
// wait for another.
func (s *Stream) WorkOps() uint64 { return s.work.Load() }

// Records counts the events recorded on s through Event.Record, by any
// caller: what a profiler adds to a stream, beside what its communication
// backends record to order their streams.
func (s *Stream) Records() uint64 { return s.records.Load() }

// Waits counts the waits WaitsAfter can report: equal counts at two
// moments mean s was told to wait for no known point in between.
func (s *Stream) Waits() uint64 { return s.waits.Load() }

// WaitsAfter appends to dst the points of other streams that s was told to
// wait for (WaitEvent on an event recorded through Record, on another
// stream of s's device) after its first ops operations (Ops), and reports
// true, when s remembers every such wait and nothing but events and waits
// was enqueued on s after the first of them. An event recorded on s after
// them completes at the latest of the point s had reached before them and
// the points returned.
func (s *Stream) WaitsAfter(ops uint64, dst []StreamPoint) ([]StreamPoint, bool) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	n := s.waits.Load()
	work := s.work.Load()
	kept := min(n, keptWaits)
	for i := uint64(0); i < kept; i++ {
		w := &s.waited[(n-1-i)%keptWaits]
		if w.ops <= ops {
			return dst, true
		}
		if w.work != work {
			return dst, false
		}
		dst = append(dst, w.StreamPoint)
	}
	// Every remembered wait came after ops: so may a forgotten one.
	return dst, s.forgotAt <= ops
}

// enqueued counts one operation other than an event record.
func (s *Stream) enqueued() {
	s.ops.Add(1)
	s.work.Add(1)
}

// MarkEnqueued counts one operation that a caller put on Handle()
// directly (a communication backend's kernel, a kernel of the caller's
// own). Work enqueued on the handle without it may be timed as part of the
// next device range on s that starts while s is still busy.
func (s *Stream) MarkEnqueued() { s.enqueued() }

// WaitEvent makes work enqueued on s after this call wait until ev has
// completed; the host does not wait.
func (s *Stream) WaitEvent(ev *Event) error {
	if err := s.live("StreamWaitEvent"); err != nil {
		return err
	}
	if err := ev.live("StreamWaitEvent"); err != nil {
		return err
	}
	if ev.dev.Type != s.dev.Type {
		return Errorf("StreamWaitEvent", StatusInvalidArgument, "event on %s, stream on %s", ev.dev, s.dev)
	}
	if pt, ok := ev.point(); ok && ev.dev == s.dev && pt.Stream != s.id {
		// Not work of s's own: the stream goes on at the later of where
		// it was and the point waited for (WaitsAfter).
		s.waitMu.Lock()
		n := s.waits.Load()
		if n >= keptWaits {
			s.forgotAt = s.waited[n%keptWaits].ops
		}
		s.waited[n%keptWaits] = waitPoint{StreamPoint: pt, ops: s.ops.Add(1), work: s.work.Load()}
		s.waits.Store(n + 1)
		s.waitMu.Unlock()
	} else if ok && pt.Stream == s.id {
		s.ops.Add(1) // a point s has reached by then: no wait at all
	} else {
		s.enqueued()
	}
	return s.impl.StreamWaitEvent(s.h, ev.h)
}

// WaitStream makes work enqueued on s after this call wait for the work
// enqueued on other so far, as recording an event on other and having s
// wait for it does (PyTorch's wait_stream). Where the event recorded last
// on other, by any caller, still marks other's current point — nothing
// but events, and waits for points other had passed, enqueued after it —
// s waits for that event, and spare is left as it was: a caller that
// orders its streams this way records no event of its own right after
// another caller (a profiler marking a range's end) has recorded one.
// Otherwise spare, an event of other's device, is recorded on other and
// waited for. It reports whether it recorded spare. The event waited for
// may be recorded again as soon as WaitStream returns, as with WaitEvent;
// until then a Record of it on another goroutine waits too. So where s's
// queue is full, WaitStream waits for s to make room, as any enqueue on s
// does, and so does that goroutine's Record: if s can make room only once
// that goroutine goes on, the two wait for each other. (A process group
// calls it on the goroutine that issues on the caller's stream; in the
// trainer, the one whose profiler records there too.)
func (s *Stream) WaitStream(other *Stream, spare *Event) (recorded bool, err error) {
	if err := s.live("StreamWaitStream"); err != nil {
		return false, err
	}
	if err := other.live("StreamWaitStream"); err != nil {
		return false, err
	}
	if ev := other.latest.Load(); ev != nil && ev.dev.Type == s.dev.Type {
		ev.mu.Lock()
		if ev.marks(other) {
			err := s.WaitEvent(ev)
			ev.mu.Unlock()
			return false, err
		}
		ev.mu.Unlock()
	}
	if err := spare.Record(other); err != nil {
		return true, err
	}
	return true, s.WaitEvent(spare)
}

// Destroy releases the stream. A second Destroy is an error, not a crash.
func (s *Stream) Destroy() error {
	if s == nil {
		return Errorf("StreamDestroy", StatusInvalidArgument, "nil stream")
	}
	if s.impl == nil {
		return Errorf("StreamDestroy", StatusInvalidArgument, "zero Stream (not made by NewStream)")
	}
	if s.destroyed.Swap(true) {
		return Errorf("StreamDestroy", StatusInvalidArgument, "stream on %s destroyed twice", s.dev)
	}
	return s.impl.StreamDestroy(s.h)
}

// poll calls query until it stops returning StatusNotReady or ctx ends:
// first yielding the processor between queries for a short while (most
// waits on a busy pipeline are short), then sleeping, backing off from
// 10µs to 200µs so a finished wait is noticed quickly.
func poll(ctx context.Context, op string, query func() error) error {
	spinUntil := time.Now().Add(5 * time.Microsecond)
	wait := 10 * time.Microsecond
	var timer *time.Timer
	for {
		err := query()
		if err == nil || StatusOf(err) != StatusNotReady {
			return err
		}
		if ctx.Err() != nil {
			return &Error{Op: op, Status: StatusTimeout, Detail: "gave up waiting", Err: ctx.Err()}
		}
		if time.Now().Before(spinUntil) {
			goruntime.Gosched()
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return &Error{Op: op, Status: StatusTimeout, Detail: "gave up waiting", Err: ctx.Err()}
		case <-timer.C:
		}
		if wait < 200*time.Microsecond {
			wait *= 2
		}
	}
}
