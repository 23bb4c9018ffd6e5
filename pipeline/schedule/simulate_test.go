package schedule

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

const eps = 1e-9

// TestSimulateSpans checks every start and end time of classic 1F1B with
// p=2, m=4 and unit costs, worked out by hand:
//
//	t    0  1  2  3  4  5  6  7  8  9
//	s0   F0 F1 .  B0 F2 B1 F3 B2 .  B3
//	s1   .  F0 B0 F1 B1 F2 B2 F3 B3 .
func TestSimulateSpans(t *testing.T) {
	s, err := Interleaved1F1B(2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := Simulate(s, UniformCost(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]struct {
		a          string
		start, end float64
	}{
		{{"F0.c0", 0, 1}, {"F1.c0", 1, 2}, {"B0.c0", 3, 4}, {"F2.c0", 4, 5}, {"B1.c0", 5, 6}, {"F3.c0", 6, 7}, {"B2.c0", 7, 8}, {"B3.c0", 9, 10}},
		{{"F0.c0", 1, 2}, {"B0.c0", 2, 3}, {"F1.c0", 3, 4}, {"B1.c0", 4, 5}, {"F2.c0", 5, 6}, {"B2.c0", 6, 7}, {"F3.c0", 7, 8}, {"B3.c0", 8, 9}},
	}
	if len(tl.Spans) != len(want) {
		t.Fatalf("%d stages of spans, want %d", len(tl.Spans), len(want))
	}
	for st, ws := range want {
		if len(tl.Spans[st]) != len(ws) {
			t.Fatalf("stage %d: %d spans, want %d", st, len(tl.Spans[st]), len(ws))
		}
		for i, w := range ws {
			got := tl.Spans[st][i]
			wa := parseActions(t, w.a)[0]
			if got.Stage != st || got.Action != wa || got.Start != w.start || got.End != w.end {
				t.Errorf("stage %d span %d = %+v, want %v [%g, %g]", st, i, got, wa, w.start, w.end)
			}
		}
		if tl.Busy[st] != 8 || tl.Idle[st] != 2 {
			t.Errorf("stage %d: busy %g idle %g, want 8 and 2", st, tl.Busy[st], tl.Idle[st])
		}
	}
	if tl.Makespan != 10 {
		t.Errorf("makespan %g, want 10", tl.Makespan)
	}
	if got := tl.BubbleFraction(); math.Abs(got-0.2) > eps {
		t.Errorf("bubble %g, want 0.2", got)
	}
}

// TestSimulatedBubble checks the simulator against the analytic pipeline
// bubble. With free communication and every forward costing f and every
// backward b on every chunk, the critical path is p−1 forward hops to fill
// the pipeline, v·m·(f+b) of work on one stage and p−1 backward hops to
// drain it, so the makespan is (f+b)(v·m + p−1) and each stage is idle
// (p−1)/(v·m + p−1) of it, whether f equals b or not, for GPipe and 1F1B.
func TestSimulatedBubble(t *testing.T) {
	cases := [][3]int{
		{1, 1, 4}, {2, 1, 4}, {4, 1, 8}, {4, 1, 3}, {8, 1, 32},
		{2, 2, 4}, {4, 2, 8}, {4, 2, 4}, {4, 4, 8}, {3, 3, 6}, {8, 2, 16}, {4, 2, 12},
	}
	costs := [][2]float64{{1, 1}, {1, 2}}
	for _, c := range constructors {
		for _, sz := range cases {
			for _, cost := range costs {
				p, v, m := sz[0], sz[1], sz[2]
				f, b := cost[0], cost[1]
				name := fmt.Sprintf("%s p=%d v=%d m=%d f=%g b=%g", c.name, p, v, m, f, b)
				s, err := c.new(p, v, m)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				tl, err := Simulate(s, UniformCost(f, b))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				vm := float64(v * m)
				wantMakespan := (f + b) * (vm + float64(p-1))
				wantBubble := float64(p-1) / (vm + float64(p-1))
				if math.Abs(tl.Makespan-wantMakespan) > eps {
					t.Errorf("%s: makespan %g, want %g", name, tl.Makespan, wantMakespan)
				}
				if got := tl.BubbleFraction(); math.Abs(got-wantBubble) > eps {
					t.Errorf("%s: bubble %g, want %g", name, got, wantBubble)
				}
				if ideal := IdealBubbleFraction(p, v, m); math.Abs(tl.BubbleFraction()-ideal) > eps {
					t.Errorf("%s: bubble %g, IdealBubbleFraction %g", name, tl.BubbleFraction(), ideal)
				}
				for st := range p {
					if math.Abs(tl.Busy[st]-vm*(f+b)) > eps {
						t.Errorf("%s stage %d: busy %g, want %g", name, st, tl.Busy[st], vm*(f+b))
					}
					if math.Abs(tl.Busy[st]+tl.Idle[st]-tl.Makespan) > eps {
						t.Errorf("%s stage %d: busy %g + idle %g != makespan %g", name, st, tl.Busy[st], tl.Idle[st], tl.Makespan)
					}
				}
			}
		}
	}
}

// TestInterleavingShrinksBubble compares the same total work per stage
// split into v = 1 and v = 2 chunks (each chunk costing half as much).
func TestInterleavingShrinksBubble(t *testing.T) {
	for _, sz := range [][2]int{{2, 4}, {4, 8}, {4, 12}, {8, 16}} {
		p, m := sz[0], sz[1]
		one, err := Interleaved1F1B(p, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		two, err := Interleaved1F1B(p, 2, m)
		if err != nil {
			t.Fatal(err)
		}
		t1, err := Simulate(one, UniformCost(1, 2))
		if err != nil {
			t.Fatal(err)
		}
		t2, err := Simulate(two, UniformCost(0.5, 1))
		if err != nil {
			t.Fatal(err)
		}
		if !(t2.BubbleFraction() < t1.BubbleFraction()) {
			t.Errorf("p=%d m=%d: bubble v=2 %g not below v=1 %g", p, m, t2.BubbleFraction(), t1.BubbleFraction())
		}
		if !(t2.Makespan < t1.Makespan) {
			t.Errorf("p=%d m=%d: makespan v=2 %g not below v=1 %g", p, m, t2.Makespan, t1.Makespan)
		}
		// Same work per stage: 3m. The fill and drain shrink from 3(p−1)
		// to 1.5(p−1).
		if want := 3*float64(m) + 1.5*float64(p-1); math.Abs(t2.Makespan-want) > eps {
			t.Errorf("p=%d m=%d: makespan v=2 %g, want %g", p, m, t2.Makespan, want)
		}
	}
}

// TestSimulateSlowStage: with one stage twice as slow, 1F1B's steady state
// runs at that stage's pace, giving a makespan worked out by hand.
func TestSimulateSlowStage(t *testing.T) {
	s, err := Interleaved1F1B(2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	cost := func(stage int, a Action) float64 {
		if stage == 1 {
			return 2
		}
		return 1
	}
	tl, err := Simulate(s, cost)
	if err != nil {
		t.Fatal(err)
	}
	// s0: F0 0-1, F1 1-2; s1: F0 1-3, B0 3-5, F1 5-7, B1 7-9, F2 9-11,
	// B2 11-13, F3 13-15, B3 15-17; s0's last backward B3 runs 17-18.
	if tl.Makespan != 18 {
		t.Errorf("makespan %g, want 18", tl.Makespan)
	}
	if tl.Busy[0] != 8 || tl.Busy[1] != 16 {
		t.Errorf("busy %v, want [8 16]", tl.Busy)
	}
	if tl.Idle[0] != 10 || tl.Idle[1] != 2 {
		t.Errorf("idle %v, want [10 2]", tl.Idle)
	}
}

func TestSimulateDeadlock(t *testing.T) {
	tests := []struct {
		name    string
		p, v, m int
		lists   []string
		want    []string
	}{
		{
			name: "backward before forward", p: 2, v: 1, m: 1,
			lists: []string{"B0.c0 F0.c0", "F0.c0 B0.c0"},
			want: []string{
				"stage 0 at B0.c0 waits for B0.c0 on stage 1",
				"stage 1 at F0.c0 waits for F0.c0 on stage 0",
			},
		},
		{
			name: "stages disagree on microbatch order", p: 2, v: 1, m: 2,
			lists: []string{"F0.c0 B0.c0 F1.c0 B1.c0", "F1.c0 B1.c0 F0.c0 B0.c0"},
			want: []string{
				"stage 0 at B0.c0 waits for B0.c0 on stage 1",
				"stage 1 at F1.c0 waits for F1.c0 on stage 0",
			},
		},
		{
			// Stage 0 wants chunk 1's backward before running chunk 1's
			// forward, which stage 1 needs first.
			name: "chunk order", p: 2, v: 2, m: 1,
			lists: []string{"F0.c0 B0.c1 F0.c1 B0.c0", "F0.c0 F0.c1 B0.c1 B0.c0"},
			want: []string{
				"stage 0 at B0.c1 waits for B0.c1 on stage 1",
				"stage 1 at F0.c1 waits for F0.c1 on stage 0",
			},
		},
		{
			name: "missing action", p: 2, v: 1, m: 1,
			lists: []string{"B0.c0", "F0.c0 B0.c0"},
			want:  []string{"stage 1 at F0.c0 waits for F0.c0 on stage 0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lists := make([][]Action, len(tt.lists))
			for i, l := range tt.lists {
				lists[i] = parseActions(t, l)
			}
			_, err := simulate(tt.p, tt.v, tt.m, lists, UniformCost(1, 1))
			if !errors.Is(err, ErrDeadlock) {
				t.Fatalf("error %v, want ErrDeadlock", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestSimulateErrors(t *testing.T) {
	s, err := GPipe(2, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    *Schedule
		cost CostFunc
		want string
	}{
		{"nil schedule", nil, UniformCost(1, 1), "no stages"},
		{"zero schedule", &Schedule{}, UniformCost(1, 1), "no stages"},
		{"nil cost", s, nil, "nil cost"},
		{"negative cost", s, UniformCost(1, -1), "cost of B1.c0 on stage 1 is -1"},
		{"NaN cost", s, UniformCost(math.NaN(), 1), "cost of F0.c0 on stage 0 is NaN"},
		{"infinite cost", s, UniformCost(1, math.Inf(1)), "is +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Simulate(tt.s, tt.cost)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}

	bad := []struct {
		name  string
		lists []string
		want  string
	}{
		{"duplicate", []string{"F0.c0 F0.c0 B0.c0", "F0.c0 B0.c0"}, "runs F0.c0 twice"},
		{"chunk out of range", []string{"F0.c1", "F0.c0 B0.c0"}, "F0.c1 out of range"},
		{"microbatch out of range", []string{"F0.c0 B0.c0", "F3.c0"}, "F3.c0 out of range"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			lists := make([][]Action, len(tt.lists))
			for i, l := range tt.lists {
				lists[i] = parseActions(t, l)
			}
			_, err := simulate(2, 1, 1, lists, UniformCost(1, 1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBubbleFractionEmpty(t *testing.T) {
	if got := (Timeline{}).BubbleFraction(); got != 0 {
		t.Errorf("empty timeline bubble %g, want 0", got)
	}
	s, err := Interleaved1F1B(3, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := Simulate(s, UniformCost(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if tl.Makespan != 0 || tl.BubbleFraction() != 0 {
		t.Errorf("zero-cost timeline: makespan %g bubble %g, want 0 and 0", tl.Makespan, tl.BubbleFraction())
	}
}
