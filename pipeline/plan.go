package pipeline

import (
	"fmt"

	"github.com/trainscope/trainscope/pipeline/schedule"
)

// A step's point-to-point traffic is planned before it runs (planRounds)
// so that the same order is safe on eager backends (ccl/local) and on
// rendezvous backends (NCCL), and every stage can compute its part of the
// plan alone from the configuration. plan_test.go replays the plans of
// many schedules under both semantics.

// transfer is one point-to-point message of a step: a microbatch's
// activation (forward) or activation gradient (backward) moving between
// neighbouring virtual stages.
type transfer struct {
	grad bool // an activation gradient, flowing backwards
	mb   int
	from int // sending virtual stage
	to   int // receiving virtual stage
}

// slot is one action of a stage with its place in the model and what it
// receives before and sends after running. recv and send are nil where
// there is nothing to move: the first virtual stage reads the data, the
// last computes the loss gradient.
type slot struct {
	schedule.Action
	virtual    int
	recv, send *transfer
}

// planStage returns stage's actions in order with their transfers.
func planStage(s *schedule.Schedule, stage int) []slot {
	last := s.Stages()*s.Chunks() - 1
	acts := s.Actions(stage)
	out := make([]slot, len(acts))
	for i, a := range acts {
		k := s.VirtualStage(stage, a.Chunk)
		sl := slot{Action: a, virtual: k}
		if a.Kind == schedule.Forward {
			if k > 0 {
				sl.recv = &transfer{mb: a.Microbatch, from: k - 1, to: k}
			}
			if k < last {
				sl.send = &transfer{mb: a.Microbatch, from: k, to: k + 1}
			}
		} else {
			if k < last {
				sl.recv = &transfer{grad: true, mb: a.Microbatch, from: k + 1, to: k}
			}
			if k > 0 {
				sl.send = &transfer{grad: true, mb: a.Microbatch, from: k, to: k - 1}
			}
		}
		out[i] = sl
	}
	return out
}

// stageOf is the stage that holds virtual stage k with p stages.
func stageOf(k, p int) int { return k % p }

// p2pOp is one operation of a batch, as the rank issues it.
type p2pOp struct {
	send bool
	peer int // the other side's stage
	transfer
}

// round is what a stage does in one round of the step: at most one
// action, then one batch of point-to-point operations (sends first).
type round struct {
	action *slot // nil when the stage waits this round
	batch  []p2pOp
}

// planRounds lays the schedule's actions out in lockstep rounds, the way
// Megatron-LM's interleaved schedule communicates: in each round every
// stage runs its next action if that action's input has arrived in an
// earlier round, then joins one batch that sends what the action produced
// and receives everything its neighbours send in the same round, into
// buffers kept per chunk and microbatch until the action that needs them
// runs. It returns the rounds of every stage (all of one length).
//
// Every send of round r is received in round r, so the batches of round r
// on all stages pair up exactly:
//
//   - with rendezvous sends (NCCL) the operations of a batch are issued
//     inside one ccl group (see newRank for where the process group allows
//     it), and a round-r batch waits only for round-r batches of its
//     neighbours, which depend only on earlier rounds: no cycle, no
//     deadlock;
//   - with eager sends (ccl/local) sends are issued before receives, so
//     a round-r receive waits only for a round-r send that its peer
//     issues before its own receives;
//   - a stage sends at most one message per round, so the k-th send from
//     a to b is the k-th receive at b from a, which is how NCCL matches
//     untagged point-to-point operations.
//
// A round with no action on any stage cannot happen: the schedule's
// dependencies are acyclic (schedule.Simulate checks it), so planRounds
// reports it as an internal error rather than looping.
func planRounds(s *schedule.Schedule) ([][]round, error) {
	p := s.Stages()
	plans := make([][]slot, p)
	total := 0
	for st := range p {
		plans[st] = planStage(s, st)
		total += len(plans[st])
	}
	next := make([]int, p)
	arrived := make(map[transfer]bool)
	out := make([][]round, p)
	for done := 0; done < total; {
		var moved []transfer
		ran := false
		for st := range p {
			var rd round
			if next[st] < len(plans[st]) {
				sl := &plans[st][next[st]]
				if sl.recv == nil || arrived[*sl.recv] {
					rd.action = sl
					next[st]++
					done++
					ran = true
					if t := sl.send; t != nil {
						moved = append(moved, *t)
						if p > 1 {
							rd.batch = append(rd.batch, p2pOp{send: true, peer: stageOf(t.to, p), transfer: *t})
						}
					}
				}
			}
			out[st] = append(out[st], rd)
		}
		if !ran {
			return nil, fmt.Errorf("pipeline: internal error: %s schedule (p=%d, v=%d, m=%d) stalls after %d of %d actions",
				s.Name(), p, s.Chunks(), s.Microbatches(), done, total)
		}
		// Receives of this round, ordered by sender stage (moved is).
		for _, t := range moved {
			arrived[t] = true
			if p > 1 {
				to := stageOf(t.to, p)
				last := &out[to][len(out[to])-1]
				last.batch = append(last.batch, p2pOp{peer: stageOf(t.from, p), transfer: t})
			}
		}
	}
	return out, nil
}

// planBytes is what planRounds allocates for a schedule of p stages, v
// chunks and m microbatches, measured (BenchmarkPlanRounds, rounded up):
// about 700 bytes per action of the step (2·p·v·m; its slot, transfers,
// point-to-point operations and entry in the arrived set) and 64 per
// round of each stage (p × 2(m·v + p − 1) rounds, with their slices'
// growth). The plan is the process's, not a rank's: it is on the host
// whatever the backend, and is kept for the trainer's life. The sizes are
// bounded (schedule.MaxActions), so the figure cannot overflow.
func planBytes(p, v, m int) int64 {
	actions := 2 * float64(p) * float64(v) * float64(m)
	rounds := float64(p) * 2 * (float64(m)*float64(v) + float64(p) - 1)
	return int64(min(700*actions+64*rounds, maxRankBytes))
}
