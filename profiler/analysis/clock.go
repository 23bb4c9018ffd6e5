package analysis

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Offsets puts the ranks of a run recorded on different clocks (several
// processes or hosts) on one: Offset[r] is how far rank r's clock runs
// ahead of the reference rank's, estimated from collective completions —
// all participants leave a collective at nearly the same instant, so
// the median difference of their departures is the difference of their
// clocks.
type Offsets struct {
	// Reference is the rank whose clock the others are put on (the lowest
	// rank with a complete collective); profiler.None without one.
	Reference int
	// Offset is subtracted from every time of a rank's records by Apply.
	Offset map[int]time.Duration
	// Residual is, per aligned rank, the median distance of its aligned
	// departures from each collective's median departure: how well one
	// offset explains its collectives.
	Residual map[int]time.Duration
	// Samples is, per aligned rank, the number of collectives its offset
	// was estimated from; per unaligned rank, how many it shared with the
	// aligned ranks (fewer than MinSamples), where any.
	Samples map[int]int
	// Unaligned are ranks that share no complete collective with the
	// reference's ranks, directly or through others: their clocks are left
	// as they are.
	Unaligned []int
	// Carried reports that a step with no complete collective of its own
	// (only sends and receives, say) was put on one clock with the offsets
	// of the latest step CarriedFrom that aligned every one of its ranks
	// (the online Sink only). Residual and Samples are then empty.
	Carried     bool
	CarriedFrom int
	// P2P are the aligned ranks whose clock no collective joined to the
	// reference's: they were aligned on their sends and receives, each
	// matched pair taken as a collective of two — coarser, since a send
	// may be done before its receive.
	P2P []int
	// collectives: some clock was aligned on collectives (not only on
	// sends and receives).
	collectives bool
	// MinSamples is the fewest collectives (or matched sends) a clock had
	// to share with the aligned ones to be aligned (WithMinClockSamples);
	// 0 or 1 for any.
	MinSamples int
	// Joined counts the clocks put on the reference's, the reference's
	// own not counted: 0 when nothing was aligned.
	Joined int
}

// carriedTo is o carried to a step of ranks that had no complete
// collective of its own: o's offsets for those ranks; the others stay
// unaligned.
func (o *Offsets) carriedTo(ranks []int, from int32) Offsets {
	c := Offsets{Reference: o.Reference, Offset: map[int]time.Duration{}, Residual: map[int]time.Duration{}, Samples: map[int]int{},
		Carried: true, CarriedFrom: int(from)}
	for _, r := range ranks {
		if d, ok := o.Offset[r]; ok {
			c.Offset[r] = d
		} else {
			c.Unaligned = append(c.Unaligned, r)
		}
	}
	return c
}

// restrictedTo is o for the given ranks only: what a step of those ranks
// was aligned with (Step.Clock), when o was estimated over a whole run.
func (o *Offsets) restrictedTo(ranks []int) *Offsets {
	c := &Offsets{Reference: o.Reference, Offset: map[int]time.Duration{}, Residual: map[int]time.Duration{}, Samples: map[int]int{},
		Carried: o.Carried, CarriedFrom: o.CarriedFrom, MinSamples: o.MinSamples, Joined: o.Joined, collectives: o.collectives}
	for _, r := range ranks {
		if d, ok := o.Offset[r]; ok {
			c.Offset[r] = d
			if v, ok := o.Residual[r]; ok {
				c.Residual[r] = v
			}
			c.Samples[r] = o.Samples[r]
			if slices.Contains(o.P2P, r) {
				c.P2P = append(c.P2P, r)
			}
		} else if slices.Contains(o.Unaligned, r) || o.Reference == profiler.None {
			c.Unaligned = append(c.Unaligned, r)
		}
	}
	return c
}

// clone is a deep copy of o.
func (o *Offsets) clone() *Offsets {
	c := *o
	c.Offset, c.Residual, c.Samples = maps.Clone(o.Offset), maps.Clone(o.Residual), maps.Clone(o.Samples)
	c.Unaligned, c.P2P = slices.Clone(o.Unaligned), slices.Clone(o.P2P)
	return &c
}

// MaxResidual is the largest Residual.
func (o *Offsets) MaxResidual() time.Duration {
	var m time.Duration
	for _, r := range o.Residual {
		m = max(m, r)
	}
	return m
}

// EstimateOffsets estimates each rank's clock offset from the departures
// (device end, or host end without a device time) of the complete
// collectives in records: those every rank of the group recorded, matched
// by group and sequence number. It takes WithClockDomains and
// WithMinClockSamples; the other options do not apply.
func EstimateOffsets(records []profiler.Record, opts ...Option) Offsets {
	cfg := newConfig(opts)
	var its []item
	for i := range records {
		if it, ok := keep(&records[i]); ok {
			its = append(its, it)
		}
	}
	return estimate(its, cfg.domains, cfg.minSamples)
}

// clockID names a clock: a clock domain's (WithClockDomains), or one
// rank's own.
type clockID struct {
	id  int  // the domain, or the rank where own
	own bool // the rank's own clock, in no domain
}

// clockOf is the clock rank r's times are on: its domain's
// (WithClockDomains, ids ≥ 0), else one of its own.
func clockOf(domains map[int]int, r int) clockID {
	if d, ok := domains[r]; ok && d >= 0 {
		return clockID{id: d}
	}
	return clockID{id: r, own: true}
}

// departures are, per complete collective, each member's departure.
func departures(items []item) ([]map[int]time.Duration, []int) {
	byKey := map[collKey][]*item{}
	ranks := map[int]bool{}
	for i := range items {
		it := &items[i]
		ranks[it.rank] = true
		if it.coll != nil && it.kind == profiler.KindCollective {
			k := collKey{it.coll.group, it.coll.gid, it.coll.seq}
			byKey[k] = append(byKey[k], it)
		}
	}
	var out []map[int]time.Duration
	for k, its := range byKey {
		c := collective(k, its)
		if !c.Complete || len(c.Members) < 2 {
			continue
		}
		d := make(map[int]time.Duration, len(c.Members))
		for _, m := range c.Members {
			d[m.Rank] = m.Leave
		}
		out = append(out, d)
	}
	return out, sortedKeys(ranks)
}

// p2pDepartures are, per send matched with its receive (the k-th send
// from a to b in a communicator, in the sender's order, with the k-th
// receive at b from a), the two ends' departures: when each was done with
// the transfer (the device interval's end, or the network transfer's where
// it ended later). Pairs within one rank, and pairs with an
// end recorded before its start, are left out.
func p2pDepartures(items []item) []map[int]time.Duration {
	sends, recvs := map[p2pKey][]*item{}, map[p2pKey][]*item{}
	for i := range items {
		it := &items[i]
		c := it.coll
		if c == nil || it.kind != profiler.KindP2P {
			continue
		}
		switch c.op {
		case "Send":
			k := p2pKey{c.group, c.gid, c.grank, c.peer}
			sends[k] = append(sends[k], it)
		case "Recv":
			k := p2pKey{c.group, c.gid, c.peer, c.grank}
			recvs[k] = append(recvs[k], it)
		}
	}
	// In each rank's own order: its clock orders its calls whatever its
	// offset.
	byIssue := func(a, b *item) int {
		if c := cmp.Compare(a.coll.seq, b.coll.seq); c != 0 {
			return c
		}
		return cmp.Compare(a.host.Start, b.host.Start)
	}
	var out []map[int]time.Duration
	for _, k := range sortedP2PKeys(sends) {
		ss, rs := sends[k], recvs[k]
		slices.SortFunc(ss, byIssue)
		slices.SortFunc(rs, byIssue)
		for i := range min(len(ss), len(rs)) {
			a, b := ss[i], rs[i]
			// A malformed end (done before it began) times no departure.
			if a.rank == b.rank || a.span().End < a.span().Start || b.span().End < b.span().Start {
				continue
			}
			out = append(out, map[int]time.Duration{a.rank: a.span().End, b.rank: b.span().End})
		}
	}
	return out
}

func sortedP2PKeys[V any](m map[p2pKey]V) []p2pKey {
	keys := make([]p2pKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b p2pKey) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.gid, b.gid), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	return keys
}

// estimate puts the clocks of items' ranks on the reference's. Ranks that
// share a clock (domains) get one offset: a clock's departure at a
// collective is the median of its members', and a clock joins the aligned
// set through any of its ranks. Collectives come first; a clock that no
// collective joins to the aligned ones is aligned on its sends and
// receives, each matched pair taken as a collective of two (listed in
// Offsets.P2P).
//
// A clock joins only through at least minSamples collectives (or sends)
// shared with the aligned clocks: through fewer it is left unaligned, and
// so are the clocks that could only join through it.
func estimate(items []item, domains map[int]int, minSamples int) Offsets {
	deps, ranks := departures(items)
	o := Offsets{Reference: profiler.None, Offset: map[int]time.Duration{}, Residual: map[int]time.Duration{}, Samples: map[int]int{},
		MinSamples: minSamples}
	minSamples = max(minSamples, 1)
	clockRanks := map[clockID][]int{}
	var clocks []clockID // in the order of their lowest rank
	for _, r := range ranks {
		c := clockOf(domains, r)
		if _, ok := clockRanks[c]; !ok {
			clocks = append(clocks, c)
		}
		clockRanks[c] = append(clockRanks[c], r)
	}
	if len(clocks) == 1 {
		// One clock: nothing to align (one rank, a one-GPU job, or the
		// ranks of one process or host).
		o.Reference = ranks[0]
		for _, r := range ranks {
			o.Offset[r] = 0
		}
		return o
	}
	// Per collective (or matched send and receive), each clock's
	// departure: its members' median.
	toClocks := func(deps []map[int]time.Duration) []map[clockID]time.Duration {
		var out []map[clockID]time.Duration
		for _, d := range deps {
			by := map[clockID][]time.Duration{}
			for r, t := range d {
				c := clockOf(domains, r)
				by[c] = append(by[c], t)
			}
			if len(by) < 2 {
				continue // within one clock: says nothing of offsets
			}
			cd := make(map[clockID]time.Duration, len(by))
			for c, v := range by {
				cd[c] = medianOf(v)
			}
			out = append(out, cd)
		}
		return out
	}
	cdeps := toClocks(deps)
	pairs := p2pDepartures(items)
	pdeps := toClocks(pairs)
	ref, found := clockID{}, false
	for _, set := range [][]map[clockID]time.Duration{cdeps, pdeps} {
		for _, c := range clocks {
			for i := range set {
				if _, ok := set[i][c]; ok {
					ref, found = c, true
					break
				}
			}
			if found {
				break
			}
		}
		if found {
			break
		}
	}
	if !found {
		o.Unaligned = ranks
		return o
	}
	o.Reference = clockRanks[ref][0]
	off := map[clockID]time.Duration{ref: 0}
	samples := map[clockID]int{}
	viaP2P := map[clockID]bool{}
	coll, sends := newLinks(cdeps), newLinks(pdeps)
	coll.align(ref, 0)
	sends.align(ref, 0)
	// best is the clock not yet aligned that shares the most of l's
	// departures with the aligned ones, and how many.
	best := func(l *links) (clockID, int) {
		b, bn := clockID{}, 0
		for _, c := range clocks {
			if _, done := off[c]; done {
				continue
			}
			if n := l.shared[c]; n > bn {
				b, bn = c, n
			}
		}
		return b, bn
	}
	// Grow the aligned set one clock at a time, taking next the clock that
	// shares the most collectives with it (the most sends and receives
	// where none shares a collective); its offset is the median, over
	// those, of its departure less the aligned clocks' median aligned
	// departure.
	for {
		l, p2p := coll, false
		c, n := best(coll)
		if n < minSamples {
			l, p2p = sends, true
			c, n = best(sends)
		}
		if n < minSamples {
			break
		}
		var diffs []time.Duration
		// Joined on collectives, but only to clocks that were themselves
		// aligned on sends alone: as coarse. One collective with a clock
		// aligned on collectives makes it fine.
		coarse := true
		for _, i := range l.in[c] {
			if len(l.aligned[i]) == 0 {
				continue
			}
			diffs = append(diffs, l.deps[i][c]-l.median(i))
			if !p2p && coarse {
				for c2 := range l.deps[i] {
					if _, done := off[c2]; done && !viaP2P[c2] {
						coarse = false
						break
					}
				}
			}
		}
		off[c], samples[c], viaP2P[c] = medianOf(diffs), len(diffs), coarse
		o.Joined++
		o.collectives = o.collectives || !coarse
		coll.align(c, off[c])
		sends.align(c, off[c])
	}
	refSet := cdeps
	if len(cdeps) == 0 {
		refSet = pdeps
	}
	for _, d := range refSet {
		if _, ok := d[ref]; ok {
			samples[ref]++
		}
	}
	for _, c := range clocks {
		d, ok := off[c]
		for _, r := range clockRanks[c] {
			switch {
			case !ok:
				o.Unaligned = append(o.Unaligned, r)
				// What it shared with the aligned clocks: too few.
				if n := max(coll.shared[c], sends.shared[c]); n > 0 {
					o.Samples[r] = n
				}
			default:
				o.Offset[r], o.Samples[r] = d, samples[c]
				if viaP2P[c] {
					o.P2P = append(o.P2P, r)
				}
			}
		}
	}
	slices.Sort(o.Unaligned)
	slices.Sort(o.P2P)
	// Residuals over the collectives a rank was in, or over its sends and
	// receives where it was in none.
	res := map[int][]time.Duration{}
	for _, set := range [][]map[int]time.Duration{deps, pairs} {
		for _, d := range set {
			m := alignedMedian(d, o.Offset)
			for r, t := range d {
				if _, done := o.Residual[r]; done {
					continue
				}
				if off, ok := o.Offset[r]; ok {
					res[r] = append(res[r], (t - off - m).Abs())
				}
			}
		}
		for r, v := range res {
			o.Residual[r] = medianOf(v)
		}
		clear(res)
	}
	return o
}

// links indexes departures (of collectives, or of sends matched with
// their receives) by clock, and counts, as clocks are aligned, how many
// of each clock's are shared with an aligned clock: what the growth of
// the aligned set picks by, without a pass over every departure per
// candidate.
type links struct {
	deps []map[clockID]time.Duration
	in   map[clockID][]int // per clock, the departures it is in
	// aligned is, per departure, its aligned clocks' departures put on
	// the reference clock, sorted: their median in O(1).
	aligned [][]time.Duration
	shared  map[clockID]int // per clock, its departures with an aligned clock
}

func newLinks(deps []map[clockID]time.Duration) *links {
	l := &links{deps: deps, in: map[clockID][]int{}, aligned: make([][]time.Duration, len(deps)), shared: map[clockID]int{}}
	for i, d := range deps {
		for c := range d {
			l.in[c] = append(l.in[c], i)
		}
	}
	return l
}

// align counts clock c aligned with offset off.
func (l *links) align(c clockID, off time.Duration) {
	for _, i := range l.in[c] {
		v := l.aligned[i]
		if len(v) == 0 {
			for c2 := range l.deps[i] {
				l.shared[c2]++
			}
		}
		t := l.deps[i][c] - off
		at, _ := slices.BinarySearch(v, t)
		l.aligned[i] = slices.Insert(v, at, t)
	}
}

// median is the median of departure i's aligned clocks' departures, on
// the reference clock; 0 for none.
func (l *links) median(i int) time.Duration {
	v := l.aligned[i]
	n := len(v)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return v[n/2]
	}
	return v[n/2-1] + (v[n/2]-v[n/2-1])/2
}

// alignedMedian is the median aligned departure of d's aligned members.
func alignedMedian[K comparable](d map[K]time.Duration, off map[K]time.Duration) time.Duration {
	var v []time.Duration
	for r, t := range d {
		if o, ok := off[r]; ok {
			v = append(v, t-o)
		}
	}
	return medianOf(v)
}

// medianOf is the median of v (sorted in place); 0 for none.
func medianOf(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return v[n/2-1] + (v[n/2]-v[n/2-1])/2
}

// Apply subtracts each aligned rank's offset from every time of its
// records, in place.
func (o *Offsets) Apply(records []profiler.Record) {
	for i := range records {
		r := &records[i]
		d, ok := o.Offset[r.Rank]
		if !ok || d == 0 {
			continue
		}
		r.HostStart -= d
		r.HostEnd -= d
		if r.HasDevice {
			r.DeviceStart -= d
			r.DeviceEnd -= d
		}
		if r.Collective.TransferEnd != 0 {
			r.Collective.TransferEnd -= d
		}
	}
}

func (o *Offsets) shift(it *item) {
	d, ok := o.Offset[it.rank]
	if !ok || d == 0 {
		return
	}
	it.host.Start -= d
	it.host.End -= d
	if it.work.Activity != profiler.ActivityNone {
		it.work.Start -= d
		it.work.End -= d
	}
	if it.hasTransferEnd {
		it.transferEnd -= d
	}
}

// problems says which ranks could not be aligned.
func (o *Offsets) problems() []string {
	if len(o.Unaligned) == 0 {
		return nil
	}
	if o.Reference == profiler.None {
		// No complete collective at all: there is no clock to put the
		// others on.
		return []string{fmt.Sprintf("clock alignment: no collective was recorded by every rank of its group and no send matched with its receive, so %s cannot be put on one clock; their clocks are left as recorded", ranksList(o.Unaligned))}
	}
	verb, their := "share", "their clocks are"
	if len(o.Unaligned) == 1 {
		verb, their = "shares", "its clock is"
	}
	what := "no complete collective, send or receive"
	if o.MinSamples > 1 {
		what = fmt.Sprintf("fewer than %d complete collectives (or sends matched with their receives)", o.MinSamples)
	}
	return []string{fmt.Sprintf("clock alignment: %s %s %s with rank %d, directly or through other ranks; %s left as recorded", ranksList(o.Unaligned), verb, what, o.Reference, their)}
}

// ranksList is "rank 3" or "ranks 0, 1".
func ranksList(v []int) string {
	if len(v) == 1 {
		return fmt.Sprintf("rank %d", v[0])
	}
	return "ranks " + intList(v)
}
