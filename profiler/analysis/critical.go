package analysis

import (
	"cmp"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// CriticalPath is the chain of computations and transfers across ranks
// that set the step's time: walking back from the step's last activity,
// each link is the activity that became ready last — the one before it on
// the same rank, or, for a receive, the send it waited for, or, for a
// collective, the rank that arrived last — and the gaps between links are
// time during which the path's rank had nothing recorded to do.
type CriticalPath struct {
	// Segments in time order; they do not overlap.
	Segments []Segment
	// Compute, Transfer and Gap add the segments up by kind; their sum is
	// Span's length.
	Compute, Transfer, Gap time.Duration
	Span                   profiler.Interval
}

// SegmentKind is what a critical-path segment was.
type SegmentKind uint8

// Segment kinds.
const (
	SegmentCompute  SegmentKind = iota // a computation (device time)
	SegmentTransfer                    // a point-to-point transfer or a collective
	SegmentGap                         // nothing recorded on the path's rank
)

var segmentNames = [...]string{SegmentCompute: "compute", SegmentTransfer: "transfer", SegmentGap: "gap"}

func (k SegmentKind) String() string {
	if int(k) < len(segmentNames) {
		return segmentNames[k]
	}
	return "unknown"
}

// Segment is one link of the critical path on one rank.
type Segment struct {
	Kind SegmentKind
	Rank int
	// Phase, Stage, Chunk and Microbatch are the activity's labels
	// (profiler.None where unset); Op names a transfer.
	Phase                    profiler.Phase
	Stage, Chunk, Microbatch int
	Op                       string
	profiler.Interval
}

// criticalTolerance absorbs clock rounding between an activity's end and
// the start of what waited for it.
const criticalTolerance = time.Microsecond

type activity struct {
	it   *item
	span profiler.Interval
	// prev is the activity before it on its rank (graph.before); next is
	// the path's link before it and start where its segment starts: prev
	// and its start, or the send a receive waited for, or the last
	// arrival a collective member waited for, and the wait's start. Both
	// are the activity's alone, whatever path comes to it, so they are
	// worked out once (graph.chain, where chained is false) and every walk
	// follows them.
	prev, next *activity
	start      time.Duration
	chained    bool
	// seen is the last walk that passed the activity (walks stop at an
	// activity they passed before); mark and pos say where the last
	// arrival's path of a blame comparison passed it (see blamer).
	seen, mark uint32
	pos        int32
	// Where the activity lies in the graph of next links, for reaches:
	// its place in the forest the links make (tin, tout), the loop of
	// links it is on (cycle) and the one its path ends in (loop), each −1
	// for none; see graph.index.
	tin, tout, cycle, loop int32
}

// graph is a step's activities — computations by the busy definition,
// transfers and collectives — and the dependencies between them that the
// critical path follows: the rank's previous activity, the send a
// receive waited for, a collective's last arrival. The critical path
// walks it back from the step's last activity; the straggler scores walk
// it back from each collective's arrivals (blame).
type graph struct {
	byRank      map[int][]*activity // by end
	recvs       map[*activity]*activity
	lastArrival map[collKey]*activity
	members     map[memberKey]*activity
	last        *activity
	walks       uint32
	indexed     bool // index has run
}

type memberKey struct {
	collKey
	rank int
}

func newGraph(items []item) *graph {
	g := &graph{byRank: map[int][]*activity{}}
	all := make([]activity, 0, len(items)) // one allocation; never grows
	for i := range items {
		it := &items[i]
		if it.isStep || (it.work.Activity != profiler.ActivityCompute && it.coll == nil) {
			continue
		}
		all = append(all, activity{it: it, span: it.span()})
		a := &all[len(all)-1]
		if it.coll == nil {
			a.span = it.work.Interval
		}
		// Len is never negative: an inverted span (a malformed record,
		// its end before its start) ran at no instant and is no link,
		// least of all the step's last activity.
		if a.span.End < a.span.Start {
			continue
		}
		g.byRank[it.rank] = append(g.byRank[it.rank], a)
		if g.last == nil || byEnd(a, g.last) > 0 {
			g.last = a
		}
	}
	for _, as := range g.byRank {
		slices.SortFunc(as, byEnd)
	}
	g.recvs = pairP2P(g.byRank)
	g.lastArrival = map[collKey]*activity{}
	g.members = map[memberKey]*activity{}
	for r, as := range g.byRank {
		for _, a := range as {
			if c := a.it.coll; c != nil && a.it.kind == profiler.KindCollective {
				k := collKey{c.group, c.gid, c.seq}
				// Arrivals at the same instant: the higher rank is the
				// last, as in Collective.Members.
				if prev := g.lastArrival[k]; prev == nil || a.span.Start > prev.span.Start || a.span.Start == prev.span.Start && r > prev.it.rank {
					g.lastArrival[k] = a
				}
				g.members[memberKey{k, r}] = a
			}
		}
	}
	return g
}

// chain sets a's prev, next and start, once: where a path that reaches a
// goes on, which depends on a alone.
func (g *graph) chain(a *activity) {
	if a.chained {
		return
	}
	a.chained = true
	start := a.span.Start
	next := g.before(a.it.rank, start, a)
	a.prev = next
	// A receive whose send started after the receiving rank was ready
	// waited for the sender: the path goes on at the sender. A send done
	// before the receive began kept nothing waiting: the path stays on
	// the receiving rank, whose gap held the receive back.
	if s, ok := g.recvs[a]; ok && s.span.Start > readyAt(next) && s.span.End > a.span.Start {
		start, next = max(s.span.Start, a.span.Start), s
	}
	// A collective waits for its last arrival (one that had left before
	// this member came kept it from nothing).
	if c := a.it.coll; c != nil && a.it.kind == profiler.KindCollective {
		if la := g.lastArrival[collKey{c.group, c.gid, c.seq}]; la != nil && la != a && la.span.Start > readyAt(next) && la.span.End > a.span.Start {
			start, next = max(la.span.Start, a.span.Start), la
		}
	}
	a.start, a.next = start, next
}

// byEnd orders activities by their end, then their start, then what else
// their records say (tiebreak). Ranges that share a timing event end
// together; a total order on what the records hold keeps the walks from
// depending on the order the records came in.
func byEnd(a, b *activity) int {
	return bySpan(a.span.End, b.span.End, a.span.Start, b.span.Start, a, b)
}

// byStart orders activities by their start, then their end, then
// tiebreak.
func byStart(a, b *activity) int {
	return bySpan(a.span.Start, b.span.Start, a.span.End, b.span.End, a, b)
}

// bySpan orders a and b by first (fa, fb), then second (sa, sb), then
// tiebreak.
func bySpan(fa, fb, sa, sb time.Duration, a, b *activity) int {
	if fa != fb {
		return cmp.Compare(fa, fb)
	}
	if sa != sb {
		return cmp.Compare(sa, sb)
	}
	return tiebreak(a.it, b.it)
}

// tiebreak orders items with the same span by their host interval, rank,
// kind and labels. Items equal in all of these are alike to every walk.
func tiebreak(a, b *item) int {
	switch {
	case a.host.Start != b.host.Start:
		return cmp.Compare(a.host.Start, b.host.Start)
	case a.host.End != b.host.End:
		return cmp.Compare(a.host.End, b.host.End)
	case a.rank != b.rank:
		return cmp.Compare(a.rank, b.rank)
	case a.kind != b.kind:
		return cmp.Compare(a.kind, b.kind)
	case a.mb != b.mb:
		return cmp.Compare(a.mb, b.mb)
	case a.chunk != b.chunk:
		return cmp.Compare(a.chunk, b.chunk)
	}
	return cmp.Compare(a.phase, b.phase)
}

// before is the latest-ending activity of rank that ended by t (within
// criticalTolerance) and started before it, other than self. An activity
// that started at t or later is never what came before: within the
// tolerance, a short one (a send or receive that did not wait, under a
// microsecond) can end just after t, and taking it made the walk loop
// back to an activity it had passed and stop there, leaving the rest of
// the path, and the blame for its time, out.
func (g *graph) before(rank int, t time.Duration, self *activity) *activity {
	as := g.byRank[rank]
	i, _ := slices.BinarySearchFunc(as, t+criticalTolerance+1, func(a *activity, t time.Duration) int { return cmp.Compare(a.span.End, t) })
	for i--; i >= 0; i-- {
		if as[i] != self && as[i].span.Start < t {
			return as[i]
		}
	}
	return nil
}

// walk follows the path back from cur, whose segment ends at end, and
// calls visit with each segment in turn, latest first, and the activity
// it belongs to (nil for a gap), until visit returns false or the path
// has no earlier link.
func (g *graph) walk(cur *activity, end time.Duration, visit func(Segment, *activity) bool) {
	g.walks++
	for cur != nil && cur.seen != g.walks {
		cur.seen = g.walks
		var ok bool
		if cur, end, ok = g.step(cur, end, visit); !ok {
			return
		}
	}
}

// step visits cur's segment, which ends at end, and the gap on its rank
// between it and the path's next link, if any; it returns that link and
// where its segment ends, or ok false where visit stopped the walk or
// the path has no earlier link.
func (g *graph) step(cur *activity, end time.Duration, visit func(Segment, *activity) bool) (next *activity, nextEnd time.Duration, ok bool) {
	g.chain(cur)
	start := min(cur.start, end)
	next = cur.next
	if !visit(segmentOf(cur, profiler.Interval{Start: start, End: end}), cur) || next == nil {
		return nil, 0, false
	}
	nextEnd = min(next.span.End, start)
	if next.it.rank == cur.it.rank && nextEnd < start {
		if !visit(gapSegment(cur.it.rank, nextEnd, start), nil) {
			return nil, 0, false
		}
	}
	return next, nextEnd, true
}

// walkTo follows the path that brought a collective's member to it: back
// from its arrival, from the activity before it on its rank (the member's
// own wait for the collective's last arrival is not on that path).
func (g *graph) walkTo(member *activity, visit func(Segment, *activity) bool) {
	if prev, end, ok := g.arrival(member, visit); ok {
		g.walk(prev, end, visit)
	}
}

// arrival visits the gap on member's rank before its arrival, if any, and
// returns the activity before it there and where its segment ends, or ok
// false where there is none or visit stopped the walk.
func (g *graph) arrival(member *activity, visit func(Segment, *activity) bool) (prev *activity, end time.Duration, ok bool) {
	g.chain(member)
	rank, t := member.it.rank, member.span.Start
	prev = member.prev
	if prev == nil {
		return nil, 0, false
	}
	end = min(prev.span.End, t)
	if end < t && !visit(gapSegment(rank, end, t), nil) {
		return nil, 0, false
	}
	return prev, end, true
}

// reaches reports whether the path from a (a walk that starts at a and
// stops at nothing but the path's start or an activity it passed before)
// passes b. Each activity has one next link, so the links make a forest
// whose roots are the activities without one and loops of links: the
// path from a passes b where b is on the loop a's path ends in, or is
// a's ancestor in the forest.
func (g *graph) reaches(a, b *activity) bool {
	if !g.indexed {
		g.index()
	}
	if b.cycle >= 0 {
		return a.loop == b.cycle
	}
	return b.tin <= a.tin && a.tin < b.tout
}

// index finds the loops of next links and numbers the forest they make
// (a node's descendants are the activities whose paths pass it), for
// reaches: linear in the activities.
func (g *graph) index() {
	g.indexed = true
	var nodes []*activity
	for _, as := range g.byRank {
		nodes = append(nodes, as...)
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(nodes))
	for i, a := range nodes {
		g.chain(a)
		a.tin, a.cycle = int32(i), -1 // tin holds the node's number until the tour
	}
	var path []*activity
	cycles := int32(0)
	for _, a := range nodes {
		path = path[:0]
		x := a
		for ; x != nil && state[x.tin] == unseen; x = x.next {
			state[x.tin] = onPath
			path = append(path, x)
		}
		loop := int32(-1)
		switch {
		case x == nil:
		case state[x.tin] == onPath: // the path closes a loop at x
			i := len(path) - 1
			for path[i] != x {
				i--
			}
			for _, y := range path[i:] {
				y.cycle = cycles
			}
			loop = cycles
			cycles++
		default:
			loop = x.loop
		}
		for _, y := range path {
			state[y.tin], y.loop = done, loop
		}
	}
	// The forest: an activity off the loops hangs from its next link.
	first := make([]int32, len(nodes)+1) // children of node i: kids[first[i]:first[i+1]]
	for _, a := range nodes {
		if a.cycle < 0 && a.next != nil {
			first[a.next.tin+1]++
		}
	}
	for i := range nodes {
		first[i+1] += first[i]
	}
	kids, fill := make([]int32, first[len(nodes)]), slices.Clone(first[:len(nodes)])
	for i, a := range nodes {
		if a.cycle < 0 && a.next != nil {
			p := a.next.tin
			kids[fill[p]] = int32(i)
			fill[p]++
		}
	}
	// Number the nodes in depth-first order: a subtree's numbers run
	// from its root's tin to its tout.
	tin, tout := make([]int32, len(nodes)), make([]int32, len(nodes))
	clock := int32(0)
	var stack []int32
	for i, a := range nodes {
		if a.cycle < 0 && a.next != nil {
			continue // not a root
		}
		stack = append(stack[:0], int32(i))
		tin[i], fill[i] = clock, first[i]
		clock++
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			if fill[n] == first[n+1] {
				tout[n] = clock
				stack = stack[:len(stack)-1]
				continue
			}
			k := kids[fill[n]]
			fill[n]++
			tin[k], fill[k] = clock, first[k]
			clock++
			stack = append(stack, k)
		}
	}
	for i, a := range nodes {
		a.tin, a.tout = tin[i], tout[i]
	}
}

func gapSegment(rank int, from, to time.Duration) Segment {
	return Segment{Kind: SegmentGap, Rank: rank, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None,
		Interval: profiler.Interval{Start: from, End: to}}
}

// critical walks the step's activities back from the last one. It
// returns nil when the step has no activity.
func (g *graph) critical() *CriticalPath {
	if g.last == nil {
		return nil
	}
	var segs []Segment // latest first until reversed
	g.walk(g.last, g.last.span.End, func(s Segment, _ *activity) bool {
		if s.Len() > 0 {
			segs = append(segs, s)
		}
		return true
	})
	slices.Reverse(segs)
	cp := &CriticalPath{Segments: segs}
	for _, s := range segs {
		switch s.Kind {
		case SegmentCompute:
			cp.Compute += s.Len()
		case SegmentTransfer:
			cp.Transfer += s.Len()
		default:
			cp.Gap += s.Len()
		}
	}
	if len(cp.Segments) == 0 {
		return nil
	}
	cp.Span = profiler.Interval{Start: cp.Segments[0].Start, End: cp.Segments[len(cp.Segments)-1].End}
	return cp
}

// readyAt is when a rank's previous activity let it go on: its end, or
// the beginning of time without one.
func readyAt(a *activity) time.Duration {
	if a == nil {
		return -1 << 62
	}
	return a.span.End
}

func segmentOf(a *activity, iv profiler.Interval) Segment {
	it := a.it
	s := Segment{Kind: SegmentCompute, Rank: it.rank, Phase: it.phase, Stage: int(it.stage), Chunk: int(it.chunk), Microbatch: int(it.mb), Interval: iv}
	if it.coll != nil {
		s.Kind, s.Op = SegmentTransfer, it.coll.op
	}
	return s
}

// pairP2P pairs each receive with its send: the k-th send from a to b in
// the step with the k-th receive at b from a, in time order, as NCCL
// pairs them. It maps each paired receive to its send.
func pairP2P(byRank map[int][]*activity) map[*activity]*activity {
	s, r := map[p2pKey][]*activity{}, map[p2pKey][]*activity{}
	for _, as := range byRank {
		for _, a := range as {
			c := a.it.coll
			if c == nil || a.it.kind != profiler.KindP2P {
				continue
			}
			switch c.op {
			case "Send":
				k := p2pKey{c.group, c.gid, c.grank, c.peer}
				s[k] = append(s[k], a)
			case "Recv":
				k := p2pKey{c.group, c.gid, c.peer, c.grank}
				r[k] = append(r[k], a)
			}
		}
	}
	recvs := map[*activity]*activity{}
	for k, ss := range s {
		rs := r[k]
		slices.SortFunc(ss, byStart)
		slices.SortFunc(rs, byStart)
		for i := range min(len(ss), len(rs)) {
			recvs[rs[i]] = ss[i]
		}
	}
	return recvs
}
