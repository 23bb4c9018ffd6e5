package analysis

import (
	"fmt"
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
	// was estimated from.
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
// by group and sequence number.
func EstimateOffsets(records []profiler.Record) Offsets {
	var its []item
	for i := range records {
		if it, ok := keep(&records[i]); ok {
			its = append(its, it)
		}
	}
	return estimate(its)
}

// departures are, per complete collective, each member's departure.
func departures(items []item) ([]map[int]time.Duration, []int) {
	byKey := map[collKey][]*item{}
	ranks := map[int]bool{}
	for i := range items {
		it := &items[i]
		ranks[it.rank] = true
		if it.coll != nil && it.kind == profiler.KindCollective {
			k := collKey{it.coll.group, it.coll.seq}
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

func estimate(items []item) Offsets {
	deps, ranks := departures(items)
	o := Offsets{Reference: profiler.None, Offset: map[int]time.Duration{}, Residual: map[int]time.Duration{}, Samples: map[int]int{}}
	inColl := map[int]bool{}
	for _, d := range deps {
		for r := range d {
			inColl[r] = true
		}
	}
	for _, r := range ranks {
		if inColl[r] {
			o.Reference = r
			break
		}
	}
	if o.Reference == profiler.None && len(ranks) == 1 {
		// One rank is on one clock: nothing to align (a one-GPU job).
		o.Reference, o.Offset[ranks[0]] = ranks[0], 0
		return o
	}
	if o.Reference == profiler.None {
		o.Unaligned = ranks
		return o
	}
	o.Offset[o.Reference] = 0
	// Grow the aligned set one rank at a time, taking next the rank that
	// shares the most collectives with it; its offset is the median, over
	// those collectives, of its departure less the aligned members'
	// median aligned departure.
	for {
		best, bestN := profiler.None, 0
		for _, r := range ranks {
			if _, done := o.Offset[r]; done {
				continue
			}
			n := 0
			for _, d := range deps {
				if _, ok := d[r]; ok && alignedIn(d, o.Offset) > 0 {
					n++
				}
			}
			if n > bestN {
				best, bestN = r, n
			}
		}
		if best == profiler.None {
			break
		}
		var diffs []time.Duration
		for _, d := range deps {
			t, ok := d[best]
			if !ok || alignedIn(d, o.Offset) == 0 {
				continue
			}
			diffs = append(diffs, t-alignedMedian(d, o.Offset))
		}
		o.Offset[best] = medianOf(diffs)
		o.Samples[best] = len(diffs)
	}
	o.Samples[o.Reference] = 0
	for _, d := range deps {
		if _, ok := d[o.Reference]; ok {
			o.Samples[o.Reference]++
		}
	}
	for _, r := range ranks {
		if _, ok := o.Offset[r]; !ok {
			o.Unaligned = append(o.Unaligned, r)
		}
	}
	res := map[int][]time.Duration{}
	for _, d := range deps {
		m := alignedMedian(d, o.Offset)
		for r, t := range d {
			if off, ok := o.Offset[r]; ok {
				res[r] = append(res[r], (t - off - m).Abs())
			}
		}
	}
	for r, v := range res {
		o.Residual[r] = medianOf(v)
	}
	return o
}

func alignedIn(d map[int]time.Duration, off map[int]time.Duration) int {
	n := 0
	for r := range d {
		if _, ok := off[r]; ok {
			n++
		}
	}
	return n
}

// alignedMedian is the median aligned departure of d's aligned members.
func alignedMedian(d map[int]time.Duration, off map[int]time.Duration) time.Duration {
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
	if it.transferEnd != 0 {
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
		return []string{fmt.Sprintf("clock alignment: no collective was recorded by every rank of its group, so %s cannot be put on one clock; their clocks are left as recorded", ranksList(o.Unaligned))}
	}
	verb, their := "share", "their clocks are"
	if len(o.Unaligned) == 1 {
		verb, their = "shares", "its clock is"
	}
	return []string{fmt.Sprintf("clock alignment: %s %s no complete collective with rank %d, directly or through other ranks; %s left as recorded", ranksList(o.Unaligned), verb, o.Reference, their)}
}

// ranksList is "rank 3" or "ranks 0, 1".
func ranksList(v []int) string {
	if len(v) == 1 {
		return fmt.Sprintf("rank %d", v[0])
	}
	return "ranks " + intList(v)
}
