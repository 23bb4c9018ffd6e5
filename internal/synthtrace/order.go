package synthtrace

import (
	"cmp"
	"slices"

	"github.com/trainscope/trainscope/profiler"
)

// EndOrder returns a copy of recs in the order a profiler finishes host
// ranges: by host end time, so children come before their parents;
// records that end at the same time keep their order.
func EndOrder(recs []profiler.Record) []profiler.Record {
	return EndOrderInto(nil, recs)
}

// EndOrderInto is EndOrder into dst's storage (dst[:0], grown as
// needed), for a caller that orders step after step without allocating.
func EndOrderInto(dst, recs []profiler.Record) []profiler.Record {
	out := append(dst[:0], recs...)
	slices.SortStableFunc(out, func(a, b profiler.Record) int { return cmp.Compare(a.HostEnd, b.HostEnd) })
	return out
}

// DeviceLater cuts recs into batches of n records and moves every record
// with a device time into the batch after its own, as a collector
// delivers a device range whose events complete one pass after the
// ranges around it were collected: device ranges then arrive after their
// parents, and after their step.
func DeviceLater(recs []profiler.Record, n int) [][]profiler.Record {
	n = max(n, 1)
	var out [][]profiler.Record
	var carried []profiler.Record
	for i := 0; i < len(recs); i += n {
		batch := carried
		carried = nil
		for _, r := range recs[i:min(i+n, len(recs))] {
			if r.HasDevice {
				carried = append(carried, r)
			} else {
				batch = append(batch, r)
			}
		}
		out = append(out, batch)
	}
	if len(carried) > 0 {
		out = append(out, carried)
	}
	return out
}
