package cpu

import (
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

var _ runtime.WorkTracer = (*Impl)(nil)

// maxTracedWork bounds the finished work a trace holds between two
// Collects; work beyond it is counted in Dropped.
const maxTracedWork = 1 << 20

// workTrace is the CPU backend's trace of its streams' work: each item
// that computes or moves data (not event records, waits or releases) is
// stamped when enqueued, and its stream's goroutine stamps its start and
// end and keeps it here until collected. A stream runs its items in
// order, so each stream's work arrives in the order it was issued.
type workTrace struct {
	owner *Impl

	mu      sync.Mutex
	done    []runtime.Work
	spare   []runtime.Work
	dropped uint64
	stopped bool
}

// StartWorkTrace starts tracing the work of every stream of m enqueued
// from now on. One trace runs at a time per Impl.
func (m *Impl) StartWorkTrace() (runtime.BackendWorkTrace, error) {
	t := &workTrace{owner: m}
	if !m.trace.CompareAndSwap(nil, t) {
		return nil, runtime.Errorf("StartWorkTrace", runtime.StatusAlreadyExists, "a work trace of this cpu backend is already running")
	}
	return t, nil
}

// traced reports whether an item of this kind is work a trace reports.
func (k opKind) traced() bool {
	switch k {
	case opRecord, opWait, opRelease:
		return false
	}
	return true
}

// add keeps one finished item's times.
func (t *workTrace) add(w runtime.Work) {
	t.mu.Lock()
	if t.stopped || len(t.done) >= maxTracedWork {
		if !t.stopped {
			t.dropped++
		}
		t.mu.Unlock()
		return
	}
	t.done = append(t.done, w)
	t.mu.Unlock()
}

// Collect reports the work finished since the last call; it names no
// time before which all is reported (work still queued or running is
// not), and needs none: a stream runs its work in issue order, and its
// goroutine adds each piece here before it counts it done.
func (t *workTrace) Collect(_ bool, fn func(runtime.Work)) (time.Time, error) {
	t.mu.Lock()
	done := t.done
	t.done, t.spare = t.spare[:0], nil
	t.mu.Unlock()
	for _, w := range done {
		fn(w)
	}
	clear(done)
	t.mu.Lock()
	if t.spare == nil {
		t.spare = done[:0]
	}
	t.mu.Unlock()
	return time.Time{}, nil
}

func (t *workTrace) Dropped() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

func (t *workTrace) Stop() error {
	t.mu.Lock()
	t.stopped = true
	t.done = nil
	t.mu.Unlock()
	t.owner.trace.CompareAndSwap(t, nil)
	return nil
}

// runTraced runs it on its stream's goroutine and hands its times to the
// trace that was running when it was enqueued.
func (s *stream) runTraced(it *item) {
	start := time.Now()
	it.exec()
	it.tr.add(runtime.Work{Stream: s, Issued: it.issued, Start: start, End: time.Now()})
}
