package cycle

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exhaustiveRepeat is longestRepeat's definition, comparing every
// operation with the one q later for every q: the reference the faster
// search must agree with.
func exhaustiveRepeat(ops []op) (start, m, p int) {
	n := len(ops)
	for q := 1; q*MinRepeats <= n; q++ {
		run := 0
		for i := 0; i+q <= n; i++ {
			if i+q < n && ops[i].sig == ops[i+q].sig {
				run++
				continue
			}
			if l := run + q; run > 0 && l >= MinRepeats*q && l > m {
				start, m, p = i-run, l, q
			}
			run = 0
		}
	}
	return start, m, p
}

// everyMultiple is the cycle's definition: the shortest multiple of p up
// to m/MinRepeats that takes a steady time and, where c > p or p == 1,
// starts after a gap of its own; 0 where none does. The reference for
// candidates, which tries only the multiples that could start after one.
func everyMultiple(stretch []op, gaps []time.Duration, p, m int, typical time.Duration) int {
	for c := p; c*MinRepeats <= m; c += p {
		if _, ok := steadyCycle(stretch, c, c > p || p == 1); !ok {
			continue
		}
		if c > p || p == 1 {
			if b, _ := boundary(gaps, c); b <= 0 || b < MinBoundary*typical {
				continue
			}
		}
		return c
	}
	return 0
}

// randomOps draws a rank's operations: noise, then a pattern of a few
// kinds repeated with an occasional stray operation, each cycle pausing
// at one place or not, then noise (or none); gaps between operations of a few
// sizes, some jittered, some equal.
func randomOps(rng *rand.Rand) []op {
	kinds := 1 + rng.IntN(4)
	pattern := make([]uint64, 1+rng.IntN(12))
	for i := range pattern {
		pattern[i] = uint64(rng.IntN(kinds))
	}
	var ops []op
	t := time.Duration(0)
	add := func(sig uint64, gap time.Duration) {
		t += gap
		ops = append(ops, op{sig: sig, start: t})
	}
	gap := func() time.Duration {
		switch rng.IntN(3) {
		case 0:
			return time.Millisecond
		case 1:
			return time.Duration(rng.IntN(2000)) * time.Microsecond
		}
		return 0
	}
	noise := func() int { // none, a third of the time
		return max(0, rng.IntN(30)-10)
	}
	for range noise() {
		add(uint64(rng.IntN(kinds+2)), gap())
	}
	pause := rng.IntN(len(pattern) + 1)
	for range rng.IntN(60) {
		for i, sig := range pattern {
			g := gap()
			if i == pause {
				g += time.Duration(2+rng.IntN(8)) * time.Millisecond // 3 ms after 1 ms: MinBoundary times it exactly
			}
			add(sig, g)
			if rng.IntN(200) == 0 {
				add(uint64(kinds+rng.IntN(3)), gap())
			}
		}
	}
	for range noise() {
		add(uint64(rng.IntN(kinds+2)), gap())
	}
	return ops
}

// TestSearchAgreesWithItsDefinition: on thousands of random rank
// histories, longestRepeat finds the stretch the exhaustive comparison
// finds, and candidates lets find pick the cycle trying every multiple
// picks.
func TestSearchAgreesWithItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	found := 0
	for k := range 5000 {
		ops := randomOps(rng)
		s, m, p := longestRepeat(ops)
		ws, wm, wp := exhaustiveRepeat(ops)
		if s != ws || m != wm || p != wp {
			t.Fatalf("case %d (%d ops): stretch at %d of %d, period %d; exhaustive: at %d of %d, period %d", k, len(ops), s, m, p, ws, wm, wp)
		}
		if m == 0 {
			continue
		}
		stretch := ops[s : s+m]
		gaps := make([]time.Duration, m-1)
		for i := range gaps {
			gaps[i] = stretch[i+1].start - stretch[i].start
		}
		typical := median(slices.Clone(gaps))
		want := everyMultiple(stretch, gaps, p, m, typical)
		got := 0
		for _, c := range candidates(gaps, p, m, typical) {
			if _, ok := steadyCycle(stretch, c, c > p || p == 1); !ok {
				continue
			}
			if c > p || p == 1 {
				if b, _ := boundary(gaps, c); b <= 0 || b < MinBoundary*typical {
					continue
				}
			}
			got = c
			break
		}
		if got != want {
			t.Fatalf("case %d: cycle of %d, every multiple tried: %d (period %d, stretch %d)", k, got, want, p, m)
		}
		if got > 0 {
			found++
		}
	}
	// The draws must exercise the cycle, not only its absence.
	if found < 500 {
		t.Errorf("a cycle in %d of 5000 draws; the test needs more", found)
	}
}

// TestPairApart against comparing every pair of bits.
func TestPairApart(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 1 + rng.IntN(300)
		set := make([]bool, n)
		bits := make([]uint64, (n+63)/64)
		for i := range set {
			if rng.IntN(8) == 0 {
				set[i] = true
				bits[i/64] |= 1 << (i % 64)
			}
		}
		for c := 1; c < n+2; c++ {
			want := false
			for i := 0; i+c < n; i++ {
				want = want || set[i] && set[i+c]
			}
			if got := pairApart(bits, c); got != want {
				t.Fatalf("%d bits, %d apart: %v, want %v", n, c, got, want)
			}
		}
	}
}

// BenchmarkLongestRepeat: the search beside the exhaustive comparison it
// replaces, on a full window: a pipeline stage's steps of 3,209 operations
// (the stretch found at the first long period), 48 all-reduces of one size
// a step (found at once; every later period a multiple of it), and sizes
// that never repeat.
func BenchmarkLongestRepeat(b *testing.B) {
	step := make([]uint64, 3209)
	for i := range step {
		step[i] = uint64(i%7) + uint64(i/500)<<8
	}
	cases := map[string]func(i int) uint64{
		"stage":    func(i int) uint64 { return step[i%len(step)] },
		"one-kind": func(int) uint64 { return 1 },
		"none":     func(i int) uint64 { return uint64(i) },
	}
	for _, name := range []string{"stage", "one-kind", "none"} {
		ops := make([]op, Window)
		for i := range ops {
			ops[i] = op{sig: cases[name](i), start: time.Duration(i) * time.Millisecond}
		}
		for _, f := range []struct {
			name string
			fn   func([]op) (int, int, int)
		}{{"search", longestRepeat}, {"exhaustive", exhaustiveRepeat}} {
			b.Run(name+"/"+f.name, func(b *testing.B) {
				b.ReportAllocs()
				_, m0, p0 := longestRepeat(ops)
				for b.Loop() {
					if _, m, p := f.fn(ops); m != m0 || p != p0 {
						b.Fatal(m, p)
					}
				}
			})
		}
	}
}
