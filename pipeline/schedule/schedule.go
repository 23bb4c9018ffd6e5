package schedule

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrInvalidArgument is wrapped by every error a constructor returns for a
// bad stage, chunk or microbatch count.
var ErrInvalidArgument = errors.New("invalid argument")

// Kind says whether an action runs the forward or the backward pass.
type Kind uint8

const (
	Forward  Kind = iota // the forward pass: activations flow to the next virtual stage
	Backward             // the backward pass: gradients flow to the previous virtual stage
)

// String returns "forward" or "backward"; other values say they are unknown.
func (k Kind) String() string {
	switch k {
	case Forward:
		return "forward"
	case Backward:
		return "backward"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Action is one unit of work a stage executes: the forward or backward pass
// of one microbatch through one of the stage's model chunks. Chunk is the
// local chunk index on the stage, 0..Chunks()-1.
type Action struct {
	Kind       Kind
	Microbatch int
	Chunk      int
}

// String formats the action compactly, e.g. "F3.c1" for the forward pass of
// microbatch 3 through chunk 1, "B0.c0" for a backward pass.
func (a Action) String() string {
	var k string
	switch a.Kind {
	case Forward:
		k = "F"
	case Backward:
		k = "B"
	default:
		k = a.Kind.String() + ":"
	}
	return k + strconv.Itoa(a.Microbatch) + ".c" + strconv.Itoa(a.Chunk)
}

type policy uint8

const (
	policyNone policy = iota
	policyGPipe
	policyInterleaved
)

// Schedule is the order in which each pipeline stage runs the forward and
// backward passes of one training step. It is immutable; build one with
// GPipe or Interleaved1F1B. The zero Schedule has no stages.
type Schedule struct {
	policy policy
	p      int // pipeline stages (ranks)
	v      int // model chunks per stage
	m      int // microbatches per step
}

// GPipe returns the GPipe schedule for p stages, v chunks per stage and m
// microbatches: every stage runs all its forward passes, then all its
// backward passes.
//
// Forwards go chunk by chunk, each chunk pass taking the microbatches in
// order (F0.c0 … F(m−1).c0, F0.c1 …), so a stage never waits on a chunk pass
// that comes later in its own list; backwards are the exact reverse of the
// forwards, starting with the last microbatch of the last chunk, which is
// the first whose gradient exists.
func GPipe(p, v, m int) (*Schedule, error) {
	if err := checkSizes("GPipe", p, v, m); err != nil {
		return nil, err
	}
	return &Schedule{policy: policyGPipe, p: p, v: v, m: m}, nil
}

// Interleaved1F1B returns Megatron-LM's one-forward-one-backward schedule
// with v model chunks (virtual pipeline stages) per stage, the order of
// megatron/core/pipeline_parallel/schedules.py.
//
// With v = 1 it is the classic non-interleaved 1F1B (PipeDream-Flush,
// Megatron's forward_backward_pipelining_without_interleaving): stage s runs
// min(p−s−1, m) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards.
//
// With v > 1 it is forward_backward_pipelining_with_interleaving, which
// requires m to be a multiple of p. Stage s runs
// min(2(p−s−1) + (v−1)p, m·v) warm-up forwards (all m·v of them when m = p),
// then alternates, then drains. Its k-th forward runs chunk (k mod pv)/p,
// its k-th backward chunk v−1−(k mod pv)/p, both for microbatch
// (k/pv)·p + k mod p: groups of p consecutive microbatches sweep through the
// chunks in turn.
func Interleaved1F1B(p, v, m int) (*Schedule, error) {
	if err := checkSizes("interleaved 1F1B", p, v, m); err != nil {
		return nil, err
	}
	if v > 1 && m%p != 0 {
		return nil, fmt.Errorf("schedule: %w: interleaved 1F1B with v=%d chunks per stage needs the microbatch count m=%d to be a multiple of the stage count p=%d",
			ErrInvalidArgument, v, m, p)
	}
	return &Schedule{policy: policyInterleaved, p: p, v: v, m: m}, nil
}

// MaxActions is the most actions (2·p·v·m: a forward and a backward per
// microbatch, chunk and stage) a schedule may have in one step; GPipe and
// Interleaved1F1B refuse more with an error wrapping ErrInvalidArgument.
// It keeps every list Actions builds, and Simulate's tables, within what a
// host can allocate: Actions returns 24 bytes per action of a stage, and
// Simulate holds about 80 bytes per action of the step (the lists, the
// spans and its table of end times), some 21 GB at the bound. It allows,
// for instance, p = 512 stages × v = 16 chunks × m = 16384 microbatches.
const MaxActions = 1 << 28

func checkSizes(name string, p, v, m int) error {
	if p < 1 {
		return fmt.Errorf("schedule: %w: %s needs at least one pipeline stage, got p=%d", ErrInvalidArgument, name, p)
	}
	if v < 1 {
		return fmt.Errorf("schedule: %w: %s needs at least one model chunk per stage, got v=%d", ErrInvalidArgument, name, v)
	}
	if m < 1 {
		return fmt.Errorf("schedule: %w: %s needs at least one microbatch, got m=%d", ErrInvalidArgument, name, m)
	}
	// Counted in float64: p·v·m may overflow int.
	if n := 2 * float64(p) * float64(v) * float64(m); n > MaxActions {
		return fmt.Errorf("schedule: %w: %s with p=%d stages, v=%d chunks and m=%d microbatches is too large: 2·p·v·m = %.4g actions a step, more than MaxActions = %d",
			ErrInvalidArgument, name, p, v, m, n, MaxActions)
	}
	return nil
}

// Name returns "gpipe", "1f1b" (Interleaved1F1B with one chunk) or
// "interleaved-1f1b"; the zero Schedule has the empty name.
func (s *Schedule) Name() string {
	switch s.policy {
	case policyGPipe:
		return "gpipe"
	case policyInterleaved:
		if s.v == 1 {
			return "1f1b"
		}
		return "interleaved-1f1b"
	}
	return ""
}

// Stages returns p, the number of pipeline stages (ranks).
func (s *Schedule) Stages() int { return s.p }

// Chunks returns v, the number of model chunks (virtual stages) per stage.
func (s *Schedule) Chunks() int { return s.v }

// Microbatches returns m, the number of microbatches per step.
func (s *Schedule) Microbatches() int { return s.m }

// VirtualStage returns the position in the model of chunk on stage, c·p + s
// (Megatron's interleaved assignment), or −1 if either is out of range.
func (s *Schedule) VirtualStage(stage, chunk int) int {
	if stage < 0 || stage >= s.p || chunk < 0 || chunk >= s.v {
		return -1
	}
	return chunk*s.p + stage
}

// StageOf is the inverse of VirtualStage: the stage and local chunk that
// hold virtualStage, or (−1, −1) if it is out of range.
func (s *Schedule) StageOf(virtualStage int) (stage, chunk int) {
	if virtualStage < 0 || virtualStage >= s.p*s.v {
		return -1, -1
	}
	return virtualStage % s.p, virtualStage / s.p
}

// Actions returns the exact order in which stage executes its actions in one
// step: m·v forwards and m·v backwards. The slice is freshly built and the
// caller's to keep. A stage out of range gives nil. The constructors bound
// its length (MaxActions), so building it cannot panic.
func (s *Schedule) Actions(stage int) []Action {
	if stage < 0 || stage >= s.p {
		return nil
	}
	switch s.policy {
	case policyGPipe:
		return s.gpipe()
	case policyInterleaved:
		if s.v == 1 {
			return s.oneFOneB(stage)
		}
		return s.interleaved(stage)
	}
	return nil
}

// Warmup returns the number of warm-up forwards stage runs before its steady
// one-forward-one-backward phase, which itself opens with a forward; it is
// every forward (m·v) for GPipe. A stage out of range gives 0.
func (s *Schedule) Warmup(stage int) int {
	if stage < 0 || stage >= s.p {
		return 0
	}
	switch s.policy {
	case policyGPipe:
		return s.m * s.v
	case policyInterleaved:
		return s.warmup(stage)
	}
	return 0
}

func (s *Schedule) gpipe() []Action {
	n := s.m * s.v
	out := make([]Action, 0, 2*n)
	for c := range s.v {
		for mb := range s.m {
			out = append(out, Action{Kind: Forward, Microbatch: mb, Chunk: c})
		}
	}
	for i := n - 1; i >= 0; i-- {
		a := out[i]
		a.Kind = Backward
		out = append(out, a)
	}
	return out
}

func (s *Schedule) warmup(stage int) int {
	total := s.m * s.v
	if s.v == 1 {
		return min(s.p-stage-1, s.m)
	}
	// Megatron: when there are exactly as many microbatches as stages, the
	// steady phase would be empty on some stages and starve others, so every
	// stage runs all forwards first.
	if s.m == s.p {
		return total
	}
	return min(2*(s.p-stage-1)+(s.v-1)*s.p, total)
}

// oneFOneB is PipeDream-Flush; Megatron's non-interleaved schedule.
func (s *Schedule) oneFOneB(stage int) []Action {
	w := s.warmup(stage)
	out := make([]Action, 0, 2*s.m)
	for i := range w {
		out = append(out, Action{Kind: Forward, Microbatch: i})
	}
	for i := range s.m - w {
		out = append(out,
			Action{Kind: Forward, Microbatch: w + i},
			Action{Kind: Backward, Microbatch: i})
	}
	for i := s.m - w; i < s.m; i++ {
		out = append(out, Action{Kind: Backward, Microbatch: i})
	}
	return out
}

func (s *Schedule) interleaved(stage int) []Action {
	total := s.m * s.v
	w := s.warmup(stage)
	out := make([]Action, 0, 2*total)
	for k := range w {
		out = append(out, s.interleavedAction(Forward, k))
	}
	for k := range total - w {
		out = append(out,
			s.interleavedAction(Forward, w+k),
			s.interleavedAction(Backward, k))
	}
	for k := total - w; k < total; k++ {
		out = append(out, s.interleavedAction(Backward, k))
	}
	return out
}

// interleavedAction is the k-th forward or backward of a stage in Megatron's
// interleaved schedule (get_model_chunk_id and
// get_microbatch_id_in_model_chunk). Backwards of a chunk pop its saved
// activations first-in first-out, so the k-th backward belongs to the same
// microbatch as the k-th forward.
func (s *Schedule) interleavedAction(kind Kind, k int) Action {
	group := s.p * s.v
	chunk := (k % group) / s.p
	if kind == Backward {
		chunk = s.v - 1 - chunk
	}
	return Action{Kind: kind, Microbatch: (k/group)*s.p + k%s.p, Chunk: chunk}
}

// IdealBubbleFraction is the share of a step a stage spends idle when
// communication is free and every chunk's forward (and every chunk's
// backward) costs the same: (p−1)/(v·m + p−1). Interleaved1F1B reaches it,
// and so does GPipe with the same p, v and m when v = 1 or m ≥ p; 1F1B's
// gain over GPipe is memory (at most p−s microbatches in flight on stage s
// instead of m), not time. GPipe with v > 1 and m < p waits for the
// pipeline to fill again on every chunk pass, and its makespan is
// (f+b)((v−1)·max(m, p) + m + p−1) for forwards costing f and backwards b.
// It returns NaN if any argument is below 1.
func IdealBubbleFraction(p, v, m int) float64 {
	if p < 1 || v < 1 || m < 1 {
		return math.NaN()
	}
	return float64(p-1) / (float64(v)*float64(m) + float64(p-1))
}

// BubbleFraction is the share of a step a stage of this schedule spends
// idle when communication is free and every chunk's forward (and every
// chunk's backward) costs the same: IdealBubbleFraction(p, v, m), except
// for GPipe with v > 1 and m < p, which fills the pipeline again on every
// chunk pass: 1 − v·m/((v−1)·max(m, p) + m + p−1). It is what Simulate
// finds for the schedule with uniform costs, without simulating it; NaN
// for the zero Schedule.
func (s *Schedule) BubbleFraction() float64 {
	switch {
	case s == nil || s.policy == policyNone:
		return math.NaN()
	case s.policy == policyGPipe && s.v > 1 && s.m < s.p:
		vm := float64(s.v) * float64(s.m)
		return 1 - vm/(float64(s.v-1)*float64(s.p)+float64(s.m)+float64(s.p-1))
	}
	return IdealBubbleFraction(s.p, s.v, s.m)
}
