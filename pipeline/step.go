package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// step runs one training step on the rank: the schedule's rounds, the
// data-parallel gradient all-reduce and the SGD update. It returns the sum
// of squared errors of the rank's microbatches when the rank holds the
// last virtual stage, 0 otherwise.
//
// The host enqueues the whole step without waiting for the device; the
// compute stream waits for received data through Work.StreamWait. The
// host waits only at the end, for the step's communication and device
// work, because the loss must be read.
//
// A cancelled ctx stops the step at its next action; once every action
// is enqueued, only failed (another rank's failure) and the timeout end
// the wait for them: work already queued finishes, and the step with it.
func (r *rank) step(ctx, failed context.Context, step int) (sse float64, err error) {
	rec := r.rec
	rec.SetStep(step)
	rec.SetLabels(profiler.NoLabels)
	rec.SetStage(r.stage)
	rec.Start("step")
	defer func() {
		if err != nil {
			// A failed or interrupted step is not a step's time.
			rec.EndCutShort()
			return
		}
		rec.End()
	}()
	cctx := ctx
	if rec != nil {
		cctx = profiler.NewContext(ctx, rec)
	}
	r.works = r.works[:0]
	for i := range r.chunks {
		clear(r.chunks[i].inWork) // this step's receives fill them again
		clear(r.chunks[i].gradWork)
	}
	defer func() {
		if r.batchOpen {
			_ = r.pp.GroupEnd()
			r.batchOpen = false
		}
	}()

	if err := r.loadBatch(step); err != nil {
		return 0, err
	}
	for i := range r.rounds {
		// A cancelled run stops at the next action boundary, rather than
		// at whichever wait notices first.
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("step %d: stopped before action %d of %d: %w", step, i, len(r.rounds), context.Cause(ctx))
		}
		if f := r.fault; f != nil {
			if err := f(ctx, r.id, step, i); err != nil {
				return 0, err
			}
		}
		rd := &r.rounds[i]
		if a := rd.action; a != nil {
			if a.Kind == schedule.Forward {
				err = r.forward(cctx, a, rd.batch)
			} else {
				err = r.backward(cctx, a, rd.batch)
			}
			if err != nil {
				return 0, fmt.Errorf("%v: %w", a.Action, err)
			}
		}
		if err := r.receive(cctx, rd.batch); err != nil {
			return 0, err
		}
	}
	if err := r.optimize(cctx); err != nil {
		return 0, err
	}
	if f := r.fault; f != nil {
		if err := f(ctx, r.id, step, queuedRound); err != nil {
			return 0, err
		}
	}
	return r.finish(failed)
}

// labels sets the recorder's context for an action or a transfer.
func (r *rank) labels(kind schedule.Kind, chunk, mb int) {
	rec := r.rec
	rec.SetStage(r.stage)
	rec.SetChunk(chunk)
	rec.SetMicrobatch(mb)
	if kind == schedule.Forward {
		rec.SetPhase(profiler.Forward)
	} else {
		rec.SetPhase(profiler.Backward)
	}
}

// finish waits for the step's device work and communication, each wait
// bounded by the configured timeout, and sums the squared errors.
func (r *rank) finish(ctx context.Context) (float64, error) {
	timeout := r.cfg.commTimeout()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if r.hostSSE != nil {
		if err := runtime.CopyToHost(r.hostSSE, r.sse, r.compute); err != nil {
			return 0, fmt.Errorf("copying the step's loss: %w", err)
		}
	}
	if err := r.compute.Synchronize(wctx); err != nil {
		return 0, fmt.Errorf("waiting for the step's device work: %w", timedOut(err, ctx, wctx, timeout))
	}
	deadline := time.Now().Add(timeout)
	for _, w := range r.works {
		if err := waitWork(ctx, w, deadline, timeout); err != nil {
			return 0, err
		}
	}
	clear(r.works)
	r.works = r.works[:0]
	var sse float64
	for i := 0; i+4 <= len(r.hostSSE); i += 4 {
		sse += float64(math.Float32frombits(binary.NativeEndian.Uint32(r.hostSSE[i:])))
	}
	return sse, nil
}

// waitWork waits for w until it completes, ctx ends or deadline (timeout
// after the step's first wait began) passes, which is a *CommTimeoutError.
// Work.Wait cannot see ctx, so this polls, backing off to a millisecond.
func waitWork(ctx context.Context, w *ccl.Work, deadline time.Time, timeout time.Duration) error {
	pause := 5 * time.Microsecond
	var t *time.Timer
	for {
		if w.Done() {
			return w.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			if w.Done() { // finished (or failed) just now: no timeout
				return w.Err()
			}
			if err := w.Wait(0); err != nil {
				return &CommTimeoutError{Timeout: timeout, Err: err}
			}
			return nil
		}
		d := min(pause, left)
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		pause = min(2*pause, time.Millisecond)
	}
}
