package profiler

import (
	"cmp"
	"slices"
)

func sortRecords(rs []Record) {
	slices.SortStableFunc(rs, func(a, b Record) int {
		if c := cmp.Compare(a.Rank, b.Rank); c != 0 {
			return c
		}
		if c := cmp.Compare(a.HostStart, b.HostStart); c != 0 {
			return c
		}
		return cmp.Compare(a.Depth, b.Depth)
	})
}
