package schedule

import (
	"fmt"
	"math"
	"testing"
)

// executeDAG is an executor written independently of Simulate: it turns a
// schedule into an explicit dependency graph (each stage's list order; the
// forward of virtual stage k after that of k−1; the backward of k after
// that of k+1; every backward after its own forward) and orders it with
// Kahn's algorithm. A graph with a cycle is a deadlock. It returns when each
// action starts, by stage and position in the stage's list, with a forward
// costing f and a backward b, so that Simulate can be checked against it.
func executeDAG(s *Schedule, f, b float64) ([][]float64, error) {
	p, v, m := s.Stages(), s.Chunks(), s.Microbatches()
	type node struct {
		kind   Kind
		vs, mb int
	}
	type pos struct{ stage, i int }
	id := map[node]int{}
	var where []pos
	var cost []float64
	lists := make([][]int, p)
	for st := range p {
		acts := s.Actions(st)
		if len(acts) != 2*v*m {
			return nil, fmt.Errorf("stage %d has %d actions, want %d", st, len(acts), 2*v*m)
		}
		for i, a := range acts {
			if a.Kind > Backward || a.Chunk < 0 || a.Chunk >= v || a.Microbatch < 0 || a.Microbatch >= m {
				return nil, fmt.Errorf("stage %d: %v out of range", st, a)
			}
			n := node{a.Kind, a.Chunk*p + st, a.Microbatch}
			if _, dup := id[n]; dup {
				return nil, fmt.Errorf("stage %d runs %v twice", st, a)
			}
			id[n] = len(where)
			where = append(where, pos{st, i})
			lists[st] = append(lists[st], id[n])
			if a.Kind == Forward {
				cost = append(cost, f)
			} else {
				cost = append(cost, b)
			}
		}
	}
	// Every (kind, virtual stage, microbatch) is present exactly once: the
	// counts match and there are no duplicates.
	n := len(where)
	succ := make([][]int, n)
	indeg := make([]int, n)
	edge := func(from, to int) {
		succ[from] = append(succ[from], to)
		indeg[to]++
	}
	for _, l := range lists {
		for i := 1; i < len(l); i++ {
			edge(l[i-1], l[i])
		}
	}
	for x, i := range id {
		switch {
		case x.kind == Forward:
			edge(i, id[node{Backward, x.vs, x.mb}])
			if x.vs > 0 {
				edge(id[node{Forward, x.vs - 1, x.mb}], i)
			}
		case x.vs < p*v-1:
			edge(id[node{Backward, x.vs + 1, x.mb}], i)
		}
	}
	start := make([]float64, n)
	var ready []int
	for i := range n {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	ran := 0
	for len(ready) > 0 {
		i := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		ran++
		for _, j := range succ[i] {
			start[j] = max(start[j], start[i]+cost[i])
			if indeg[j]--; indeg[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	if ran != n {
		return nil, fmt.Errorf("deadlock: only %d of %d actions can run", ran, n)
	}
	out := make([][]float64, p)
	for st := range p {
		out[st] = make([]float64, 2*v*m)
	}
	for i, w := range where {
		out[w.stage][w.i] = start[i]
	}
	return out, nil
}

// TestSchedulesAgainstIndependentExecutor runs every schedule of many
// sizes, the edge ones included (one stage, one microbatch, m < p with
// several chunks), through executeDAG and checks that it completes, that
// Simulate agrees with it on every start time, and that the bubble is the
// analytic one: IdealBubbleFraction for 1F1B and interleaved 1F1B, and for
// GPipe where it applies (v = 1 or m ≥ p). GPipe with v > 1 and m < p waits
// for the pipeline to fill once per chunk pass, which no order of its
// all-forwards-first lists avoids: its makespan is
// (f+b)((v−1)·max(m, p) + m + p − 1).
func TestSchedulesAgainstIndependentExecutor(t *testing.T) {
	for _, c := range constructors {
		for p := 1; p <= 6; p++ {
			for v := 1; v <= 4; v++ {
				for m := 1; m <= 3*p+1; m++ {
					if c.name == "Interleaved1F1B" && v > 1 && m%p != 0 {
						continue
					}
					s, err := c.new(p, v, m)
					if err != nil {
						t.Fatalf("%s(%d, %d, %d): %v", c.name, p, v, m, err)
					}
					for _, fb := range [][2]float64{{1, 1}, {1, 3}} {
						f, b := fb[0], fb[1]
						name := fmt.Sprintf("%s p=%d v=%d m=%d f=%g b=%g", c.name, p, v, m, f, b)
						starts, err := executeDAG(s, f, b)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						tl, err := Simulate(s, UniformCost(f, b))
						if err != nil {
							t.Fatalf("%s: Simulate: %v", name, err)
						}
						for st := range p {
							for i, sp := range tl.Spans[st] {
								if sp.Start != starts[st][i] {
									t.Fatalf("%s stage %d: %v starts at %g in Simulate, %g in the independent executor", name, st, sp.Action, sp.Start, starts[st][i])
								}
							}
						}
						vm := float64(v * m)
						fill := float64(m + p - 1)
						if c.name == "GPipe" {
							fill += float64((v - 1) * max(m, p))
						} else {
							fill += float64((v - 1) * m)
						}
						if want := (f + b) * fill; math.Abs(tl.Makespan-want) > eps {
							t.Errorf("%s: makespan %g, want %g", name, tl.Makespan, want)
						}
						ideal := IdealBubbleFraction(p, v, m)
						got := tl.BubbleFraction()
						switch {
						case c.name == "GPipe" && v > 1 && m < p:
							if want := 1 - vm/fill; math.Abs(got-want) > eps || !(got > ideal) {
								t.Errorf("%s: bubble %g, want %g (above the ideal %g)", name, got, want, ideal)
							}
						case math.Abs(got-ideal) > eps:
							t.Errorf("%s: bubble %g, IdealBubbleFraction %g", name, got, ideal)
						}
					}
				}
			}
		}
	}
}

// BubbleFraction is the bubble Simulate finds for the schedule with
// uniform costs, for GPipe (where v > 1 and m < p refill the pipeline on
// every chunk pass) and interleaved 1F1B, at any forward:backward ratio.
func TestBubbleFractionMatchesSimulation(t *testing.T) {
	for p := 1; p <= 6; p++ {
		for v := 1; v <= 4; v++ {
			for m := 1; m <= 3*p+1; m++ {
				for _, build := range []struct {
					name string
					make func(p, v, m int) (*Schedule, error)
				}{{"gpipe", GPipe}, {"interleaved", Interleaved1F1B}} {
					s, err := build.make(p, v, m)
					if err != nil {
						continue // interleaved needs m a multiple of p
					}
					for _, fb := range [][2]float64{{1, 2}, {3, 1}} {
						tl, err := Simulate(s, UniformCost(fb[0], fb[1]))
						if err != nil {
							t.Fatal(err)
						}
						if got, want := s.BubbleFraction(), tl.BubbleFraction(); math.Abs(got-want) > 1e-12 {
							t.Errorf("%s p=%d v=%d m=%d, f:b %v: BubbleFraction %.6f, simulated %.6f", build.name, p, v, m, fb, got, want)
						}
					}
				}
			}
		}
	}
	var zero Schedule
	if !math.IsNaN(zero.BubbleFraction()) {
		t.Errorf("the zero Schedule's BubbleFraction = %v, want NaN", zero.BubbleFraction())
	}
}
