package runtime

import (
	"reflect"
	"sync"
	"time"
)

// WorkTracer is an optional backend capability: a trace of the device
// work itself, reported after it ran — when the host issued each piece,
// when the device started and ended it — with nothing put in the streams
// (CUDA's through CUPTI's activity records, the CPU backend's from its
// stream goroutines). A profiler can time every range from it instead of
// recording two events per range. Discover it with a type assertion, or
// start one with StartWorkTrace.
type WorkTracer interface {
	// StartWorkTrace begins tracing the work of every stream of the
	// backend enqueued from now on. A backend may allow one trace at a
	// time (CUPTI's activity API is process-wide): a second start then
	// fails with StatusAlreadyExists.
	StartWorkTrace() (BackendWorkTrace, error)
}

// BackendWorkTrace is what a WorkTracer returns; callers use it through
// WorkTrace.
type BackendWorkTrace interface {
	// Collect calls fn with each piece of work that finished since the
	// last call and has not been reported yet, one stream's in the
	// order it was issued. With force it first waits for nothing but
	// hands over everything the backend still holds of finished work,
	// which may cost the times of work that has not finished yet (it
	// is then reported with zero Start and End, or not at all).
	//
	// It returns, where the backend knows it, a time before which every
	// piece of work issued has now been reported (or lost and counted
	// in Dropped): a range that ended before it has all its work. Zero
	// means the backend cannot say, and that each stream's work is
	// reported in issue order across calls, so that work reported on a
	// stream tells that all its work issued earlier has been.
	Collect(force bool, fn func(Work)) (complete time.Time, err error)
	// Dropped counts pieces of work the trace lost: its buffers were
	// full, or it reported them without the times a range needs.
	Dropped() uint64
	// Stop ends the trace; work still held is lost.
	Stop() error
}

// ForeignCounter is optional for a BackendWorkTrace: Foreign counts the
// pieces of work the trace saw on streams that are not the backend's
// (CUDA's legacy default stream, which copies with no stream use, or a
// stream another library created). They are no range's work and are not
// reported; nor are they lost.
type ForeignCounter interface {
	Foreign() uint64
}

// Work is one piece of device work a trace reports: a kernel, a copy or a
// memset, or (on the CPU backend) any operation of a stream. Times are on
// the host's monotonic clock, Go's (a time.Time's monotonic reading):
// Issued is when the host enqueued it, Start and End when the device ran
// it.
type Work struct {
	Stream             any // the stream's handle (Stream.Handle)
	Issued, Start, End time.Time
}

// WorkTrace is a running trace of a backend's device work
// (WorkTracer). Its methods may be called from any goroutine.
type WorkTrace struct {
	impl Impl
	bt   BackendWorkTrace

	mu      sync.Mutex
	stopped bool
	// comparable caches which handle types can be map keys: a handle
	// of another type is counted in Dropped, not handed on (comparing
	// it would panic).
	comparable map[reflect.Type]bool
	refused    uint64
}

// StartWorkTrace starts a trace of impl's device work. It fails with
// StatusNotSupported where the backend has none (not a WorkTracer), and
// with the backend's error where its trace cannot start (no CUPTI, another
// trace running).
func StartWorkTrace(impl Impl) (*WorkTrace, error) {
	if isNilImpl(impl) {
		return nil, Errorf("StartWorkTrace", StatusInvalidArgument, "nil backend")
	}
	wt, ok := impl.(WorkTracer)
	if !ok {
		return nil, Errorf("StartWorkTrace", StatusNotSupported, "backend %s cannot trace its device work", impl.Type())
	}
	bt, err := wt.StartWorkTrace()
	if err != nil {
		return nil, err
	}
	if bt == nil {
		return nil, Errorf("StartWorkTrace", StatusError, "backend %s returned no trace", impl.Type())
	}
	return &WorkTrace{impl: impl, bt: bt, comparable: map[reflect.Type]bool{}}, nil
}

// Impl is the backend whose work the trace reports: the trace times the
// streams of this backend, no other.
func (t *WorkTrace) Impl() Impl { return t.impl }

// Collect hands fn the work finished since the last call, and says
// before when all work issued has been reported, where the backend knows
// (see BackendWorkTrace.Collect). Work whose stream handle cannot be
// compared is counted in Dropped instead. After Stop it returns an error
// and calls fn for nothing.
func (t *WorkTrace) Collect(force bool, fn func(Work)) (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return time.Time{}, Errorf("WorkTrace", StatusInvalidArgument, "Collect after Stop")
	}
	return t.bt.Collect(force, func(w Work) {
		typ := reflect.TypeOf(w.Stream)
		ok, seen := t.comparable[typ]
		if !seen {
			ok = typ != nil && typ.Comparable()
			t.comparable[typ] = ok
		}
		if !ok {
			t.refused++
			return
		}
		fn(w)
	})
}

// Dropped counts the work the trace lost, or reported on a stream handle
// that cannot be compared.
func (t *WorkTrace) Dropped() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bt.Dropped() + t.refused
}

// Foreign counts the work the trace saw on streams that are not its
// backend's (ForeignCounter); 0 where the backend does not say.
func (t *WorkTrace) Foreign() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.bt.(ForeignCounter); ok {
		return f.Foreign()
	}
	return 0
}

// Stop ends the trace. A second Stop is an error.
func (t *WorkTrace) Stop() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return Errorf("WorkTrace", StatusInvalidArgument, "stopped twice")
	}
	t.stopped = true
	return t.bt.Stop()
}
