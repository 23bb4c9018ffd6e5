package analysis

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

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
// reached the collective along a path through the step's dependency graph
// (the critical path's links, walked back from each one's arrival), and
// the wait is where the last arrival's path took longer. The paths are
// compared over their parts before they join (where the waiting member's
// path reaches an activity on the last arrival's, what is earlier is
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
func blame(ranks []Rank, colls []Collective, g *graph) int {
	b := newBlamer(ranks, g)
	var total time.Duration
	for _, c := range colls {
		if !c.Complete || len(c.Members) < 2 {
			continue
		}
		k := collKey{c.Group, c.GroupID, c.Seq}
		n := len(c.Members)
		last := c.Members[n-1].Rank
		b.reference(g.members[memberKey{k, last}])
		for j, m := range c.Members[:n-1] {
			if r := b.idx[m.Rank]; r != nil {
				r.Waited += m.Wait
			}
			total += m.Wait
			if m.Wait <= 0 {
				continue
			}
			causes := b.causes(g.members[memberKey{k, m.Rank}], m.Rank, last)
			split(m.Wait, causes, func(r *Rank, d time.Duration) { r.Caused += d })
			if j == n-2 {
				// The next-latest member's wait is the time the
				// collective was held up.
				split(m.Wait, causes, func(r *Rank, d time.Duration) { r.HeldUp += d })
			}
		}
	}
	if total <= 0 {
		return profiler.None
	}
	for i := range ranks {
		ranks[i].Score = float64(ranks[i].Caused) / float64(total)
	}
	return standsOut(len(ranks), func(i int) (int, float64) { return ranks[i].Rank, ranks[i].Score })
}

// standsOut names the rank whose score is at least 0.5 and at least twice
// every other's, or profiler.None.
func standsOut(n int, at func(int) (rank int, score float64)) int {
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
type link struct {
	rank int
	len  time.Duration
}

// cause is a rank's share of a wait.
type cause struct {
	rank   *Rank
	weight float64
}

// peer is the class a rank's time on a path is compared in: the member
// whose path it is (self, on both paths), a stage, or a rank without a
// stage label.
type peer struct {
	self        bool
	stage, rank int
}

// blamer compares the paths that brought a collective's members to it,
// with buffers reused from one comparison to the next.
type blamer struct {
	g     *graph
	idx   map[int]*Rank
	peers map[int]peer
	// ref is the last arrival's path, latest first, as far as a
	// comparison has needed it; its activities carry mark and their
	// index in it. The rest of the path is walked only when a waiting
	// member's path joins it there (or never does): walking it all for
	// every collective, back to the step's start, made the comparisons
	// quadratic in the collectives of a step.
	ref  []link
	mark uint32
	// from is where the last arrival's path starts (nil for an empty
	// one); cur and end are the walk of it that ref holds so far: the
	// link to visit next (nil once at the path's start) and where its
	// segment ends.
	from, cur *activity
	end       time.Duration
	visitRef  func(Segment, *activity) bool
	// Per comparison.
	own            []link
	onRef          map[int]time.Duration  // by rank: the last arrival's path before the join
	excess, onPeer map[peer]time.Duration // by peer: that path less the waiting member's; that path alone
	out            []cause
}

func newBlamer(ranks []Rank, g *graph) *blamer {
	b := &blamer{g: g, idx: make(map[int]*Rank, len(ranks)), peers: make(map[int]peer, len(ranks)),
		onRef: map[int]time.Duration{}, excess: map[peer]time.Duration{}, onPeer: map[peer]time.Duration{}}
	for i := range ranks {
		r := &ranks[i]
		b.idx[r.Rank] = r
		if r.Stage != profiler.None {
			b.peers[r.Rank] = peer{stage: r.Stage, rank: profiler.None}
		}
	}
	b.visitRef = func(s Segment, a *activity) bool {
		if a != nil {
			a.mark, a.pos = b.mark, int32(len(b.ref))
		}
		b.ref = append(b.ref, link{s.Rank, max(s.Len(), 0)})
		return true
	}
	return b
}

// peerOf is rank's peer on the path of member.
func (b *blamer) peerOf(rank, member int) peer {
	if rank == member {
		return peer{self: true, stage: profiler.None, rank: profiler.None}
	}
	if p, ok := b.peers[rank]; ok {
		return p
	}
	return peer{stage: profiler.None, rank: rank}
}

// reference starts the path to the last arrival's arrival (member is its
// activity in the collective; nil without one), whose activities extend
// marks as it is walked.
func (b *blamer) reference(member *activity) {
	b.mark++
	b.ref = b.ref[:0]
	b.from, b.cur = nil, nil
	if member == nil {
		return
	}
	if prev, end, ok := b.g.arrival(member, b.visitRef); ok {
		b.from, b.cur, b.end = prev, prev, end
	}
}

// extend walks the last arrival's path on until it has marked a, or to
// its start where a is nil.
func (b *blamer) extend(a *activity) {
	for b.cur != nil && (a == nil || a.mark != b.mark) {
		if b.cur.mark == b.mark { // a walk stops at an activity it passed
			b.cur = nil
			break
		}
		next, end, ok := b.g.step(b.cur, b.end, b.visitRef)
		if !ok {
			next = nil
		}
		b.cur, b.end = next, end
	}
}

// causes splits the wait of rank self, whose activity in the collective
// is member (nil without one), over the ranks that caused it, comparing
// its path with the reference's; last is the last arrival. The weights
// are positive; they need not add up to 1.
func (b *blamer) causes(member *activity, self, last int) []cause {
	b.own = b.own[:0]
	join := -1
	if member != nil {
		b.g.walkTo(member, func(s Segment, a *activity) bool {
			b.own = append(b.own, link{s.Rank, max(s.Len(), 0)})
			if a != nil && b.from != nil && b.g.reaches(b.from, a) {
				b.extend(a)
				join = int(a.pos) + 1 // the joining activity's segment counts on both paths
				return false
			}
			return true
		})
	}
	if join < 0 {
		b.extend(nil)
		join = len(b.ref)
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
			b.out = append(b.out, cause{b.idx[rank], float64(e) * float64(d) / float64(b.onPeer[p])})
		}
	}
	if len(b.out) == 0 {
		if r := b.idx[last]; r != nil {
			b.out = append(b.out, cause{r, 1})
		}
		return b.out
	}
	slices.SortFunc(b.out, func(x, y cause) int { return cmp.Compare(x.rank.Rank, y.rank.Rank) })
	return b.out
}

// split shares d out over causes in proportion to their weights, rounding
// so that the parts add up to d exactly.
func split(d time.Duration, causes []cause, add func(*Rank, time.Duration)) {
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
