package pipeline

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// Trainer holds a training run between steps: one goroutine per rank, each
// locked to its OS thread for its whole life (CUDA binds the current device
// to the thread), with its stream, buffers and recorder, and the process
// groups that connect them. Train is NewTrainer, Steps × Step and Close.
//
// A Trainer is driven from one goroutine. After a failed step it is
// broken: later steps return the same error, and Close tears it down.
type Trainer struct {
	cfg     Config
	impl    ccl.Impl
	factory *ccl.ProcessGroupFactory
	groups  []*ccl.ProcessGroup
	ranks   []*rankWorker
	results chan rankResult
	step    int
	broken  error // the failure that ended the run
	aborted bool  // the communicators were aborted
	closed  bool
}

// StepResult is the outcome of one step.
type StepResult struct {
	Step int
	// Loss is the mean squared error over the step's global batch,
	// computed before the step's update.
	Loss float64
	// Wall is the time from handing the step to the ranks until every rank
	// had finished its device work and communication.
	Wall time.Duration
}

// rankWorker is the coordinator's handle on a rank goroutine.
type rankWorker struct {
	r    *rank
	cmds chan stepCmd
	done chan error // the teardown's result, when the goroutine ends
}

type stepCmd struct {
	ctx  context.Context
	step int
}

type rankResult struct {
	rank int
	sse  float64
	err  error
}

// NewTrainer validates cfg, creates the process groups and starts one
// goroutine per rank, which allocates its buffers and uploads the initial
// weights. ctx bounds the setup only.
func NewTrainer(ctx context.Context, cfg Config) (*Trainer, error) {
	return newTrainer(ctx, cfg, nil)
}

func newTrainer(ctx context.Context, cfg Config, fault faultFunc) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sched, err := cfg.schedule()
	if err != nil {
		return nil, err
	}
	rounds, err := planRounds(sched)
	if err != nil {
		return nil, err
	}
	rt, err := runtime.Available(cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	impl, err := ccl.Available(cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	// A private factory: group names ("pp0", "dp1") are unique within
	// this run only, so several runs may share a process.
	t := &Trainer{
		cfg:     cfg,
		impl:    impl,
		factory: ccl.NewProcessGroupFactory(impl, rt),
		results: make(chan rankResult, cfg.Stages*cfg.Replicas),
	}
	pp, dp, err := t.createGroups()
	if err != nil {
		return nil, errors.Join(err, t.destroyGroups())
	}
	setup := make(chan error, cfg.Stages*cfg.Replicas)
	for id := range cfg.Stages * cfg.Replicas {
		w := &rankWorker{
			r:    newRank(cfg, id, rounds, pp[id/cfg.Stages], dp[id%cfg.Stages]),
			cmds: make(chan stepCmd),
			done: make(chan error, 1),
		}
		w.r.fault = fault
		t.ranks = append(t.ranks, w)
		go w.run(setup, t.results)
	}
	var errs []error
	for range t.ranks {
		select {
		case err := <-setup:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("pipeline: setup: %w", ctx.Err()))
		}
		if len(errs) > 0 {
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs[0], t.Close())
	}
	return t, nil
}

// createGroups makes the pipeline group of each replica and the
// data-parallel group of each stage; groups of one rank are nil.
func (t *Trainer) createGroups() (pp, dp []*ccl.ProcessGroup, err error) {
	cfg := t.cfg
	dev := func(replica, stage int) runtime.Device {
		return runtime.Device{Type: cfg.Backend, Index: replica*cfg.Stages + stage}
	}
	pp = make([]*ccl.ProcessGroup, cfg.Replicas)
	dp = make([]*ccl.ProcessGroup, cfg.Stages)
	if cfg.Stages > 1 {
		for d := range cfg.Replicas {
			devs := make([]runtime.Device, cfg.Stages)
			for s := range devs {
				devs[s] = dev(d, s)
			}
			if pp[d], err = t.group(fmt.Sprintf("pp%d", d), devs); err != nil {
				return nil, nil, err
			}
		}
	}
	if cfg.Replicas > 1 {
		for s := range cfg.Stages {
			devs := make([]runtime.Device, cfg.Replicas)
			for d := range devs {
				devs[d] = dev(d, s)
			}
			if dp[s], err = t.group(fmt.Sprintf("dp%d", s), devs); err != nil {
				return nil, nil, err
			}
		}
	}
	return pp, dp, nil
}

func (t *Trainer) group(name string, devs []runtime.Device) (*ccl.ProcessGroup, error) {
	pg, err := t.factory.GetOrCreate(name, devs)
	if err != nil {
		return nil, fmt.Errorf("pipeline: process group %s: %w", name, err)
	}
	t.groups = append(t.groups, pg)
	return pg, nil
}

// run is a rank's goroutine: setup, steps as they are handed over, then
// teardown, all on one locked OS thread.
func (w *rankWorker) run(setup chan<- error, results chan<- rankResult) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	r := w.r
	err := r.setup()
	if err != nil {
		err = fmt.Errorf("pipeline: rank %d (replica %d, stage %d) on %s: setup: %w", r.id, r.replica, r.stage, r.dev, err)
	}
	setup <- err
	if err == nil {
		for cmd := range w.cmds {
			sse, err := r.step(cmd.ctx, cmd.step)
			if err != nil {
				err = fmt.Errorf("pipeline: rank %d (replica %d, stage %d) on %s: step %d: %w", r.id, r.replica, r.stage, r.dev, cmd.step, err)
			}
			results <- rankResult{rank: r.id, sse: sse, err: err}
		}
	}
	w.done <- r.teardown()
}

// Step runs the next training step on every rank and returns its loss and
// wall time. The first rank to fail cancels the others and aborts the
// process groups so that no rank waits for a peer that will not come; its
// error, which names the rank, is returned.
func (t *Trainer) Step(ctx context.Context) (StepResult, error) {
	if t.closed {
		return StepResult{}, errors.New("pipeline: Step after Close")
	}
	if t.broken != nil {
		return StepResult{}, t.broken
	}
	if err := ctx.Err(); err != nil {
		return StepResult{}, fmt.Errorf("pipeline: step %d: %w", t.step, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for _, w := range t.ranks {
		w.cmds <- stepCmd{ctx: sctx, step: t.step}
	}
	var (
		sse   float64
		first error
	)
	for range t.ranks {
		// Only the first failure is news: the others follow from the
		// cancellation and the abort it triggers.
		res := <-t.results
		if res.err != nil && first == nil {
			first = res.err
			cancel()
			t.abort()
		}
		sse += res.sse
	}
	wall := time.Since(start)
	if first != nil {
		t.broken = first
		return StepResult{}, first
	}
	res := StepResult{
		Step: t.step,
		Loss: sse / float64(t.cfg.globalRows()*t.cfg.Width),
		Wall: wall,
	}
	t.step++
	return res, nil
}

// abort fails every communicator, so that operations waiting for a peer
// return at once instead of at the backend's deadline.
func (t *Trainer) abort() {
	t.aborted = true
	for _, pg := range t.groups {
		for _, d := range pg.Devices() {
			if c, err := pg.Comm(d); err == nil {
				_ = t.impl.CommAbort(c)
			}
		}
	}
}

// Close stops the rank goroutines, which wait for their device work and
// free their buffers, and destroys the process groups. It is safe to call
// more than once; later calls return nil.
func (t *Trainer) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for _, w := range t.ranks {
		close(w.cmds)
	}
	for _, w := range t.ranks {
		errs = append(errs, <-w.done)
	}
	gerr := t.destroyGroups()
	if !t.aborted {
		// After an abort the backend refuses to destroy the aborted
		// communicators again; that is expected, not news.
		errs = append(errs, gerr)
	}
	return errors.Join(errs...)
}

func (t *Trainer) destroyGroups() error {
	t.groups = nil
	if err := t.factory.Destroy(); err != nil {
		return fmt.Errorf("pipeline: destroying process groups: %w", err)
	}
	return nil
}

// Config returns the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }
