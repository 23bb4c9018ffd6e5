package pipeline

import (
	"context"
	"errors"
	"time"
)

// Result is what a training run measured.
type Result struct {
	// Losses holds each step's mean squared error over its global batch,
	// computed before that step's update.
	Losses []float64
	// StepTimes holds each step's wall time.
	StepTimes []time.Duration
	// Total is the wall time of the whole run, setup and teardown
	// included.
	Total time.Duration
}

// Train runs cfg.Steps training steps of the model cfg describes on
// cfg.Backend, pipelined over cfg.Stages × cfg.Chunks virtual stages and
// replicated cfg.Replicas times, and tears everything down before it
// returns, on error too. An error names the rank that failed first.
func Train(ctx context.Context, cfg Config) (*Result, error) {
	return train(ctx, cfg, nil)
}

func train(ctx context.Context, cfg Config, fault faultFunc) (*Result, error) {
	start := time.Now()
	t, err := newTrainer(ctx, cfg, fault)
	if err != nil {
		return nil, err
	}
	// Steps may be any positive int (a run until ctx ends): the results
	// grow with the steps run, from room for at most maxPrealloc.
	n := min(cfg.Steps, maxPrealloc)
	res := &Result{
		Losses:    make([]float64, 0, n),
		StepTimes: make([]time.Duration, 0, n),
	}
	for range cfg.Steps {
		sr, err := t.Step(ctx)
		if err != nil {
			return nil, errors.Join(err, t.Close())
		}
		res.Losses = append(res.Losses, sr.Loss)
		res.StepTimes = append(res.StepTimes, sr.Wall)
	}
	if err := t.Close(); err != nil {
		return nil, err
	}
	res.Total = time.Since(start)
	return res, nil
}

// maxPrealloc is the most steps whose results are allocated before they
// are run.
const maxPrealloc = 1 << 16
