package schedule

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// parseActions turns "F0.c0 B3.c1 …" into actions, independently of
// Action.String, so expected orders can be written out literally.
func parseActions(t *testing.T, s string) []Action {
	t.Helper()
	var out []Action
	for _, f := range strings.Fields(s) {
		var k rune
		var a Action
		if n, err := fmt.Sscanf(f, "%c%d.c%d", &k, &a.Microbatch, &a.Chunk); n != 3 || err != nil {
			t.Fatalf("bad action literal %q: %v", f, err)
		}
		switch k {
		case 'F':
			a.Kind = Forward
		case 'B':
			a.Kind = Backward
		default:
			t.Fatalf("bad action kind in %q", f)
		}
		out = append(out, a)
	}
	return out
}

type constructor struct {
	name string
	new  func(p, v, m int) (*Schedule, error)
}

var constructors = []constructor{
	{"GPipe", GPipe},
	{"Interleaved1F1B", Interleaved1F1B},
}

// TestExpectedOrders checks whole per-stage orders derived by hand from
// GPipe's definition and from Megatron-LM's schedules.py (warm-up count,
// get_model_chunk_id, get_microbatch_id_in_model_chunk). The " | " marks
// separate warm-up, steady 1F1B and cool-down and are only for the reader.
func TestExpectedOrders(t *testing.T) {
	tests := []struct {
		name    string
		new     func(p, v, m int) (*Schedule, error)
		p, v, m int
		want    []string // per stage
	}{
		{
			name: "gpipe p=2 v=1 m=4", new: GPipe, p: 2, v: 1, m: 4,
			want: []string{
				"F0.c0 F1.c0 F2.c0 F3.c0 | B3.c0 B2.c0 B1.c0 B0.c0",
				"F0.c0 F1.c0 F2.c0 F3.c0 | B3.c0 B2.c0 B1.c0 B0.c0",
			},
		},
		{
			name: "gpipe p=2 v=2 m=3", new: GPipe, p: 2, v: 2, m: 3,
			want: []string{
				"F0.c0 F1.c0 F2.c0 F0.c1 F1.c1 F2.c1 | B2.c1 B1.c1 B0.c1 B2.c0 B1.c0 B0.c0",
				"F0.c0 F1.c0 F2.c0 F0.c1 F1.c1 F2.c1 | B2.c1 B1.c1 B0.c1 B2.c0 B1.c0 B0.c0",
			},
		},
		{
			name: "1f1b p=4 v=1 m=8", new: Interleaved1F1B, p: 4, v: 1, m: 8,
			want: []string{
				"F0.c0 F1.c0 F2.c0 | F3.c0 B0.c0 F4.c0 B1.c0 F5.c0 B2.c0 F6.c0 B3.c0 F7.c0 B4.c0 | B5.c0 B6.c0 B7.c0",
				"F0.c0 F1.c0 | F2.c0 B0.c0 F3.c0 B1.c0 F4.c0 B2.c0 F5.c0 B3.c0 F6.c0 B4.c0 F7.c0 B5.c0 | B6.c0 B7.c0",
				"F0.c0 | F1.c0 B0.c0 F2.c0 B1.c0 F3.c0 B2.c0 F4.c0 B3.c0 F5.c0 B4.c0 F6.c0 B5.c0 F7.c0 B6.c0 | B7.c0",
				"F0.c0 B0.c0 F1.c0 B1.c0 F2.c0 B2.c0 F3.c0 B3.c0 F4.c0 B4.c0 F5.c0 B5.c0 F6.c0 B6.c0 F7.c0 B7.c0",
			},
		},
		{
			// Fewer microbatches than stages: warm-up is capped at m.
			name: "1f1b p=4 v=1 m=2", new: Interleaved1F1B, p: 4, v: 1, m: 2,
			want: []string{
				"F0.c0 F1.c0 | B0.c0 B1.c0",
				"F0.c0 F1.c0 | B0.c0 B1.c0",
				"F0.c0 | F1.c0 B0.c0 | B1.c0",
				"F0.c0 B0.c0 F1.c0 B1.c0",
			},
		},
		{
			// Warm-up: stage 0 min(2·1 + 1·2, 8) = 4, stage 1 min(0 + 2, 8) = 2.
			name: "interleaved p=2 v=2 m=4", new: Interleaved1F1B, p: 2, v: 2, m: 4,
			want: []string{
				"F0.c0 F1.c0 F0.c1 F1.c1 | F2.c0 B0.c1 F3.c0 B1.c1 F2.c1 B0.c0 F3.c1 B1.c0 | B2.c1 B3.c1 B2.c0 B3.c0",
				"F0.c0 F1.c0 | F0.c1 B0.c1 F1.c1 B1.c1 F2.c0 B0.c0 F3.c0 B1.c0 F2.c1 B2.c1 F3.c1 B3.c1 | B2.c0 B3.c0",
			},
		},
		{
			// m == p: Megatron runs every forward first on every stage.
			name: "interleaved p=2 v=2 m=2", new: Interleaved1F1B, p: 2, v: 2, m: 2,
			want: []string{
				"F0.c0 F1.c0 F0.c1 F1.c1 | B0.c1 B1.c1 B0.c0 B1.c0",
				"F0.c0 F1.c0 F0.c1 F1.c1 | B0.c1 B1.c1 B0.c0 B1.c0",
			},
		},
		{
			// Warm-up: stage 0 2·3 + 1·4 = 10, stage 3 0 + 4 = 4 (of 16).
			name: "interleaved p=4 v=2 m=8", new: Interleaved1F1B, p: 4, v: 2, m: 8,
			want: []string{
				"F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 F1.c1 F2.c1 F3.c1 F4.c0 F5.c0 | " +
					"F6.c0 B0.c1 F7.c0 B1.c1 F4.c1 B2.c1 F5.c1 B3.c1 F6.c1 B0.c0 F7.c1 B1.c0 | " +
					"B2.c0 B3.c0 B4.c1 B5.c1 B6.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0",
				"", "", // stages 1 and 2 are covered by the property tests
				"F0.c0 F1.c0 F2.c0 F3.c0 | " +
					"F0.c1 B0.c1 F1.c1 B1.c1 F2.c1 B2.c1 F3.c1 B3.c1 F4.c0 B0.c0 F5.c0 B1.c0 F6.c0 B2.c0 F7.c0 B3.c0 " +
					"F4.c1 B4.c1 F5.c1 B5.c1 F6.c1 B6.c1 F7.c1 B7.c1 | " +
					"B4.c0 B5.c0 B6.c0 B7.c0",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.new(tt.p, tt.v, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			for stage, w := range tt.want {
				if w == "" {
					continue
				}
				want := parseActions(t, strings.ReplaceAll(w, "|", ""))
				if got := s.Actions(stage); !slices.Equal(got, want) {
					t.Errorf("stage %d:\n got  %v\n want %v", stage, got, want)
				}
			}
		})
	}
}

func TestWarmup(t *testing.T) {
	tests := []struct {
		name    string
		new     func(p, v, m int) (*Schedule, error)
		p, v, m int
		want    []int
	}{
		{"1f1b", Interleaved1F1B, 4, 1, 8, []int{3, 2, 1, 0}},
		{"1f1b m<p", Interleaved1F1B, 4, 1, 2, []int{2, 2, 1, 0}},
		{"interleaved", Interleaved1F1B, 4, 2, 8, []int{10, 8, 6, 4}},
		{"interleaved v=3", Interleaved1F1B, 3, 3, 6, []int{10, 8, 6}},
		{"interleaved m=p", Interleaved1F1B, 4, 2, 4, []int{8, 8, 8, 8}},
		{"gpipe", GPipe, 3, 2, 5, []int{10, 10, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.new(tt.p, tt.v, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			for stage, want := range tt.want {
				if got := s.Warmup(stage); got != want {
					t.Errorf("Warmup(%d) = %d, want %d", stage, got, want)
				}
				// After the warm-up forwards the steady phase opens with one
				// more forward before its first backward, unless the warm-up
				// took every forward.
				wantFirst := want + 1
				if want == tt.m*tt.v {
					wantFirst = want
				}
				acts := s.Actions(stage)
				if first := slices.IndexFunc(acts, func(a Action) bool { return a.Kind == Backward }); first != wantFirst {
					t.Errorf("stage %d: first backward at %d, want %d", stage, first, wantFirst)
				}
			}
		})
	}
}

// sizes are the (p, v, m) the property tests run over; interleaving needs
// m to be a multiple of p when v > 1, and GPipe takes the rest as well.
func sizes() [][3]int {
	var out [][3]int
	for p := 1; p <= 6; p++ {
		for v := 1; v <= 4; v++ {
			for m := 1; m <= 3*p+1; m++ {
				out = append(out, [3]int{p, v, m})
			}
		}
	}
	out = append(out, [3]int{8, 2, 32}, [3]int{16, 1, 64}, [3]int{8, 6, 24})
	return out
}

// TestEveryActionOnce checks, for many sizes, that each stage runs every
// (microbatch, chunk) forward and backward exactly once, the forward first,
// and that the cross-stage order can be executed without deadlock.
func TestEveryActionOnce(t *testing.T) {
	for _, c := range constructors {
		for _, sz := range sizes() {
			p, v, m := sz[0], sz[1], sz[2]
			if c.name == "Interleaved1F1B" && v > 1 && m%p != 0 {
				continue
			}
			name := fmt.Sprintf("%s p=%d v=%d m=%d", c.name, p, v, m)
			s, err := c.new(p, v, m)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if s.Stages() != p || s.Chunks() != v || s.Microbatches() != m {
				t.Fatalf("%s: sizes (%d, %d, %d)", name, s.Stages(), s.Chunks(), s.Microbatches())
			}
			for stage := range p {
				acts := s.Actions(stage)
				if len(acts) != 2*m*v {
					t.Fatalf("%s stage %d: %d actions, want %d", name, stage, len(acts), 2*m*v)
				}
				pos := map[Action]int{}
				for i, a := range acts {
					if a.Microbatch < 0 || a.Microbatch >= m || a.Chunk < 0 || a.Chunk >= v {
						t.Fatalf("%s stage %d: %v out of range", name, stage, a)
					}
					if j, dup := pos[a]; dup {
						t.Fatalf("%s stage %d: %v at %d and %d", name, stage, a, j, i)
					}
					pos[a] = i
				}
				for mb := range m {
					for ch := range v {
						f, okF := pos[Action{Forward, mb, ch}]
						b, okB := pos[Action{Backward, mb, ch}]
						if !okF || !okB {
							t.Fatalf("%s stage %d: microbatch %d chunk %d missing", name, stage, mb, ch)
						}
						if f > b {
							t.Fatalf("%s stage %d: B%d.c%d at %d before its forward at %d", name, stage, mb, ch, b, f)
						}
					}
				}
			}
			if _, err := Simulate(s, UniformCost(1, 2)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}

// TestInFlightActivations checks the memory property 1F1B exists for: on
// stage s at most min(p−s, m) microbatches have run forward and not yet
// backward, where GPipe holds all m.
func TestInFlightActivations(t *testing.T) {
	for _, sz := range [][2]int{{4, 8}, {4, 2}, {8, 16}, {3, 3}} {
		p, m := sz[0], sz[1]
		oneF, err := Interleaved1F1B(p, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		gp, err := GPipe(p, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		for stage := range p {
			if got, want := peakInFlight(oneF.Actions(stage)), min(p-stage, m); got != want {
				t.Errorf("1F1B p=%d m=%d stage %d: peak in flight %d, want %d", p, m, stage, got, want)
			}
			if got := peakInFlight(gp.Actions(stage)); got != m {
				t.Errorf("GPipe p=%d m=%d stage %d: peak in flight %d, want %d", p, m, stage, got, m)
			}
		}
	}
}

func peakInFlight(acts []Action) int {
	n, peak := 0, 0
	for _, a := range acts {
		if a.Kind == Forward {
			n++
			peak = max(peak, n)
		} else {
			n--
		}
	}
	return peak
}

func TestNames(t *testing.T) {
	tests := []struct {
		new     func(p, v, m int) (*Schedule, error)
		p, v, m int
		want    string
	}{
		{GPipe, 2, 1, 4, "gpipe"},
		{GPipe, 2, 2, 4, "gpipe"},
		{Interleaved1F1B, 2, 1, 3, "1f1b"},
		{Interleaved1F1B, 2, 2, 4, "interleaved-1f1b"},
	}
	for _, tt := range tests {
		s, err := tt.new(tt.p, tt.v, tt.m)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Name(); got != tt.want {
			t.Errorf("Name() = %q, want %q", got, tt.want)
		}
	}
	if got := new(Schedule).Name(); got != "" {
		t.Errorf("zero Schedule Name() = %q, want empty", got)
	}
}

func TestVirtualStages(t *testing.T) {
	s, err := Interleaved1F1B(4, 3, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Megatron's interleaved assignment: chunk c of stage s is c·p + s.
	tests := []struct{ stage, chunk, vs int }{
		{0, 0, 0}, {3, 0, 3}, {0, 1, 4}, {1, 1, 5}, {3, 1, 7}, {0, 2, 8}, {3, 2, 11},
	}
	for _, tt := range tests {
		if got := s.VirtualStage(tt.stage, tt.chunk); got != tt.vs {
			t.Errorf("VirtualStage(%d, %d) = %d, want %d", tt.stage, tt.chunk, got, tt.vs)
		}
		if st, ch := s.StageOf(tt.vs); st != tt.stage || ch != tt.chunk {
			t.Errorf("StageOf(%d) = (%d, %d), want (%d, %d)", tt.vs, st, ch, tt.stage, tt.chunk)
		}
	}
	for _, bad := range [][2]int{{-1, 0}, {4, 0}, {0, -1}, {0, 3}} {
		if got := s.VirtualStage(bad[0], bad[1]); got != -1 {
			t.Errorf("VirtualStage(%d, %d) = %d, want -1", bad[0], bad[1], got)
		}
	}
	for _, bad := range []int{-1, 12} {
		if st, ch := s.StageOf(bad); st != -1 || ch != -1 {
			t.Errorf("StageOf(%d) = (%d, %d), want (-1, -1)", bad, st, ch)
		}
	}
	if got := s.Actions(4); got != nil {
		t.Errorf("Actions(4) = %v, want nil", got)
	}
	if got := s.Actions(-1); got != nil {
		t.Errorf("Actions(-1) = %v, want nil", got)
	}
	if got := s.Warmup(4); got != 0 {
		t.Errorf("Warmup(4) = %d, want 0", got)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{Forward.String(), "forward"},
		{Backward.String(), "backward"},
		{Kind(7).String(), "Kind(7)"},
		{Action{Forward, 3, 1}.String(), "F3.c1"},
		{Action{Backward, 0, 0}.String(), "B0.c0"},
		{Action{Backward, 12, 5}.String(), "B12.c5"},
		{Action{Kind(9), 1, 2}.String(), "Kind(9):1.c2"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		new     func(p, v, m int) (*Schedule, error)
		p, v, m int
		want    []string // substrings of the message
	}{
		{"gpipe p=0", GPipe, 0, 1, 4, []string{"stage", "p=0"}},
		{"gpipe v=0", GPipe, 2, 0, 4, []string{"chunk", "v=0"}},
		{"gpipe m=0", GPipe, 2, 1, 0, []string{"microbatch", "m=0"}},
		{"gpipe m<0", GPipe, 2, 1, -3, []string{"microbatch", "m=-3"}},
		{"1f1b p<0", Interleaved1F1B, -1, 1, 4, []string{"stage", "p=-1"}},
		{"1f1b v=0", Interleaved1F1B, 2, 0, 4, []string{"chunk", "v=0"}},
		{"1f1b m=0", Interleaved1F1B, 2, 1, 0, []string{"microbatch", "m=0"}},
		{"interleaved m%p", Interleaved1F1B, 4, 2, 6, []string{"multiple", "m=6", "p=4", "v=2"}},
		{"interleaved m<p", Interleaved1F1B, 4, 2, 2, []string{"multiple", "m=2", "p=4"}},
		{"too large", GPipe, 1 << 20, 1 << 20, 1 << 30, []string{"too large"}},
		{"too large v", Interleaved1F1B, 2, math.MaxInt, 2, []string{"too large"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.new(tt.p, tt.v, tt.m)
			if err == nil {
				t.Fatalf("got schedule %+v, want error", s)
			}
			if s != nil {
				t.Errorf("got schedule %+v with error", s)
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("error %q does not wrap ErrInvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// v = 1 is plain 1F1B, which takes any m.
	if _, err := Interleaved1F1B(4, 1, 6); err != nil {
		t.Errorf("Interleaved1F1B(4, 1, 6): %v", err)
	}
}

func TestIdealBubbleFraction(t *testing.T) {
	tests := []struct {
		p, v, m int
		want    float64
	}{
		{1, 1, 1, 0},
		{2, 1, 4, 1.0 / 5},
		{4, 1, 8, 3.0 / 11},
		{4, 2, 8, 3.0 / 19},
		{8, 4, 16, 7.0 / 71},
	}
	for _, tt := range tests {
		if got := IdealBubbleFraction(tt.p, tt.v, tt.m); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("IdealBubbleFraction(%d, %d, %d) = %v, want %v", tt.p, tt.v, tt.m, got, tt.want)
		}
	}
	for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}} {
		if got := IdealBubbleFraction(bad[0], bad[1], bad[2]); !math.IsNaN(got) {
			t.Errorf("IdealBubbleFraction%v = %v, want NaN", bad, got)
		}
	}
}
