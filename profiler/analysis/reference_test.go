package analysis

// The reference implementation: the analysis of a step as it was before
// the per-step passes were made near-linear (chunkAt's scan of every action
// for every gap of the bubble, and the blame's walk of the last arrival's
// whole path for every collective). It is kept only as the oracle of
// TestAgainstReference, which requires the analysis to give exactly what
// this gives. Do not change it with the code under test.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// refAnalyze is Analyze with the reference step analysis.
func refAnalyze(records []profiler.Record, opts ...Option) []Step {
	cfg := newConfig(opts)
	var off *Offsets
	if cfg.align {
		o := EstimateOffsets(records, WithClockDomains(cfg.domains), WithMinClockSamples(cfg.minSamples))
		off = &o
	}
	bySteps := map[int32][]item{}
	ranks := map[int]bool{}
	for i := range records {
		it, ok := keep(&records[i])
		if !ok || it.step == profiler.None {
			continue
		}
		if off != nil {
			off.shift(&it)
		}
		bySteps[it.step] = append(bySteps[it.step], it)
		ranks[it.rank] = true
	}
	expected := sortedKeys(ranks)
	steps := sortedKeys(bySteps)
	out := make([]Step, 0, len(steps))
	var sc scratch
	for _, s := range steps {
		st := refAnalyzeStep(int(s), bySteps[s], expected, &sc)
		st.Pipeline = st.Pipeline.withSchedule(cfg.chunks, cfg.microbatches)
		if off != nil {
			st.Clock = off
			st.Problems = append(st.Problems, off.problems()...)
		}
		out = append(out, st)
	}
	return out
}

// refAnalyzeStep is analyzeStep as it was.
func refAnalyzeStep(step int, items []item, expected []int, sc *scratch) Step {
	st := Step{Step: step, Straggler: profiler.None}
	// Each rank's items, in their order of arrival, in one allocation.
	count := map[int]int{}
	for i := range items {
		count[items[i].rank]++
	}
	backing := slices.Grow(sc.backing[:0], len(items))
	sc.backing = backing
	defer clear(backing[:len(items)]) // let go of what the items point to
	byRank := make(map[int][]item, len(count))
	for _, r := range sortedKeys(count) {
		start := len(backing)
		backing = backing[:start+count[r]]
		byRank[r] = backing[start : start : start+count[r]]
	}
	for i := range items {
		r := items[i].rank
		byRank[r] = append(byRank[r], items[i])
	}
	var missing []int
	for _, r := range expected {
		if _, ok := byRank[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("no records of %s in this step", ranksList(missing)))
	}
	ranks := sortedKeys(byRank)
	st.Ranks = make([]Rank, len(ranks))
	first := true
	for i, r := range ranks {
		rk := &st.Ranks[i]
		st.Problems = rankAccount(rk, r, byRank[r], st.Problems, sc)
		if rk.Compute.Len() > 0 {
			if first {
				st.Span, first = rk.Compute, false
			} else {
				st.Span.Start = min(st.Span.Start, rk.Compute.Start)
				st.Span.End = max(st.Span.End, rk.Compute.End)
			}
		}
	}
	st.Pipeline = pipelineShape(items)
	if st.Span.Len() > 0 && st.Pipeline.Stages > 0 {
		// Without a stage label on any rank's work the job is not
		// pipelined (data parallel only): its idle compute is no bubble,
		// and Busy already says how much of the step it is.
		for i, r := range ranks {
			refBubble(&st.Ranks[i], byRank[r], st.Span, sc)
		}
		st.Stages = stages(st.Ranks, st.Span)
	}
	st.Collectives, st.P2P = match(items)
	// A complete collective's members wait for its last arrival.
	lastArrival := map[collKey]time.Duration{}
	for _, c := range st.Collectives {
		if c.Complete && len(c.Members) > 0 {
			lastArrival[collKey{c.Group, c.GroupID, c.Seq}] = c.Members[len(c.Members)-1].Arrive
		}
	}
	// Idle time within the span is the bubble only in a pipeline, as
	// Rank.Bubble is.
	var bubbleSpan profiler.Interval
	if st.Pipeline.Stages > 0 {
		bubbleSpan = st.Span
	}
	for i, r := range ranks {
		attribute(&st.Ranks[i], byRank[r], bubbleSpan, lastArrival, sc)
	}
	for _, c := range st.Collectives {
		if !c.Complete {
			st.Problems = append(st.Problems, fmt.Sprintf("collective %s #%d (%s): %s", groupName(c.Group, c.GroupID), c.Seq, c.Op, c.Problem))
		}
	}
	if st.P2P.Unmatched > 0 {
		st.Problems = append(st.Problems, fmt.Sprintf("%d point-to-point transfers without their other side", st.P2P.Unmatched))
	}
	g := refNewGraph(items)
	st.Straggler = refBlame(st.Ranks, st.Collectives, g)
	st.Critical = g.critical()
	return st
}

// refBubble is bubble as it was.
func refBubble(rk *Rank, items []item, span profiler.Interval, sc *scratch) {
	work, acts := sc.work[:0], sc.acts[:0]
	defer func() {
		clear(acts)
		sc.work, sc.acts = work, acts
	}()
	maxChunk := -1
	for i := range items {
		it := &items[i]
		switch {
		case it.pipelineCompute():
			work = append(work, it.work)
			acts = append(acts, it)
			maxChunk = max(maxChunk, int(it.chunk))
		case it.work.Activity == profiler.ActivityTransfer || it.work.Activity == profiler.ActivityWait:
			work = append(work, it.work)
		}
	}
	busy := profiler.BusyIntervals(nil, work)
	rk.Bubble = span.Len() - clippedLen(busy, span)
	if maxChunk < 0 || maxChunk >= MaxChunkLabel {
		// No chunk labels (a wrapped job's kernels), or labels that are
		// no VPP chunk indices (a split would be as long as the largest):
		// no split of the bubble by chunk, and no tail told from it.
		return
	}
	rk.Chunks = make([]time.Duration, maxChunk+1)
	at := span.Start
	for _, b := range busy {
		s, e := max(b.Start, span.Start), min(b.End, span.End)
		if e <= s {
			continue
		}
		if s > at {
			if c := refChunkAt(acts, s); c >= 0 && c < len(rk.Chunks) {
				rk.Chunks[c] += s - at
			} else {
				rk.Drain += s - at // a gap no action ends: counted with the tail
			}
		}
		at = e
	}
	if at < span.End {
		rk.Drain += span.End - at
	}
}

// refChunkAt is chunkAt as it was: a scan of every action, for the
// lowest chunk running at t, one of no chunk only where no other runs.
func refChunkAt(acts []*item, t time.Duration) int {
	chunk, found := -1, false
	for i := range acts {
		w, c := acts[i].work, int(acts[i].chunk)
		if w.Start > t || t >= w.End {
			continue
		}
		if !found || (c >= 0 && (chunk < 0 || c < chunk)) {
			chunk, found = c, true
		}
	}
	return chunk
}

// refCriticalTolerance absorbs clock rounding between an refActivity's end and
// the start of what waited for it.
const refCriticalTolerance = time.Microsecond

type refActivity struct {
	it   *item
	span profiler.Interval
	// seen is the last walk that passed the refActivity (walks stop at an
	// refActivity they passed before); mark and pos say where the last
	// arrival's path of a blame comparison passed it (see refBlamer).
	seen, mark uint32
	pos        int32
}

// refGraph is a step's activities — computations by the busy definition,
// transfers and collectives — and the dependencies between them that the
// critical path follows: the rank's previous refActivity, the send a
// receive waited for, a collective's last arrival. The critical path
// walks it back from the step's last refActivity; the straggler scores walk
// it back from each collective's arrivals (blame).
type refGraph struct {
	byRank      map[int][]*refActivity // by end
	recvs       map[*refActivity]*refActivity
	lastArrival map[collKey]*refActivity
	members     map[refMemberKey]*refActivity
	last        *refActivity
	walks       uint32
}

type refMemberKey struct {
	collKey
	rank int
}

func refNewGraph(items []item) *refGraph {
	g := &refGraph{byRank: map[int][]*refActivity{}}
	all := make([]refActivity, 0, len(items)) // one allocation; never grows
	for i := range items {
		it := &items[i]
		if it.isStep || (it.work.Activity != profiler.ActivityCompute && it.coll == nil) {
			continue
		}
		all = append(all, refActivity{it: it, span: it.span()})
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
		if g.last == nil || refByEnd(a, g.last) > 0 {
			g.last = a
		}
	}
	for _, as := range g.byRank {
		slices.SortFunc(as, refByEnd)
	}
	g.recvs = refPairP2P(g.byRank)
	g.lastArrival = map[collKey]*refActivity{}
	g.members = map[refMemberKey]*refActivity{}
	for r, as := range g.byRank {
		for _, a := range as {
			if c := a.it.coll; c != nil && a.it.kind == profiler.KindCollective {
				k := collKey{c.group, c.gid, c.seq}
				// Arrivals at the same instant: the higher rank is the
				// last, as in Collective.Members.
				if prev := g.lastArrival[k]; prev == nil || a.span.Start > prev.span.Start || a.span.Start == prev.span.Start && r > prev.it.rank {
					g.lastArrival[k] = a
				}
				g.members[refMemberKey{k, r}] = a
			}
		}
	}
	return g
}

// refByEnd orders activities by their end, then their start, then what else
// their records say (refTiebreak). Ranges that share a timing event end
// together; a total order on what the records hold keeps the walks from
// depending on the order the records came in.
func refByEnd(a, b *refActivity) int {
	return refBySpan(a.span.End, b.span.End, a.span.Start, b.span.Start, a, b)
}

// refByStart orders activities by their start, then their end, then
// refTiebreak.
func refByStart(a, b *refActivity) int {
	return refBySpan(a.span.Start, b.span.Start, a.span.End, b.span.End, a, b)
}

// refBySpan orders a and b by first (fa, fb), then second (sa, sb), then
// refTiebreak.
func refBySpan(fa, fb, sa, sb time.Duration, a, b *refActivity) int {
	if fa != fb {
		return cmp.Compare(fa, fb)
	}
	if sa != sb {
		return cmp.Compare(sa, sb)
	}
	return refTiebreak(a.it, b.it)
}

// refTiebreak orders items with the same span by their host interval, rank,
// kind and labels. Items equal in all of these are alike to every walk.
func refTiebreak(a, b *item) int {
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

// before is the latest-ending refActivity of rank that ended by t (within
// refCriticalTolerance) and started before it, other than self. An refActivity
// that started at t or later is never what came before: within the
// tolerance, a short one (a send or receive that did not wait, under a
// microsecond) can end just after t, and taking it made the walk loop
// back to an refActivity it had passed and stop there, leaving the rest of
// the path, and the blame for its time, out.
func (g *refGraph) before(rank int, t time.Duration, self *refActivity) *refActivity {
	as := g.byRank[rank]
	i, _ := slices.BinarySearchFunc(as, t+refCriticalTolerance+1, func(a *refActivity, t time.Duration) int { return cmp.Compare(a.span.End, t) })
	for i--; i >= 0; i-- {
		if as[i] != self && as[i].span.Start < t {
			return as[i]
		}
	}
	return nil
}

// walk follows the path back from cur, whose segment ends at end, and
// calls visit with each segment in turn, latest first, and the refActivity
// it belongs to (nil for a gap), until visit returns false or the path
// has no earlier link.
func (g *refGraph) walk(cur *refActivity, end time.Duration, visit func(Segment, *refActivity) bool) {
	g.walks++
	for cur != nil && cur.seen != g.walks {
		cur.seen = g.walks
		start := cur.span.Start
		next := g.before(cur.it.rank, start, cur)
		// A receive whose send started after the receiving rank was ready
		// waited for the sender: the path goes on at the sender. A send
		// done before the receive began kept nothing waiting: the path
		// stays on the receiving rank, whose gap held the receive back.
		if s, ok := g.recvs[cur]; ok && s.span.Start > refReadyAt(next) && s.span.End > cur.span.Start {
			start, next = max(s.span.Start, cur.span.Start), s
		}
		// A collective waits for its last arrival (one that had left
		// before this member came kept it from nothing).
		if c := cur.it.coll; c != nil && cur.it.kind == profiler.KindCollective {
			if la := g.lastArrival[collKey{c.group, c.gid, c.seq}]; la != nil && la != cur && la.span.Start > refReadyAt(next) && la.span.End > cur.span.Start {
				start, next = max(la.span.Start, cur.span.Start), la
			}
		}
		start = min(start, end)
		if !visit(refSegmentOf(cur, profiler.Interval{Start: start, End: end}), cur) || next == nil {
			return
		}
		nextEnd := min(next.span.End, start)
		if next.it.rank == cur.it.rank && nextEnd < start {
			if !visit(refGapSegment(cur.it.rank, nextEnd, start), nil) {
				return
			}
		}
		cur, end = next, nextEnd
	}
}

// walkTo follows the path that brought a collective's member to it: back
// from its arrival, from the refActivity before it on its rank (the member's
// own wait for the collective's last arrival is not on that path).
func (g *refGraph) walkTo(member *refActivity, visit func(Segment, *refActivity) bool) {
	rank, t := member.it.rank, member.span.Start
	prev := g.before(rank, t, member)
	if prev == nil {
		return
	}
	end := min(prev.span.End, t)
	if end < t && !visit(refGapSegment(rank, end, t), nil) {
		return
	}
	g.walk(prev, end, visit)
}

func refGapSegment(rank int, from, to time.Duration) Segment {
	return Segment{Kind: SegmentGap, Rank: rank, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None,
		Interval: profiler.Interval{Start: from, End: to}}
}

// critical walks the step's activities back from the last one. It
// returns nil when the step has no refActivity.
func (g *refGraph) critical() *CriticalPath {
	if g.last == nil {
		return nil
	}
	var rev []Segment
	g.walk(g.last, g.last.span.End, func(s Segment, _ *refActivity) bool {
		rev = append(rev, s)
		return true
	})
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

// refReadyAt is when a rank's previous refActivity let it go on: its end, or
// the beginning of time without one.
func refReadyAt(a *refActivity) time.Duration {
	if a == nil {
		return -1 << 62
	}
	return a.span.End
}

func refSegmentOf(a *refActivity, iv profiler.Interval) Segment {
	it := a.it
	s := Segment{Kind: SegmentCompute, Rank: it.rank, Phase: it.phase, Stage: int(it.stage), Chunk: int(it.chunk), Microbatch: int(it.mb), Interval: iv}
	if it.coll != nil {
		s.Kind, s.Op = SegmentTransfer, it.coll.op
	}
	return s
}

// refPairP2P pairs each receive with its send: the k-th send from a to b in
// the step with the k-th receive at b from a, in time order, as NCCL
// pairs them. It maps each paired receive to its send.
func refPairP2P(byRank map[int][]*refActivity) map[*refActivity]*refActivity {
	s, r := map[p2pKey][]*refActivity{}, map[p2pKey][]*refActivity{}
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
	recvs := map[*refActivity]*refActivity{}
	for k, ss := range s {
		rs := r[k]
		slices.SortFunc(ss, refByStart)
		slices.SortFunc(rs, refByStart)
		for i := range min(len(ss), len(rs)) {
			recvs[rs[i]] = ss[i]
		}
	}
	return recvs
}

// blame fills the ranks' waiting figures and straggler scores from the
// complete collectives and returns the rank that stands out, or
// profiler.None. A rank stands out when it caused at least half of all
// the waiting and at least twice as much as any other rank.
//
// A member's wait at a collective is caused by the last rank to arrive,
// unless that rank was late because it had itself been waiting on others
// — for a receive from its pipeline neighbour, at an earlier collective —
// in which case the wait passes on to the ranks it waited for. To tell
// which, the waiting member is the baseline: both it and the last arrival
// reached the collective along a path through the step's dependency refGraph
// (the critical path's links, walked back from each one's arrival), and
// the wait is where the last arrival's path took longer. The paths are
// compared over their parts before they join (where the waiting member's
// path reaches an refActivity on the last arrival's, what is earlier is
// common to both), peer by peer: the last arrival's own time with the
// waiting member's (members of one collective do the same work), any
// other rank's with the other path's ranks of its stage (a stage's ranks
// in different data-parallel replicas do the same work), a rank without a
// stage label with itself. The wait is split over the peers on which the
// last arrival's path spent longer than the waiting member's, in
// proportion to the excess, and within a stage over the ranks the last
// arrival's path ran on there, in proportion to its time on each. When
// the last arrival's path spent longer on no peer, it keeps the wait.
//
// So with data parallelism alone each path stays on its own rank and the
// last arrival is blamed; with pipeline stages, a last arrival
// that only waited for a slow neighbour passes the wait to that
// neighbour, on whose stage its path took longer.
func refBlame(ranks []Rank, colls []Collective, g *refGraph) int {
	b := refNewBlamer(ranks, g)
	var total time.Duration
	for _, c := range colls {
		if !c.Complete || len(c.Members) < 2 {
			continue
		}
		k := collKey{c.Group, c.GroupID, c.Seq}
		n := len(c.Members)
		last := c.Members[n-1].Rank
		b.reference(g.members[refMemberKey{k, last}])
		for j, m := range c.Members[:n-1] {
			if r := b.idx[m.Rank]; r != nil {
				r.Waited += m.Wait
			}
			total += m.Wait
			if m.Wait <= 0 {
				continue
			}
			causes := b.causes(g.members[refMemberKey{k, m.Rank}], m.Rank, last)
			refSplit(m.Wait, causes, func(r *Rank, d time.Duration) { r.Caused += d })
			if j == n-2 {
				// The next-latest member's wait is the time the
				// collective was held up.
				refSplit(m.Wait, causes, func(r *Rank, d time.Duration) { r.HeldUp += d })
			}
		}
	}
	if total <= 0 {
		return profiler.None
	}
	for i := range ranks {
		ranks[i].Score = float64(ranks[i].Caused) / float64(total)
	}
	return refStandsOut(len(ranks), func(i int) (int, float64) { return ranks[i].Rank, ranks[i].Score })
}

// standsOut names the rank whose score is at least 0.5 and at least twice
// every other's, or profiler.None.
func refStandsOut(n int, at func(int) (rank int, score float64)) int {
	best, bestScore, second := profiler.None, 0.0, 0.0
	for i := range n {
		r, s := at(i)
		switch {
		case s > bestScore:
			second, best, bestScore = bestScore, r, s
		case s > second:
			second = s
		}
	}
	if bestScore >= 0.5 && bestScore >= 2*second {
		return best
	}
	return profiler.None
}

// link is a path's segment reduced to what the comparison needs.
type refLink struct {
	rank int
	len  time.Duration
}

// cause is a rank's share of a wait.
type refCause struct {
	rank   *Rank
	weight float64
}

// peer is the class a rank's time on a path is compared in: the member
// whose path it is (self, on both paths), a stage, or a rank without a
// stage label.
type refPeer struct {
	self        bool
	stage, rank int
}

// refBlamer compares the paths that brought a collective's members to it,
// with buffers reused from one comparison to the next.
type refBlamer struct {
	g     *refGraph
	idx   map[int]*Rank
	peers map[int]refPeer
	// ref is the last arrival's path, latest first; its activities carry
	// mark and their index in it.
	ref  []refLink
	mark uint32
	// Per comparison.
	own            []refLink
	onRef          map[int]time.Duration     // by rank: the last arrival's path before the join
	excess, onPeer map[refPeer]time.Duration // by peer: that path less the waiting member's; that path alone
	out            []refCause
}

func refNewBlamer(ranks []Rank, g *refGraph) *refBlamer {
	b := &refBlamer{g: g, idx: make(map[int]*Rank, len(ranks)), peers: make(map[int]refPeer, len(ranks)),
		onRef: map[int]time.Duration{}, excess: map[refPeer]time.Duration{}, onPeer: map[refPeer]time.Duration{}}
	for i := range ranks {
		r := &ranks[i]
		b.idx[r.Rank] = r
		if r.Stage != profiler.None {
			b.peers[r.Rank] = refPeer{stage: r.Stage, rank: profiler.None}
		}
	}
	return b
}

// peerOf is rank's peer on the path of member.
func (b *refBlamer) peerOf(rank, member int) refPeer {
	if rank == member {
		return refPeer{self: true, stage: profiler.None, rank: profiler.None}
	}
	if p, ok := b.peers[rank]; ok {
		return p
	}
	return refPeer{stage: profiler.None, rank: rank}
}

// reference walks the path to the last arrival's arrival (member is its
// refActivity in the collective; nil without one) and marks its activities.
func (b *refBlamer) reference(member *refActivity) {
	b.mark++
	b.ref = b.ref[:0]
	if member == nil {
		return
	}
	b.g.walkTo(member, func(s Segment, a *refActivity) bool {
		if a != nil {
			a.mark, a.pos = b.mark, int32(len(b.ref))
		}
		b.ref = append(b.ref, refLink{s.Rank, max(s.Len(), 0)})
		return true
	})
}

// causes splits the wait of rank self, whose refActivity in the collective
// is member (nil without one), over the ranks that caused it, comparing
// its path with the reference's; last is the last arrival. The weights
// are positive; they need not add up to 1.
func (b *refBlamer) causes(member *refActivity, self, last int) []refCause {
	b.own = b.own[:0]
	join := len(b.ref)
	if member != nil {
		b.g.walkTo(member, func(s Segment, a *refActivity) bool {
			b.own = append(b.own, refLink{s.Rank, max(s.Len(), 0)})
			if a != nil && a.mark == b.mark {
				join = int(a.pos) + 1 // the joining refActivity's segment counts on both paths
				return false
			}
			return true
		})
	}
	clear(b.onRef)
	clear(b.excess)
	clear(b.onPeer)
	for _, l := range b.ref[:join] {
		b.onRef[l.rank] += l.len
		p := b.peerOf(l.rank, last)
		b.excess[p] += l.len
		b.onPeer[p] += l.len
	}
	for _, l := range b.own {
		b.excess[b.peerOf(l.rank, self)] -= l.len
	}
	b.out = b.out[:0]
	for rank, d := range b.onRef {
		p := b.peerOf(rank, last)
		if e := b.excess[p]; e > 0 && d > 0 && b.idx[rank] != nil {
			b.out = append(b.out, refCause{b.idx[rank], float64(e) * float64(d) / float64(b.onPeer[p])})
		}
	}
	if len(b.out) == 0 {
		if r := b.idx[last]; r != nil {
			b.out = append(b.out, refCause{r, 1})
		}
		return b.out
	}
	slices.SortFunc(b.out, func(x, y refCause) int { return cmp.Compare(x.rank.Rank, y.rank.Rank) })
	return b.out
}

// split shares d out over causes in proportion to their weights, rounding
// so that the parts add up to d exactly.
func refSplit(d time.Duration, causes []refCause, add func(*Rank, time.Duration)) {
	var sum float64
	for _, c := range causes {
		sum += c.weight
	}
	var acc float64
	var given time.Duration
	for i, c := range causes {
		acc += c.weight
		upto := time.Duration(math.Round(float64(d) * acc / sum))
		if i == len(causes)-1 {
			upto = d
		}
		add(c.rank, upto-given)
		given = upto
	}
}
