package profiler

import (
	"sync/atomic"
	"unsafe"
)

// ring is a single-producer, single-consumer queue of fixed capacity (a
// power of two). The recording goroutine is the only producer and the
// collector, under Profiler.mu, the only consumer; the two meet only in the
// atomic head and tail, so recording takes no lock.
//
// The slots come in segments of equal size, each allocated when the
// producer first reaches it and kept from then on, so a queue holds memory
// for the most ranges it has had in flight at once, not for its capacity:
// a process of a thousand ranks, each drained every few milliseconds, does
// not hold a full buffer for each.
// The producer stores a segment's pointer before it publishes a slot of
// it, and the consumer reads only published slots, so the consumer finds
// every segment it reads already there.
type ring[T any] struct {
	segs     []atomic.Pointer[[]T] // nil until the producer first reaches one
	segShift uint                  // slot index >> segShift is its segment
	segMask  uint64                // slot index & segMask is its place in the segment
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
	// The producer's current segment (nil before the first), the sequence
	// number of its first slot, and the first sequence number
	// tryReserve leaves to reserve: the end of the segment or the last
	// head seen plus the capacity, whichever comes first.
	seg   []T
	segAt uint64
	limit uint64
}

// segmentBytes is the least size of a segment, unless the whole ring is
// smaller. From 32 KiB the Go allocator gives an object with pointers
// whole pages and no header, so the segments of a filled ring take what
// one array of its capacity would; a smaller one carries an 8-byte header
// that moves a power-of-two size up a size class, up to 12% more. A
// segment is also made a whole number of the allocator's pages where that
// takes at most maxSegmentBytes: 256 slots of 176 bytes would be 5.5
// pages, rounded up to 6 (9% more), where 512 are 11.
const (
	segmentBytes    = 32 << 10
	maxSegmentBytes = 1 << 20
	allocPageBytes  = 8 << 10
)

func newRing[T any](size int) *ring[T] {
	n := 1
	for n < size {
		n <<= 1
	}
	var zero T
	per, shift := 1, uint(0) // slots a segment, a power of two, and its log2
	slot := unsafe.Sizeof(zero)
	for per < n {
		b := uintptr(per) * slot
		if b >= segmentBytes && (b%allocPageBytes == 0 || b >= maxSegmentBytes) {
			break
		}
		per <<= 1
		shift++
	}
	return &ring[T]{
		segs:     make([]atomic.Pointer[[]T], n/per),
		segShift: shift,
		segMask:  uint64(per - 1),
		mask:     uint64(n - 1),
		halfMask: uint64(max(n/2, 1) - 1),
	}
}

// tryReserve is reserve's fast path, small enough to be inlined where
// reserve is not: the slot the producer may fill next and its sequence
// number, or nil when reserve has more to do (the ring looks full, or the
// slot is in a segment the producer has not yet entered).
func (q *ring[T]) tryReserve() (*T, uint64) {
	t := q.tail.Load()
	if t >= q.limit {
		return nil, 0
	}
	return &q.seg[t&q.segMask], t
}

// reserve returns the slot the producer may fill next and its sequence
// number, or nil when the ring is full. The slot becomes visible to the
// consumer at publish. Beyond tryReserve it reads the consumer's head
// when the ring looks full, and enters the next segment, allocating it
// the first time it is reached: once a segment's worth of ranges.
func (q *ring[T]) reserve() (*T, uint64) {
	t := q.tail.Load()
	if t-q.headSeen > q.mask {
		q.headSeen = q.head.Load()
		if t-q.headSeen > q.mask {
			return nil, 0
		}
	}
	if start := t &^ q.segMask; start != q.segAt || q.seg == nil {
		p := &q.segs[(t&q.mask)>>q.segShift]
		s := p.Load()
		if s == nil {
			seg := make([]T, q.segMask+1)
			s = &seg
			p.Store(s) // before publish stores the tail past any slot of it
		}
		q.seg, q.segAt = *s, start
	}
	q.limit = min(q.headSeen+q.mask+1, q.segAt+q.segMask+1)
	return &q.seg[t&q.segMask], t
}

// publish makes the slots up to and including seq visible.
func (q *ring[T]) publish(seq uint64) { q.tail.Store(seq + 1) }

// at returns the slot of sequence number seq, for the consumer; seq must
// be below the tail it loaded.
func (q *ring[T]) at(seq uint64) *T {
	i := seq & q.mask
	return &(*q.segs[i>>q.segShift].Load())[i&q.segMask]
}
