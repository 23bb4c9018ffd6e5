package profiler

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// TableOption adjusts a per-rank table of WriteStepBreakdown or
// WriteStepTimes.
type TableOption interface{ applyTable(*tableConfig) }

type tableConfig struct{ rows int }

type tableOptionFunc func(*tableConfig)

func (f tableOptionFunc) applyTable(c *tableConfig) { f(c) }

// WithRankRows(n) keeps n rows of a per-rank table of more ranks: those
// of the ranks that stand out most (WriteStepBreakdown: the longest mean
// step; WriteStepTimes: the highest p99), in that order, under a line
// saying so. The lines after the table still cover every rank. It is for
// a screen, where a thousand rows would bury the rest; n < 1 keeps every
// row.
func WithRankRows(n int) TableOption {
	return tableOptionFunc(func(c *tableConfig) { c.rows = n })
}

func tableOptions(opts []TableOption) tableConfig {
	var c tableConfig
	for _, o := range opts {
		if o != nil {
			o.applyTable(&c)
		}
	}
	return c
}

// standingOut returns the indices of the rows to write: every row in
// order, or, with a limit below their number, the limit's worth with the
// highest key (ties by index), highest first, after writing a line that
// says what was kept (what names the key: "the longest mean step").
func standingOut(w io.Writer, n, limit int, key func(i int) int64, what string) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if limit < 1 || limit >= n {
		return idx
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(key(b), key(a)) })
	fmt.Fprintf(w, "the %d of %d ranks with %s (the others left out here):\n", limit, n, what)
	return idx[:limit]
}
