package analysis

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Use is what occupied a rank at an instant of its step, for the
// attribution of its wall time (Rank.Time).
type Use uint8

// Uses, in the order they take an instant: computing wins over moving
// data, moving data over idling.
const (
	// UseCompute: busy by the profiler's definition; the slice names the
	// computation's phase and chunk.
	UseCompute Use = iota
	// UseTransfer: a collective or point-to-point transfer ran and
	// nothing computed.
	UseTransfer
	// UseBubble: nothing computed or moved data within the step's Span
	// (its first to last forward or backward over every rank) — the
	// pipeline bubble as the rank lived it.
	UseBubble
	// UseIdle: nothing computed or moved data outside the Span: loading
	// data, the optimizer's host side, waiting for the step to end.
	UseIdle
)

var useNames = [...]string{UseCompute: "compute", UseTransfer: "transfer", UseBubble: "idle: bubble", UseIdle: "idle: other"}

func (u Use) String() string {
	if int(u) < len(useNames) {
		return useNames[u]
	}
	return "unknown"
}

// Slice is a part of a rank's step wall time: how long it was used for
// one thing.
type Slice struct {
	Use Use
	// Phase, Stage, Chunk and Microbatch label a computation
	// (profiler.None where unset); Op names a transfer.
	Phase                    profiler.Phase
	Stage, Chunk, Microbatch int
	Op                       string
	// Waiting marks idle time during which the rank recorded a wait for
	// its input (a communication-phase device range): idle because a peer
	// had not sent yet; and, for a transfer, the part of a collective
	// before its last rank arrived: waiting for that rank, not moving
	// data (Collective.Members' Wait and Transfer).
	Waiting bool
	Time    time.Duration
}

type useEvent struct {
	at    time.Duration
	start bool
	idx   int32 // into the rank's items
}

// attribute splits the rank's step wall time into slices that add up to
// it exactly: at each instant the first of computing (the busy intervals,
// named by a computation running then), a transfer, or idling (bubble
// inside span, other outside it, marked waiting where a wait ran).
func attribute(rk *Rank, items []item, span profiler.Interval, lastArrival map[collKey]time.Duration, sc *scratch) {
	wall := rk.Wall
	if wall.Len() <= 0 {
		return
	}
	work, ev, cuts := sc.work[:0], sc.ev[:0], sc.cuts[:0]
	defer func() { sc.work, sc.ev, sc.cuts = work, ev, cuts }()
	for i := range items {
		it := &items[i]
		if it.isStep || it.work.Activity == profiler.ActivityNone {
			continue
		}
		work = append(work, it.work)
		occ := it.occupied()
		s, e := max(occ.Start, wall.Start), min(occ.End, wall.End)
		if e <= s {
			continue
		}
		ev = append(ev, useEvent{s, true, int32(i)}, useEvent{e, false, int32(i)})
		if c := it.coll; c != nil && it.kind == profiler.KindCollective {
			if la, ok := lastArrival[collKey{c.group, c.gid, c.seq}]; ok && la > s && la < e {
				cuts = append(cuts, la)
			}
		}
	}
	busy := profiler.BusyIntervals(nil, work)
	// Boundaries of busy time and of the span cut slices too.
	cuts = append(cuts, wall.Start, wall.End)
	for _, b := range busy {
		cuts = append(cuts, b.Start, b.End)
	}
	if span.Len() > 0 {
		cuts = append(cuts, span.Start, span.End)
	}
	for _, c := range cuts {
		if c >= wall.Start && c <= wall.End {
			ev = append(ev, useEvent{c, false, -1})
		}
	}
	slices.SortFunc(ev, func(a, b useEvent) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		// Ends before starts: an item ending where another starts does
		// not hold the instant after.
		if a.start != b.start {
			if a.start {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.idx, b.idx)
	})
	active := newActiveSet(items)
	if sc.slicesBy == nil {
		sc.slicesBy = map[Slice]time.Duration{}
	}
	slicesBy := sc.slicesBy
	defer clear(slicesBy)
	bi := 0
	inBusy := func(t time.Duration) bool {
		for bi < len(busy) && busy[bi].End <= t {
			bi++
		}
		return bi < len(busy) && busy[bi].Start <= t
	}
	prev := wall.Start
	for k := 0; k <= len(ev); k++ {
		at := wall.End
		if k < len(ev) {
			at = min(max(ev[k].at, wall.Start), wall.End)
		}
		if at > prev {
			key := classify(items, active, prev, inBusy(prev), span.Len() > 0 && prev >= span.Start && prev < span.End, lastArrival)
			slicesBy[key] += at - prev
			prev = at
		}
		if k == len(ev) {
			break
		}
		if e := ev[k]; e.idx >= 0 {
			if e.start {
				active.add(e.idx)
			} else {
				active.remove(e.idx)
			}
		}
	}
	rk.Time = rk.Time[:0]
	for key, d := range slicesBy {
		key.Time = d
		rk.Time = append(rk.Time, key)
	}
	slices.SortFunc(rk.Time, func(a, b Slice) int {
		if c := cmp.Compare(a.Use, b.Use); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Phase, b.Phase); c != 0 {
			return c
		}
		// Every field of the key, or slices alike but for one left out
		// (a rank computing for two stages) come in the map's order.
		if c := cmp.Compare(a.Stage, b.Stage); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Chunk, b.Chunk); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Microbatch, b.Microbatch); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Op, b.Op); c != 0 {
			return c
		}
		if a.Waiting != b.Waiting {
			if a.Waiting {
				return 1
			}
			return -1
		}
		return 0
	})
}

// activeSet holds the items active at an instant of attribute's sweep so
// that the first computation and the first transfer among them, and
// whether a wait is among them, cost O(log n) to find: a pass over the
// active items at every boundary is quadratic in a step of thousands of
// overlapping items (a wrapped job's kernels on many streams).
type activeSet struct {
	items             []item
	on                []bool
	compute, transfer idxHeap // lazily pruned of items no longer on
	waits             int
}

func newActiveSet(items []item) *activeSet {
	return &activeSet{items: items, on: make([]bool, len(items))}
}

// add makes item idx active; an item starts once, ends once.
func (a *activeSet) add(idx int32) {
	a.on[idx] = true
	switch a.items[idx].work.Activity {
	case profiler.ActivityCompute:
		heap.Push(&a.compute, idx)
	case profiler.ActivityTransfer:
		heap.Push(&a.transfer, idx)
	case profiler.ActivityWait:
		a.waits++
	}
}

func (a *activeSet) remove(idx int32) {
	if !a.on[idx] {
		return
	}
	a.on[idx] = false
	if a.items[idx].work.Activity == profiler.ActivityWait {
		a.waits--
	}
}

// first is the lowest active index in h, -1 for none.
func (a *activeSet) first(h *idxHeap) int32 {
	for h.Len() > 0 && !a.on[(*h)[0]] {
		heap.Pop(h)
	}
	if h.Len() == 0 {
		return -1
	}
	return (*h)[0]
}

// idxHeap is a min-heap of item indices (container/heap).
type idxHeap []int32

func (h idxHeap) Len() int           { return len(h) }
func (h idxHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idxHeap) Push(x any)        { *h = append(*h, x.(int32)) }
func (h *idxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// classify names what holds an instant, given the items active then.
// Among several computations (or transfers) running at once, the one
// recorded first names the instant: a stable choice.
func classify(items []item, active *activeSet, at time.Duration, busy, inSpan bool, lastArrival map[collKey]time.Duration) Slice {
	s := Slice{Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None}
	compute, transfer := active.first(&active.compute), active.first(&active.transfer)
	waiting := active.waits > 0
	switch {
	case busy && compute >= 0:
		it := &items[compute]
		s.Use, s.Phase, s.Stage, s.Chunk, s.Microbatch = UseCompute, it.phase, int(it.stage), int(it.chunk), int(it.mb)
	case busy:
		s.Use = UseCompute
	case transfer >= 0:
		s.Use = UseTransfer
		if c := items[transfer].coll; c != nil {
			s.Op = c.op
			if la, ok := lastArrival[collKey{c.group, c.gid, c.seq}]; ok && items[transfer].kind == profiler.KindCollective && at < la {
				s.Waiting = true
			}
		}
	case inSpan:
		s.Use, s.Waiting = UseBubble, waiting
	default:
		s.Use, s.Waiting = UseIdle, waiting
	}
	return s
}
