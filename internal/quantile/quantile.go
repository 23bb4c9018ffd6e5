package quantile

import (
	"errors"
	"math"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
)

// errNaN refuses a NaN quantile, which the sketch would answer with its
// largest value.
var errNaN = errors.New("quantile: the quantile is NaN")

// NearestRank returns the ⌈q·n⌉-th smallest of the n values in s (the
// smallest for q ≤ 0), within the sketch's relative accuracy, for q in
// [0, 1]. It fails where the sketch does: when it is empty; and for a NaN
// q.
func NearestRank(s *ddsketch.DDSketch, q float64) (float64, error) {
	if math.IsNaN(q) {
		return math.NaN(), errNaN
	}
	n := s.GetCount()
	at := 0.0
	if n > 1 {
		// The sketch answers for rank ⌊at·(n−1)⌋ (0-based): ask for the
		// middle of the wanted rank's interval, clear of rounding. Values
		// below zero it ranks from the other end, in a store of their
		// own, so there rank k is ⌈at·(n−1)⌉: ask just below it.
		k := max(math.Ceil(wholeIfClose(q*n))-1, 0)
		r := k + 0.5
		if k < s.GetNegativeValueStore().TotalCount() {
			r = max(k-0.5, 0)
		}
		at = min(r/(n-1), 1)
	}
	return s.GetValueAtQuantile(at)
}

// Duration is NearestRank of a sketch of durations in nanoseconds, kept
// within [lo, hi], the exact least and greatest: the sketch's value is
// within its accuracy of the exact one and may fall outside them. It is 0
// where NearestRank fails.
func Duration(s *ddsketch.DDSketch, q float64, lo, hi time.Duration) time.Duration {
	v, err := NearestRank(s, q)
	if err != nil {
		return 0
	}
	return min(max(time.Duration(math.Round(v)), lo), hi)
}

// wholeIfClose returns x rounded to the nearest whole number when it lies
// within a few rounding errors of it, and x otherwise. A quantile written
// as a decimal is not exact in binary (0.55 is a little above 0.55), so
// q·n for a count that makes it whole in decimal (0.55·100) comes out a
// hair above the whole number, and its ceiling would name the next rank.
func wholeIfClose(x float64) float64 {
	r := math.Round(x)
	if math.Abs(x-r) <= 1e-12*math.Abs(r) {
		return r
	}
	return x
}
