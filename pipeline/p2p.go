package pipeline

import (
	"context"
	"fmt"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/runtime"
)

// sendOp issues the send of the round's batch, which opens the batch.
// With one stage the next virtual stage copies from this rank's buffers
// and there is nothing to send.
func (r *rank) sendOp(ctx context.Context, name string, buf runtime.Buffer, batch []p2pOp) error {
	if r.pp == nil {
		return nil
	}
	if len(batch) == 0 || !batch[0].send {
		return fmt.Errorf("pipeline: internal error: no send planned for a virtual stage with a successor")
	}
	if err := r.openBatch(); err != nil {
		return err
	}
	rec := r.rec
	rec.StartDevice(name, r.compute)
	w, err := r.pp.Send(ctx, r.compute, buf, runtime.Float32, batch[0].peer)
	rec.End()
	if err != nil {
		return err
	}
	r.works = append(r.works, w)
	return nil
}

// receive issues the receives of the round's batch into the buffers of
// the actions that will use them, then closes the batch.
func (r *rank) receive(ctx context.Context, batch []p2pOp) error {
	for _, op := range batch {
		if op.send {
			continue
		}
		if err := r.openBatch(); err != nil {
			return err
		}
		ci := op.to / r.cfg.Stages
		c := &r.chunks[ci]
		buf, slot := c.act[op.mb][0], &c.inWork[op.mb]
		kind := schedule.Forward
		if op.grad {
			buf, slot, kind = c.gradIn[op.mb], &c.gradWork[op.mb], schedule.Backward
		}
		r.labels(kind, ci, op.mb)
		w, err := r.pp.Recv(ctx, r.compute, buf, runtime.Float32, op.peer)
		if err != nil {
			return err
		}
		*slot = w
		r.works = append(r.works, w)
	}
	return r.closeBatch()
}

func (r *rank) openBatch() error {
	if !r.groups || r.batchOpen {
		return nil
	}
	if err := r.pp.GroupStart(); err != nil {
		return err
	}
	r.batchOpen = true
	return nil
}

func (r *rank) closeBatch() error {
	if !r.batchOpen {
		return nil
	}
	r.batchOpen = false
	return r.pp.GroupEnd()
}

// streamWait makes s wait for the receive w, which the plan issued in an
// earlier round.
func streamWait(w *ccl.Work, s *runtime.Stream, what string, a schedule.Action) error {
	if w == nil {
		return fmt.Errorf("pipeline: internal error: %s of %v was never received", what, a)
	}
	return w.StreamWait(s)
}
