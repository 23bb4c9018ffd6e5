package quantile

import (
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
)

// NearestRank returns the ⌈q·n⌉-th smallest of the n values in s (the
// smallest for q ≤ 0), within the sketch's relative accuracy, for q in
// [0, 1]. It fails where the sketch does: when it is empty.
func NearestRank(s *ddsketch.DDSketch, q float64) (float64, error) {
	n := s.GetCount()
	at := 0.0
	if n > 1 {
		// The sketch answers for rank ⌊at·(n−1)⌋ (0-based): ask for the
		// middle of the wanted rank's interval, clear of rounding. Values
		// below zero it ranks from the other end, in a store of their
		// own, so there rank k is ⌈at·(n−1)⌉: ask just below it.
		k := max(math.Ceil(q*n)-1, 0)
		r := k + 0.5
		if k < s.GetNegativeValueStore().TotalCount() {
			r = max(k-0.5, 0)
		}
		at = min(r/(n-1), 1)
	}
	return s.GetValueAtQuantile(at)
}
