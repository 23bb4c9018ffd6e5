package analysis

import (
	"cmp"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Interval lists: sorted by start and disjoint, as profiler.BusyIntervals
// returns them.

// union returns the union of iv as a list (iv is sorted in place).
func union(iv []profiler.Interval) []profiler.Interval {
	slices.SortFunc(iv, func(a, b profiler.Interval) int { return cmp.Compare(a.Start, b.Start) })
	var out []profiler.Interval
	for _, x := range iv {
		if x.End <= x.Start {
			continue
		}
		if n := len(out); n > 0 && x.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, x.End)
			continue
		}
		out = append(out, x)
	}
	return out
}

// intersect returns the intersection of two lists.
func intersect(a, b []profiler.Interval) []profiler.Interval {
	var out []profiler.Interval
	for i, j := 0, 0; i < len(a) && j < len(b); {
		s, e := max(a[i].Start, b[j].Start), min(a[i].End, b[j].End)
		if s < e {
			out = append(out, profiler.Interval{Start: s, End: e})
		}
		if a[i].End < b[j].End {
			i++
		} else {
			j++
		}
	}
	return out
}

// subtract returns a less b, both lists.
func subtract(a, b []profiler.Interval) []profiler.Interval {
	var out []profiler.Interval
	j := 0
	for _, x := range a {
		s := x.Start
		for j < len(b) && b[j].End <= s {
			j++
		}
		for k := j; k < len(b) && b[k].Start < x.End; k++ {
			if b[k].Start > s {
				out = append(out, profiler.Interval{Start: s, End: b[k].Start})
			}
			s = max(s, b[k].End)
		}
		if s < x.End {
			out = append(out, profiler.Interval{Start: s, End: x.End})
		}
	}
	return out
}

// clippedLen is the total length of a list within w.
func clippedLen(list []profiler.Interval, w profiler.Interval) time.Duration {
	var t time.Duration
	for _, x := range list {
		if s, e := max(x.Start, w.Start), min(x.End, w.End); s < e {
			t += e - s
		}
	}
	return t
}
