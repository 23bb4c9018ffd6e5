package profiler

import "sync/atomic"

// ring is a single-producer, single-consumer queue of fixed capacity (a
// power of two). The recording goroutine is the only producer and the
// collector, under Profiler.mu, the only consumer; the two meet only in the
// atomic head and tail, so recording takes no lock.
type ring[T any] struct {
	slots    []T
	mask     uint64
	halfMask uint64 // (seq+1)&halfMask == 0 once every half ring
	_        [56]byte
	tail     atomic.Uint64 // next slot to fill; written by the producer
	_        [56]byte
	head     atomic.Uint64 // next slot to read; written by the consumer
	_        [56]byte
	// Producer-local copy of head, refreshed only when the ring looks full,
	// so the producer rarely reads the consumer's cache line.
	headSeen uint64
}

func newRing[T any](size int) *ring[T] {
	n := 1
	for n < size {
		n <<= 1
	}
	return &ring[T]{slots: make([]T, n), mask: uint64(n - 1), halfMask: uint64(max(n/2, 1) - 1)}
}

// reserve returns the slot the producer may fill next and its sequence
// number, or nil when the ring is full. The slot becomes visible to the
// consumer at publish.
func (q *ring[T]) reserve() (*T, uint64) {
	t := q.tail.Load()
	if t-q.headSeen > q.mask {
		q.headSeen = q.head.Load()
		if t-q.headSeen > q.mask {
			return nil, 0
		}
	}
	return &q.slots[t&q.mask], t
}

// publish makes the slots up to and including seq visible.
func (q *ring[T]) publish(seq uint64) { q.tail.Store(seq + 1) }

// at returns the slot of sequence number seq, for the consumer.
func (q *ring[T]) at(seq uint64) *T { return &q.slots[seq&q.mask] }
