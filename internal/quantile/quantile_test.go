package quantile_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/trainscope/trainscope/internal/quantile"
)

// Ten values 1…10: by nearest rank the p50 is the 5th, the p90 the 9th and
// the p99 the 10th, the largest.
func TestNearestRankSmall(t *testing.T) {
	s, err := ddsketch.NewDefaultDDSketch(0.01)
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 10; v++ {
		if err := s.Add(float64(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.1, 1}, {0.11, 2}, {0.5, 5}, {0.9, 9}, {0.91, 10}, {0.99, 10}, {1, 10}} {
		got, err := quantile.NearestRank(s, c.q)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-c.want) > 0.01*c.want {
			t.Errorf("q %v: %v, want %v within 1%%", c.q, got, c.want)
		}
	}
}

// Against the exact nearest-rank quantile of random values, for counts
// where rounding of q·n matters.
func TestNearestRankRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 7, 99, 100, 101, 1000} {
		s, err := ddsketch.NewDefaultDDSketch(0.01)
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = 1 + rng.ExpFloat64()*100
			if err := s.Add(vals[i]); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(vals)
		for _, q := range []float64{0.5, 0.9, 0.99} {
			want := vals[max(int(math.Ceil(q*float64(n)))-1, 0)]
			got, err := quantile.NearestRank(s, q)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-want) > 0.01*want {
				t.Errorf("n %d q %v: %v, want %v within 1%%", n, q, got, want)
			}
		}
	}
}

func TestNearestRankEmpty(t *testing.T) {
	s, err := ddsketch.NewDefaultDDSketch(0.01)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quantile.NearestRank(s, 0.5); err == nil {
		t.Error("an empty sketch gave a quantile")
	}
}

// Values below zero (the sketch keeps them in a store of their own,
// mirrored) and zeros are ranked as the others: the ⌈q·n⌉-th smallest.
func TestNearestRankNegativeAndZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{2, 3, 10, 101} {
		s, err := ddsketch.NewDefaultDDSketch(0.01)
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float64, n)
		for i := range vals {
			switch i % 3 {
			case 0:
				vals[i] = -1 - rng.ExpFloat64()*100
			case 1:
				vals[i] = 1 + rng.ExpFloat64()*100
			}
			if err := s.Add(vals[i]); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(vals)
		for k := 1; k <= n; k++ {
			// q in the middle of the k-th value's share, clear of rounding.
			q := (float64(k) - 0.5) / float64(n)
			want := vals[k-1]
			got, err := quantile.NearestRank(s, q)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-want) > 0.01*math.Abs(want) {
				t.Errorf("n %d q %v (value %d of %d): %v, want %v within 1%%", n, q, k, n, got, want)
			}
		}
	}
}

// Quantiles written as decimals (p55, p7) whose product with the count is
// a whole number in exact arithmetic but not in floating point: the
// nearest rank is that whole number, ⌈q·n⌉ computed exactly, for values in
// any order. 0.55·100 is 55.000000000000007 in float64, and its ceiling
// named the 56th value.
func TestNearestRankDecimalQuantiles(t *testing.T) {
	for _, order := range []string{"sorted", "reversed", "shuffled"} {
		for _, n := range []int{20, 25, 50, 100, 300, 1000} {
			s, err := ddsketch.NewDefaultDDSketch(0.01)
			if err != nil {
				t.Fatal(err)
			}
			vals := make([]float64, n)
			for i := range vals {
				vals[i] = float64(i + 1) // the k-th smallest is k
			}
			switch order {
			case "reversed":
				slices.Reverse(vals)
			case "shuffled":
				rand.New(rand.NewPCG(uint64(n), 7)).Shuffle(n, func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
			}
			for _, v := range vals {
				if err := s.Add(v); err != nil {
					t.Fatal(err)
				}
			}
			for pct := 1; pct < 100; pct++ {
				q := float64(pct) / 100
				want := float64((pct*n + 99) / 100) // ⌈pct·n/100⌉ in integers
				got, err := quantile.NearestRank(s, q)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(got-want) > 0.01*want {
					t.Errorf("%s n %d q %v: %v, want the %v-th value within 1%%", order, n, q, got, want)
				}
			}
		}
	}
}

// A NaN quantile is refused, not answered with the largest value.
func TestNearestRankNaN(t *testing.T) {
	s, err := ddsketch.NewDefaultDDSketch(0.01)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{-3, 1, 2} {
		if err := s.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := quantile.NearestRank(s, math.NaN()); err == nil {
		t.Errorf("NearestRank(NaN) = %v, want an error", v)
	}
}

// TestDuration: a quantile of durations is the sketch's within 1 %, kept
// within the exact extremes given (the sketch's 100 ms reads a little
// above or below 100 ms; with 100 ms given as the least and the
// greatest it is exactly that), and 0 for an empty sketch.
func TestDuration(t *testing.T) {
	s, err := ddsketch.LogCollapsingLowestDenseDDSketch(0.01, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if d := quantile.Duration(s, 0.5, 0, time.Second); d != 0 {
		t.Errorf("empty sketch: %v, want 0", d)
	}
	for range 10 {
		if err := s.Add(float64(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if d := quantile.Duration(s, 0.5, 0, time.Hour); d < 99*time.Millisecond || d > 101*time.Millisecond {
		t.Errorf("median %v, want 100ms within 1%%", d)
	}
	if d := quantile.Duration(s, 0.99, 100*time.Millisecond, 100*time.Millisecond); d != 100*time.Millisecond {
		t.Errorf("p99 kept within [100ms, 100ms]: %v", d)
	}
}
