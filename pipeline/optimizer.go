package pipeline

import (
	"context"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// optimize all-reduces every chunk's gradients over the data-parallel
// group, then applies SGD and zeroes the gradients. The all-reduce and the
// compute stream's wait for it are a communication-phase range of their
// own before the optimizer range, so that the optimizer's device time is
// computation only (as the wait for an action's input is kept out of the
// action).
func (r *rank) optimize(ctx context.Context) error {
	rec, s := r.rec, r.compute
	rec.SetLabels(profiler.NoLabels)
	rec.SetStage(r.stage)
	if r.dp != nil {
		rec.SetPhase(profiler.Comm)
		rec.StartDevice("allreduce_grads", s)
		err := r.allReduce(ctx)
		rec.End()
		if err != nil {
			return err
		}
	}
	rec.SetPhase(profiler.Optimizer)
	rec.StartDevice("optimizer", s)
	defer rec.End()
	rec.StartDevice("sgd", s)
	defer rec.End()
	n := r.layers * r.cfg.Width * r.cfg.Width
	for i := range r.chunks {
		c := &r.chunks[i]
		if err := runtime.Axpy(s, r.negLR, c.grads, c.weights, n); err != nil {
			return err
		}
		if err := runtime.Memset(c.grads, 0, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *rank) allReduce(ctx context.Context) error {
	start := len(r.works)
	for i := range r.chunks {
		r.rec.SetChunk(i)
		w, err := r.dp.AllReduce(ctx, r.compute, r.chunks[i].grads, runtime.Float32, ccl.Avg)
		if err != nil {
			return err
		}
		r.works = append(r.works, w)
	}
	r.rec.SetChunk(profiler.None)
	for _, w := range r.works[start:] {
		if err := w.StreamWait(r.compute); err != nil {
			return err
		}
	}
	return nil
}
