package cuda

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

var _ runtime.WorkTracer = (*Impl)(nil)

// The CUDA backend's work trace is CUPTI's activity records of kernels,
// copies and memsets, with each kernel's enqueue time (CUPTI's latency
// timestamps), put on the host's monotonic clock. A kernel's enqueue time
// says when it was issued; copies and memsets carry none, so the backend
// notes the host time around each one it issues on a stream while a
// trace runs and matches them with the records in issue order
// (correlation ids), checked against the enqueue times of the kernels
// issued just before and after; a record no note matches (a library's own
// memset) is placed just before the next kernel.

const (
	// maxIssueNotes bounds the copies and memsets noted per stream
	// between two collects; older notes are dropped first.
	maxIssueNotes = 1 << 14
	// maxHeldActivities bounds the records a trace holds between two
	// collects; more are dropped and counted.
	maxHeldActivities = 1 << 20
)

// issueNote is when the host issued one copy or memset: the call began
// at from and returned at to.
type issueNote struct{ from, to time.Time }

// issueNotes is a stream's FIFO of issueNote.
type issueNotes struct {
	mu    sync.Mutex
	notes []issueNote
	head  int
}

func (q *issueNotes) push(n issueNote) {
	q.mu.Lock()
	if len(q.notes)-q.head >= maxIssueNotes {
		q.head++
	}
	if q.head > 0 && q.head == len(q.notes) {
		q.notes, q.head = q.notes[:0], 0
	}
	q.notes = append(q.notes, n)
	q.mu.Unlock()
}

// pop removes and returns the oldest note.
func (q *issueNotes) pop() (issueNote, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head >= len(q.notes) {
		return issueNote{}, false
	}
	n := q.notes[q.head]
	q.head++
	if q.head == len(q.notes) {
		q.notes, q.head = q.notes[:0], 0
	}
	return n, true
}

// peek returns the oldest note without removing it.
func (q *issueNotes) peek() (issueNote, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head >= len(q.notes) {
		return issueNote{}, false
	}
	return q.notes[q.head], true
}

// enqueueTimes is "on": the work trace asks CUPTI for kernels' enqueue
// times, which place them in ranges. Linked as "off" (go build -ldflags
// "-X github.com/trainscope/trainscope/runtime/cuda.enqueueTimes=off"),
// it asks for none and every kernel goes unplaced (counted lost): a build
// only for measuring what the enqueue times cost a job
// (scripts/gpu-bench.sh build makes it as .bin/profile-run-noq).
var enqueueTimes = "on"

// workTrace is the backend's runtime.BackendWorkTrace.
type workTrace struct {
	m  *Impl
	at *ActivityTrace

	mu      sync.Mutex
	streams map[uint32]*stream // CUPTI's stream id → the stream
	dropped uint64
	foreign uint64 // records of streams not the backend's (Foreign)
	batch   []Activity
}

// StartWorkTrace starts CUPTI's activity records of every kernel, copy
// and memset with kernels' enqueue times. It fails wrapping
// StatusUnavailable where libcupti is not found, StatusNotSupported where
// it cannot name streams (cuptiGetStreamIdEx, CUPTI 11.x and later), and
// StatusAlreadyExists while another activity trace runs in the process.
func (m *Impl) StartWorkTrace() (runtime.BackendWorkTrace, error) {
	at, err := m.StartActivityTrace(ActivityOptions{Queued: enqueueTimes != "off"})
	if err != nil {
		return nil, err
	}
	if at.api.streamID == 0 {
		_ = at.Stop()
		return nil, runtime.Errorf("StartWorkTrace", runtime.StatusNotSupported, "this libcupti has no cuptiGetStreamIdEx: its records cannot be tied to streams")
	}
	t := &workTrace{m: m, at: at, streams: map[uint32]*stream{}}
	m.live.Range(func(k, _ any) bool {
		t.watch(k.(*stream))
		return true
	})
	m.wtrace.Store(t)
	return t, nil
}

// watch learns s's CUPTI stream id.
func (t *workTrace) watch(s *stream) {
	f := dl.Get()
	defer f.Put()
	if dl.Call(t.at.api.streamID, 0, s.h, 0, f.OutPtr(0)) != 0 {
		return
	}
	t.mu.Lock()
	t.streams[uint32(f.Out[0])] = s
	t.mu.Unlock()
}

// clock reads CUPTI's clock between two host readings, three times, and
// returns the tightest pair: CUPTI's c was read at host time h.
func (t *workTrace) clock() (c uint64, h time.Time) {
	best := time.Duration(1<<63 - 1)
	for range 3 {
		a := time.Now()
		v := t.at.Now()
		b := time.Now()
		if w := b.Sub(a); w < best {
			best, c, h = w, v, a.Add(w/2)
		}
	}
	return c, h
}

// launchSlack is how long before CUPTI asks for a buffer the launch
// whose record goes first in it may have been enqueued: the request comes
// from inside that launch call.
const launchSlack = 100 * time.Microsecond

// Collect reports the finished work CUPTI handed over, and the time
// before which all work issued has been: CUPTI hands buffers back in no
// set order (one that holds a record of work still running waits for it),
// so a stream's later work may come before its earlier; what it still
// holds was all issued after it asked for the oldest of those buffers.
func (t *workTrace) Collect(force bool, fn func(runtime.Work)) (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	batch := t.batch[:0]
	flag := uintptr(0)
	if force {
		flag = 1
	}
	held, err := t.at.flushHeld(flag, func(a Activity) {
		if len(batch) >= maxHeldActivities {
			t.dropped++
			return
		}
		batch = append(batch, a)
	})
	c, h := t.clock()
	host := func(v uint64) time.Time { return h.Add(time.Duration(int64(v - c))) }
	// Each stream's records in the order the device ran them, which is
	// the order they were issued: a stream runs one piece at a time.
	// (Correlation ids would not do: CUPTI numbers runtime and driver
	// API calls apart.)
	slices.SortFunc(batch, func(x, y Activity) int {
		if c := cmp.Compare(x.Stream, y.Stream); c != 0 {
			return c
		}
		return cmp.Compare(x.Start, y.Start)
	})
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].Stream == batch[i].Stream {
			j++
		}
		t.stream(batch[i:j], host, fn)
		i = j
	}
	clear(batch)
	t.batch = batch[:0]
	if err != nil {
		return time.Time{}, err
	}
	return held.Add(-launchSlack), nil
}

// stream reports one stream's records, in the order it ran them: kernels
// issued at their enqueue times, copies and memsets at the stream's notes
// (match) between the kernels run before and after them.
func (t *workTrace) stream(recs []Activity, host func(uint64) time.Time, fn func(runtime.Work)) {
	s, ok := t.streams[recs[0].Stream]
	if !ok {
		// The legacy default stream (copies and memsets with no
		// stream) or another library's: no range's work.
		t.foreign += uint64(len(recs))
		return
	}
	lower := s.lastQueued
	var upper time.Time
	next := 0 // the first kernel at or after the record at hand
	for i, a := range recs {
		var issued time.Time
		if a.Kind == ActivityKernel {
			if a.Queued == 0 {
				t.dropped++
				continue
			}
			issued = host(a.Queued)
			lower = issued
		} else {
			if next <= i {
				next, upper = i+1, time.Time{}
				for ; next < len(recs); next++ {
					if k := recs[next]; k.Kind == ActivityKernel && k.Queued != 0 {
						upper = host(k.Queued)
						break
					}
				}
			}
			issued = s.notes.match(lower, upper)
		}
		fn(runtime.Work{Stream: s, Issued: issued, Start: host(a.Start), End: host(a.End)})
	}
	s.lastQueued = lower
}

// match returns when the copy or memset whose record lies between kernels
// enqueued at lower and upper (zero: unknown) was issued: the oldest
// note, where it fits between them. A note that ends before lower is of a
// record lost: dropped. A note that begins after upper is of a later
// record: this one is not the backend's, and is placed just before upper
// (or at lower, or now, where that is not known).
func (q *issueNotes) match(lower, upper time.Time) time.Time {
	for {
		n, ok := q.peek()
		if !ok {
			break
		}
		if !lower.IsZero() && n.to.Before(lower) {
			q.pop()
			continue
		}
		if !upper.IsZero() && n.from.After(upper) {
			break
		}
		q.pop()
		mid := n.from.Add(n.to.Sub(n.from) / 2)
		if !lower.IsZero() && mid.Before(lower) {
			mid = lower
		}
		if !upper.IsZero() && mid.After(upper) {
			mid = upper
		}
		return mid
	}
	switch {
	case !upper.IsZero():
		return upper.Add(-time.Nanosecond)
	case !lower.IsZero():
		return lower.Add(time.Nanosecond)
	}
	return time.Now()
}

func (t *workTrace) Dropped() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Records of work unfinished at a forced flush came without times:
	// lost too.
	_, dropped, unfinished := t.at.Stats()
	return t.dropped + dropped + unfinished
}

// Foreign counts the records of work on streams the backend did not
// create, or whose CUPTI id it could not learn.
func (t *workTrace) Foreign() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.foreign
}

func (t *workTrace) Stop() error {
	t.m.wtrace.CompareAndSwap(t, nil)
	return t.at.Stop()
}

// issuing returns the time now while a work trace runs, to pass to
// noteIssue once the copy or memset is issued; else the zero time, and
// no clock is read.
func (m *Impl) issuing() time.Time {
	if m.wtrace.Load() == nil {
		return time.Time{}
	}
	return time.Now()
}

// noteIssue notes a copy or memset issued on s from from (issuing) until
// now, for the work trace running.
func (m *Impl) noteIssue(s *stream, from time.Time) {
	if !from.IsZero() && m.wtrace.Load() != nil {
		s.notes.push(issueNote{from, time.Now()})
	}
}
