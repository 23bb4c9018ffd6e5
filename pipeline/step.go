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

	r.enter()
	err = r.loadBatch(step)
	r.leave()
	if err != nil {
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
		if err := r.round(cctx, &r.rounds[i]); err != nil {
			return 0, err
		}
	}
	r.enter()
	err = r.optimize(cctx)
	r.leave()
	if err != nil {
		return 0, err
	}
	if f := r.fault; f != nil {
		if err := f(ctx, r.id, step, queuedRound); err != nil {
			return 0, err
		}
	}
	return r.finish(failed)
}

// round enqueues one round of the step: its action, then its batch of
// transfers.
func (r *rank) round(ctx context.Context, rd *round) (err error) {
	r.enter()
	defer r.leave()
	if a := rd.action; a != nil {
		if a.Kind == schedule.Forward {
			err = r.forward(ctx, a, rd.batch)
		} else {
			err = r.backward(ctx, a, rd.batch)
		}
		if err != nil {
			return fmt.Errorf("%v: %w", a.Action, err)
		}
	}
	return r.receive(ctx, rd.batch)
}

// enter marks the start of host calls that hand work to the device
// (enqueue, issue a transfer), leave their end. They return at once
// unless the device's queue is full, and then only once its work
// progresses: the trainer's watchdog (Trainer.stuck) fails a step in
// which a rank stays between enter and leave with no new call on its
// compute stream for CommTimeout, since no deadline of the rank's own
// can end that wait.
func (r *rank) enter() { r.busy.Store(busyNow()) }
func (r *rank) leave() { r.busy.Store(0) }

// busyEpoch is the origin of busyNow's clock.
var busyEpoch = time.Now()

// busyNow is the time since busyEpoch on the monotonic clock, plus one,
// so that it is never 0 (rank.busy's "not busy").
func busyNow() int64 { return int64(time.Since(busyEpoch)) + 1 }

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
//
// The loss is copied back only once the compute stream is idle (idle): a
// copy into pageable host memory waits inside the driver for the work
// queued before it, where no deadline reaches, and while it waits CUDA
// holds back other threads' event creation and destruction (the
// profiler's included).
func (r *rank) finish(ctx context.Context) (float64, error) {
	timeout := r.cfg.commTimeout()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.idle(wctx); err != nil {
		return 0, fmt.Errorf("waiting for the step's device work: %w", timedOut(err, ctx, wctx, timeout))
	}
	if r.hostSSE != nil {
		r.enter()
		err := runtime.CopyToHost(r.hostSSE, r.sse, r.compute)
		r.leave()
		if err != nil {
			return 0, fmt.Errorf("copying the step's loss: %w", err)
		}
		// A stream's copy may be asynchronous (the cpu backend's is).
		if err := r.idle(wctx); err != nil {
			return 0, fmt.Errorf("copying the step's loss: %w", timedOut(err, ctx, wctx, timeout))
		}
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
