package cpu

import (
	"sync"
	"time"
)

// initialQueue is the ring's first size; it doubles up to the configured
// depth, so idle streams stay small.
const initialQueue = 64

// stream is the handle of a cpu stream: a bounded ring of items run in
// order by the stream's own goroutine.
type stream struct {
	owner    *Impl
	dev      int
	priority int
	depth    int // most items queued at once

	mu        sync.Mutex
	work      sync.Cond // the goroutine waits here for items
	room      sync.Cond // producers wait here while the ring is full
	idle      sync.Cond // synchronize waits here for completions
	ring      []item    // len is a power of two
	head, n   int
	enqueued  uint64 // items accepted so far
	completed uint64 // items finished so far
	closed    bool   // destroyed: accept nothing more, exit once drained
	exited    chan struct{}
}

func newStream(owner *Impl, dev, priority int) *stream {
	s := &stream{
		owner:    owner,
		dev:      dev,
		priority: priority,
		depth:    owner.cfg.queueDepth,
		ring:     make([]item, ceilPow2(min(initialQueue, owner.cfg.queueDepth))),
		exited:   make(chan struct{}),
	}
	s.work.L, s.room.L, s.idle.L = &s.mu, &s.mu, &s.mu
	return s
}

// ceilPow2 returns the least power of two at least n, for n up to
// initialQueue: a larger n could overflow (math.MaxInt as a depth did).
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// push appends a copy of *it, blocking while the ring holds depth items.
// A record item gets its event generation here, under the lock, so that a
// record refused on a destroyed stream leaves its event untouched.
func (s *stream) push(op string, it *item) error {
	s.mu.Lock()
	for s.n >= s.depth && !s.closed {
		s.room.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		return errDestroyed(op)
	}
	if s.n == len(s.ring) {
		s.grow()
	}
	slot := &s.ring[(s.head+s.n)&(len(s.ring)-1)]
	*slot = *it
	if tr := s.owner.trace.Load(); tr != nil && it.kind.traced() {
		slot.tr, slot.issued = tr, time.Now()
	}
	if slot.kind == opRecord {
		slot.gen = slot.ev.noteRecord(s, s.enqueued+1)
	}
	s.n++
	s.enqueued++
	s.work.Signal()
	s.mu.Unlock()
	return nil
}

func (s *stream) grow() {
	ring := make([]item, 2*len(s.ring))
	for i := range s.n {
		ring[i] = s.ring[(s.head+i)&(len(s.ring)-1)]
	}
	s.ring, s.head = ring, 0
}

// run is the stream's goroutine: it executes items in order and, once the
// stream is destroyed and drained, leaves its device and exits.
func (s *stream) run() {
	defer close(s.exited)
	defer s.owner.removeStream(s)
	s.mu.Lock()
	for {
		for s.n == 0 && !s.closed {
			s.work.Wait()
		}
		if s.n == 0 {
			s.mu.Unlock()
			return
		}
		slot := &s.ring[s.head]
		it := *slot
		*slot = item{} // drop references for the garbage collector
		s.head = (s.head + 1) & (len(s.ring) - 1)
		s.n--
		s.room.Signal()
		s.mu.Unlock()

		if it.tr != nil {
			s.runTraced(&it)
		} else {
			it.exec()
		}

		s.mu.Lock()
		s.completed++
		s.idle.Broadcast()
	}
}

// synchronize waits until everything enqueued before the call has run.
func (s *stream) synchronize() {
	s.mu.Lock()
	for target := s.enqueued; s.completed < target; {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// reached blocks until the stream has finished its first ticket items
// (the item enqueued as number ticket, from 1, and all before it).
func (s *stream) reached(ticket uint64) {
	s.mu.Lock()
	for s.completed < ticket {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// busy reports whether enqueued work has not yet finished.
func (s *stream) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed < s.enqueued
}

// close stops the stream from accepting work; the goroutine drains what is
// queued and exits. It reports false if the stream was already closed.
func (s *stream) close() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed = true
	s.work.Signal()
	s.room.Broadcast() // blocked producers return an error
	return true
}

func (s *stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
