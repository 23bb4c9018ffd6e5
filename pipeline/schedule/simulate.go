package schedule

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrDeadlock is wrapped by the error Simulate returns when no stage can run
// its next action.
var ErrDeadlock = errors.New("pipeline schedule deadlocks")

// CostFunc gives the duration of action a on stage. Durations are in any
// unit, the same for all actions; they must be finite and not negative.
type CostFunc func(stage int, a Action) float64

// UniformCost returns a CostFunc in which every forward takes forward and
// every backward takes backward, on every stage and chunk.
func UniformCost(forward, backward float64) CostFunc {
	return func(_ int, a Action) float64 {
		if a.Kind == Backward {
			return backward
		}
		return forward
	}
}

// Span is one executed action: where and when it ran.
type Span struct {
	Stage  int
	Action Action
	Start  float64
	End    float64
}

// Timeline is the outcome of simulating one step of a schedule.
type Timeline struct {
	// Spans holds, per stage, the stage's actions in execution order.
	Spans [][]Span
	// Busy and Idle are, per stage, the time spent running actions and the
	// rest of the makespan (waiting at the start, between actions and after
	// the stage's last action).
	Busy []float64
	Idle []float64
	// Makespan is when the last action of any stage ends; the step starts at 0.
	Makespan float64
}

// BubbleFraction returns the pipeline bubble: the share of all stages' time
// over the makespan that is idle, Σ Idle / (stages · Makespan). It is 0 for
// an empty or zero-length timeline.
func (t Timeline) BubbleFraction() float64 {
	if len(t.Idle) == 0 || t.Makespan <= 0 {
		return 0
	}
	var idle float64
	for _, x := range t.Idle {
		idle += x
	}
	return idle / (float64(len(t.Idle)) * t.Makespan)
}

// Simulate executes one step of s with free communication: each stage runs
// its Actions in order, one at a time, each as soon as the stage is free and
// the action's input exists. The forward of virtual stage k for a
// microbatch needs the forward of virtual stage k−1 for it; the backward of
// virtual stage k needs the backward of k+1, and the last virtual stage's
// backward needs its own forward. If the lists cannot all complete, the
// error wraps ErrDeadlock and names each blocked action and what it waits
// for.
func Simulate(s *Schedule, cost CostFunc) (Timeline, error) {
	if s == nil || s.p < 1 {
		return Timeline{}, errors.New("schedule: simulate: schedule has no stages (use GPipe or Interleaved1F1B)")
	}
	if cost == nil {
		return Timeline{}, errors.New("schedule: simulate: nil cost function")
	}
	lists := make([][]Action, s.p)
	for st := range lists {
		lists[st] = s.Actions(st)
	}
	return simulate(s.p, s.v, s.m, lists, cost)
}

// simulate runs arbitrary per-stage action lists; tests use it to feed
// orders that no constructor produces.
func simulate(p, v, m int, lists [][]Action, cost CostFunc) (Timeline, error) {
	nv := p * v
	// done[kind][virtualStage*m+microbatch] is the end time of that action,
	// or NaN while it has not run.
	var done [2][]float64
	for k := range done {
		done[k] = make([]float64, nv*m)
		for i := range done[k] {
			done[k][i] = math.NaN()
		}
	}
	t := Timeline{
		Spans: make([][]Span, p),
		Busy:  make([]float64, p),
		Idle:  make([]float64, p),
	}
	for st, list := range lists {
		for _, a := range list {
			if a.Kind > Backward || a.Chunk < 0 || a.Chunk >= v || a.Microbatch < 0 || a.Microbatch >= m {
				return Timeline{}, fmt.Errorf("schedule: simulate: stage %d: action %v out of range (v=%d, m=%d)", st, a, v, m)
			}
		}
		t.Spans[st] = make([]Span, 0, len(list))
	}

	free := make([]float64, p) // when each stage finishes its last action
	next := make([]int, p)     // index of each stage's next action
	// Stages to (re)visit: each runs its list until its next action's input
	// is missing, and is visited again only when an action that may be that
	// input runs. Sweeping all stages until a sweep runs nothing instead
	// costs a sweep per hop of the backward wave, p·(v·m + p) visits, which
	// is quadratic in p. Visiting order does not change the result: each
	// action's start depends only on its stage's previous action and on its
	// input, whose end times are fixed once they have run.
	work := make([]int, 0, p)
	queued := make([]bool, p)
	for st := p - 1; st >= 0; st-- { // popped from the end: stage 0 first
		work = append(work, st)
		queued[st] = true
	}
	wake := func(vs int) {
		if st := vs % p; !queued[st] {
			queued[st] = true
			work = append(work, st)
		}
	}
	for len(work) > 0 {
		st := work[len(work)-1]
		work = work[:len(work)-1]
		queued[st] = false
		list := lists[st]
		for next[st] < len(list) {
			a := list[next[st]]
			vs := a.Chunk*p + st
			dep, ok := dependency(a, vs, nv)
			ready := 0.0
			if ok {
				ready = done[dep.Kind][dep.vs*m+a.Microbatch]
				if math.IsNaN(ready) {
					break
				}
			}
			slot := &done[a.Kind][vs*m+a.Microbatch]
			if !math.IsNaN(*slot) {
				return Timeline{}, fmt.Errorf("schedule: simulate: stage %d runs %v twice", st, a)
			}
			d := cost(st, a)
			if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				return Timeline{}, fmt.Errorf("schedule: simulate: cost of %v on stage %d is %v; want a finite duration >= 0", a, st, d)
			}
			start := max(free[st], ready)
			end := start + d
			*slot = end
			free[st] = end
			t.Busy[st] += d
			t.Spans[st] = append(t.Spans[st], Span{Stage: st, Action: a, Start: start, End: end})
			next[st]++
			// Wake the stage whose action this one feeds (the last virtual
			// stage's own backward is on this stage, which goes on anyway).
			if a.Kind == Forward && vs+1 < nv {
				wake(vs + 1)
			} else if a.Kind == Backward && vs > 0 {
				wake(vs - 1)
			}
		}
	}

	var blocked []string
	for st, list := range lists {
		if next[st] < len(list) {
			a := list[next[st]]
			dep, _ := dependency(a, a.Chunk*p+st, nv)
			ds, dc := dep.vs%p, dep.vs/p
			blocked = append(blocked, fmt.Sprintf("stage %d at %v waits for %v on stage %d",
				st, a, Action{Kind: dep.Kind, Microbatch: a.Microbatch, Chunk: dc}, ds))
		}
	}
	if blocked != nil {
		return Timeline{}, fmt.Errorf("schedule: simulate: %w: %s", ErrDeadlock, strings.Join(blocked, "; "))
	}

	for st := range p {
		t.Makespan = max(t.Makespan, free[st])
	}
	for st := range p {
		t.Idle[st] = t.Makespan - t.Busy[st]
	}
	return t, nil
}

type dep struct {
	Kind Kind
	vs   int
}

// dependency returns the action of the same microbatch that must finish
// before a (at virtual stage vs of nv) may start; ok is false for the first
// virtual stage's forward, which needs nothing.
func dependency(a Action, vs, nv int) (d dep, ok bool) {
	if a.Kind == Forward {
		if vs == 0 {
			return dep{}, false
		}
		return dep{Kind: Forward, vs: vs - 1}, true
	}
	if vs == nv-1 {
		return dep{Kind: Forward, vs: vs}, true
	}
	return dep{Kind: Backward, vs: vs + 1}, true
}
