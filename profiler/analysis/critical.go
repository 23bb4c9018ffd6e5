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
}

// criticalPath walks the step's activities back from the last one. It
// returns nil when the step has no activity.
func criticalPath(items []item) *CriticalPath {
	byRank := map[int][]*activity{}
	var last *activity
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
		if a.span.Len() < 0 {
			continue
		}
		byRank[it.rank] = append(byRank[it.rank], a)
		if last == nil || a.span.End > last.span.End {
			last = a
		}
	}
	if last == nil {
		return nil
	}
	for _, as := range byRank {
		slices.SortFunc(as, func(a, b *activity) int { return cmp.Compare(a.span.End, b.span.End) })
	}
	recvs := pairP2P(byRank)
	lastArrival := map[collKey]*activity{}
	for _, as := range byRank {
		for _, a := range as {
			if c := a.it.coll; c != nil && a.it.kind == profiler.KindCollective {
				k := collKey{c.group, c.seq}
				if prev := lastArrival[k]; prev == nil || a.span.Start > prev.span.Start {
					lastArrival[k] = a
				}
			}
		}
	}
	// before is the latest-ending activity of rank that ended by t, other
	// than self.
	before := func(rank int, t time.Duration, self *activity) *activity {
		as := byRank[rank]
		i, _ := slices.BinarySearchFunc(as, t+criticalTolerance+1, func(a *activity, t time.Duration) int { return cmp.Compare(a.span.End, t) })
		for i--; i >= 0; i-- {
			if as[i] != self {
				return as[i]
			}
		}
		return nil
	}
	var rev []Segment
	visited := map[*activity]bool{}
	cur, end := last, last.span.End
	for cur != nil && !visited[cur] {
		visited[cur] = true
		start := cur.span.Start
		next := before(cur.it.rank, start, cur)
		// A receive whose send started after the receiving rank was ready
		// waited for the sender: the path goes on at the sender.
		if s, ok := recvs[cur]; ok && s.span.Start > readyAt(next) {
			start, next = max(s.span.Start, cur.span.Start), s
		}
		// A collective waits for its last arrival.
		if c := cur.it.coll; c != nil && cur.it.kind == profiler.KindCollective {
			if la := lastArrival[collKey{c.group, c.seq}]; la != nil && la != cur && la.span.Start > readyAt(next) {
				start, next = max(la.span.Start, cur.span.Start), la
			}
		}
		start = min(start, end)
		rev = append(rev, segmentOf(cur, profiler.Interval{Start: start, End: end}))
		if next == nil {
			break
		}
		nextEnd := min(next.span.End, start)
		if next.it.rank == cur.it.rank && nextEnd < start {
			rev = append(rev, Segment{Kind: SegmentGap, Rank: cur.it.rank, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None,
				Interval: profiler.Interval{Start: nextEnd, End: start}})
		}
		cur, end = next, nextEnd
	}
	cp := &CriticalPath{}
	for i := len(rev) - 1; i >= 0; i-- {
		s := rev[i]
		if s.Len() <= 0 {
			continue
		}
		cp.Segments = append(cp.Segments, s)
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
				k := p2pKey{c.group, c.grank, c.peer}
				s[k] = append(s[k], a)
			case "Recv":
				k := p2pKey{c.group, c.peer, c.grank}
				r[k] = append(r[k], a)
			}
		}
	}
	recvs := map[*activity]*activity{}
	byStart := func(a, b *activity) int { return cmp.Compare(a.span.Start, b.span.Start) }
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
