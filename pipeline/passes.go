package pipeline

import (
	"context"

	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// commRange runs enqueue — a wait for, or a copy of, an action's input —
// inside a device range called name in the communication phase, on the
// compute stream. The caller restores the action's phase.
func (r *rank) commRange(name string, enqueue func() error) error {
	r.rec.SetPhase(profiler.Comm)
	r.rec.StartDevice(name, r.compute)
	err := enqueue()
	r.rec.End()
	return err
}

// forward runs one microbatch through one chunk: wait for (or copy) its
// input, then per layer a GEMM and a tanh; the last virtual stage computes
// the loss gradient, the others send the output on.
func (r *rank) forward(ctx context.Context, a *slot, batch []p2pOp) error {
	rec, s := r.rec, r.compute
	c, mb := &r.chunks[a.Chunk], a.Microbatch
	r.labels(schedule.Forward, a.Chunk, mb)
	act := c.act[mb]
	if !c.first {
		// Waiting for the input is not forward work: a range of its own
		// in the communication phase, before the forward range, so that
		// the forward range's device time is computation only.
		err := r.commRange("recv", func() error {
			if r.pp == nil {
				// One stage: the previous virtual stage is this rank's
				// previous chunk.
				return runtime.Copy(act[0], r.chunks[a.Chunk-1].act[mb][r.layers], s)
			}
			return streamWait(c.inWork[mb], s, "input", a.Action)
		})
		rec.SetPhase(profiler.Forward)
		if err != nil {
			return err
		}
	}
	rec.StartDevice("forward", s)
	defer rec.End()
	if err := r.delay(a); err != nil {
		return err
	}
	for j := 1; j <= r.layers; j++ {
		rec.StartDevice("linear", s)
		err := linearForward(s, c.w[j-1], act[j-1], act[j], r.rows, r.cfg.Width, r.cfg.Precision)
		rec.End()
		if err != nil {
			return err
		}
		rec.StartDevice("tanh", s)
		err = runtime.Tanh(s, act[j], act[j], r.n)
		rec.End()
		if err != nil {
			return err
		}
	}
	if c.last {
		rec.StartDevice("loss", s)
		err := r.lossGrad(c, mb)
		rec.End()
		return err
	}
	return r.sendOp(ctx, "send", act[r.layers], batch)
}

// lossGrad computes gradIn = scale·(output − target) on the device, and
// there too the microbatch's sum of squared errors, the dot product of
// output − target with itself (in pieces of at most maxDotLen elements,
// the later ones summed through the spare slot after the microbatches'),
// so that only one number per microbatch comes back to the host (finish).
// A dot product rather than a GEMM of one row by one column: a little
// faster on a GPU (BenchmarkLossSum in runtime/cuda).
func (r *rank) lossGrad(c *chunk, mb int) error {
	s, g := r.compute, c.gradIn[mb]
	if err := runtime.Copy(g, c.act[mb][r.layers], s); err != nil {
		return err
	}
	if err := runtime.Axpy(s, -1, c.target[mb], g, r.n); err != nil {
		return err
	}
	sse, err := r.sse.Elems(runtime.Float32, mb, 1)
	if err != nil {
		return err
	}
	spare, err := r.sse.Elems(runtime.Float32, r.cfg.Microbatches, 1)
	if err != nil {
		return err
	}
	if err := inPieces(r.n, maxDotLen, func(off, k int) error {
		gk, err := g.Elems(runtime.Float32, off, k)
		if err != nil {
			return err
		}
		if off == 0 {
			return runtime.Dot(s, gk, gk, sse, k)
		}
		if err := runtime.Dot(s, gk, gk, spare, k); err != nil {
			return err
		}
		return runtime.Axpy(s, 1, spare, sse, 1)
	}); err != nil {
		return err
	}
	return runtime.Scale(s, r.lossScale, g, r.n)
}

// backward differentiates one microbatch through one chunk, accumulating
// the weight gradients, and sends the input gradient back.
func (r *rank) backward(ctx context.Context, a *slot, batch []p2pOp) error {
	rec, s, w := r.rec, r.compute, r.cfg.Width
	c, mb := &r.chunks[a.Chunk], a.Microbatch
	r.labels(schedule.Backward, a.Chunk, mb)
	if !c.last {
		err := r.commRange("recv_grad", func() error {
			if r.pp == nil {
				return runtime.Copy(c.gradIn[mb], r.chunks[a.Chunk+1].gradOut[mb], s)
			}
			return streamWait(c.gradWork[mb], s, "gradient", a.Action)
		})
		rec.SetPhase(profiler.Backward)
		if err != nil {
			return err
		}
	}
	rec.StartDevice("backward", s)
	defer rec.End()
	if err := r.delay(a); err != nil {
		return err
	}
	act := c.act[mb]
	dy, dz := c.gradIn[mb], r.scratch[0]
	for j := r.layers; j >= 1; j-- {
		rec.StartDevice("tanh_backward", s)
		err := runtime.TanhBackward(s, act[j], dy, dz, r.n)
		rec.End()
		if err != nil {
			return err
		}
		rec.StartDevice("linear_grad_weight", s)
		err = linearGradWeight(s, act[j-1], dz, c.dw[j-1], r.rows, w, r.cfg.Precision)
		rec.End()
		if err != nil {
			return err
		}
		if j == 1 && c.first {
			break // nobody needs the gradient of the data
		}
		dx := r.scratch[1]
		if j == 1 {
			dx = c.gradOut[mb]
		}
		rec.StartDevice("linear_grad_input", s)
		err = linearGradInput(s, c.w[j-1], dz, dx, r.rows, w, r.cfg.Precision)
		rec.End()
		if err != nil {
			return err
		}
		dy = dx
	}
	if c.first {
		return nil
	}
	return r.sendOp(ctx, "send_grad", c.gradOut[mb], batch)
}

// delay enqueues the action's extra device time (Config.ActionDelay, and
// StragglerDelay on the straggler's first chunk's forwards): the stream
// holds still (runtime.Sleep). Validate allows delays on backends with
// the runtime.Sleeper capability only.
func (r *rank) delay(a *slot) error {
	d := r.cfg.ActionDelay
	if r.id == r.cfg.StragglerRank && a.Kind == schedule.Forward && a.Chunk == 0 {
		d += r.cfg.StragglerDelay
	}
	if d <= 0 {
		return nil
	}
	return runtime.Sleep(r.compute, d)
}
