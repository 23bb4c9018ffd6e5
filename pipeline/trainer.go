package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
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
	cfg       Config
	placement Placement
	impl      ccl.Impl
	// ownTimeout: impl is an in-process backend made for this run, whose
	// waits time out after CommTimeout (see newTrainer).
	ownTimeout bool
	rt         runtime.Impl
	factories  []*ccl.ProcessGroupFactory // one per group endpoint
	groups     []*ccl.ProcessGroup
	ranks      []*rankWorker
	results    chan rankResult
	step       int
	broken     error // the failure that ended the run
	aborted    bool  // the communicators were aborted
	stranded   bool  // a failed step left ranks running (Step's stopGrace)
	// drainBy is when the work queued by the ranks of a step the caller
	// stopped had to be done (CommTimeout after the stop, see Step); Close
	// waits no later. Zero: no step was stopped.
	drainBy time.Time
	closed  bool
	// now is closed by StopNow; nowAt holds when (UnixNano), for Close.
	now     chan struct{}
	nowOnce sync.Once
	nowAt   atomic.Int64
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
	r          *rank
	ownTimeout bool // the collectives are the trainer's in-process ones: they time out after CommTimeout
	// lockThread keeps the goroutine on one OS thread, whose current
	// device is the rank's (threadDevice).
	lockThread bool
	cmds       chan stepCmd
	done       chan error // the teardown's result, when the goroutine ends
	// closeBy bounds the teardown's wait for the rank's device work; Close
	// sets it before it closes cmds.
	closeBy time.Time
	// What the watchdog (Trainer.stuck) last saw of the rank: its
	// rank.busy, its compute stream's operation count, and since when
	// (busyNow) neither has moved.
	seenBusy int64
	seenOps  uint64
	quiet    int64
}

type stepCmd struct {
	// ctx ends when the caller's context does or a rank fails: the step
	// stops at its next action. failed ends only when a rank fails: once
	// a rank has enqueued all its actions, its wait for them is bounded
	// by it and the timeout, not by the caller's context, so a step whose
	// work is all queued completes.
	ctx, failed context.Context
	step        int
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
	return newTrainerHooks(ctx, cfg, hooks{})
}

// hooks are what tests change in a trainer.
type hooks struct {
	fault faultFunc
	// ccl, when set, replaces the collectives backend of ranks on devices
	// of their own (tests: one whose waits outlast CommTimeout, as NCCL's
	// do).
	ccl ccl.Impl
}

func newTrainer(ctx context.Context, cfg Config, fault faultFunc) (*Trainer, error) {
	return newTrainerHooks(ctx, cfg, hooks{fault: fault})
}

func newTrainerHooks(ctx context.Context, cfg Config, hk hooks) (*Trainer, error) {
	fault := hk.fault
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Precision, _ = cfg.EffectivePrecision() // float32 where the backend lacks the precision asked for
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
	pl, err := cfg.placement(rt)
	if err != nil {
		return nil, err
	}
	var (
		impl ccl.Impl
		own  bool
	)
	switch {
	case pl.Shared:
		impl, own = local.NewShared(cfg.Backend, local.WithTimeout(cfg.commTimeout())), true
	case hk.ccl != nil:
		impl = hk.ccl
	case pl.Ranks == 1:
		// One rank needs no collective library either: it communicates
		// with no one, and its groups of one are made in process.
		impl, own = local.NewShared(cfg.Backend, local.WithTimeout(cfg.commTimeout())), true
	default:
		if impl, err = ccl.Available(cfg.Backend); err != nil {
			return nil, fmt.Errorf("pipeline: %w", err)
		}
		if lb, ok := impl.(*local.Backend); ok && !lb.Shared() && lb.Type() == runtime.CPU {
			// The registered in-process backend bounds each wait by
			// its own default (local.DefaultTimeout), which is not
			// CommTimeout: a run of the same backend's own bounds them by
			// CommTimeout, shorter or longer.
			impl, own = local.New(local.WithTimeout(cfg.commTimeout())), true
		}
	}
	t := &Trainer{
		cfg:        cfg,
		impl:       impl,
		ownTimeout: own,
		rt:         rt,
		placement:  pl,
		results:    make(chan rankResult, cfg.Stages*cfg.Replicas),
		now:        make(chan struct{}),
	}
	pp, dp, err := t.createGroups(ctx)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), cfg.commTimeout())
		defer cancel()
		return nil, errors.Join(err, t.destroyGroups(dctx))
	}
	setup := make(chan error, cfg.Stages*cfg.Replicas)
	for id := range cfg.Stages * cfg.Replicas {
		w := &rankWorker{
			r:          newRank(cfg, id, t.device(id), rounds, pp[id], dp[id]),
			ownTimeout: own,
			lockThread: threadDevice(rt),
			cmds:       make(chan stepCmd),
			done:       make(chan error, 1),
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

// createGroups makes every rank's endpoint of its replica's pipeline
// group and of its stage's data-parallel group, indexed by rank; groups
// of one rank are nil.
//
// Each endpoint is a ProcessGroup of its own, from a private factory (so
// the names "pp0", "dp1" are unique within this run only), created with
// CommInitRank as the ranks of separate processes would, all at once.
// One ProcessGroup per rank keeps a rank's group operations (GroupStart …
// GroupEnd) from waiting on another rank: a rendezvous backend (NCCL)
// completes one rank's GroupEnd only once its peers reach theirs, and a
// ProcessGroup shared by several local ranks serialises their GroupEnds.
func (t *Trainer) createGroups(ctx context.Context) (pp, dp []*ccl.ProcessGroup, err error) {
	cfg := t.cfg
	n := cfg.Stages * cfg.Replicas
	pp = make([]*ccl.ProcessGroup, n)
	dp = make([]*ccl.ProcessGroup, n)
	type member struct {
		name       string
		size, rank int
		id         int // the trainer's rank
		slot       *[]*ccl.ProcessGroup
	}
	var members []member
	if cfg.Stages > 1 {
		for d := range cfg.Replicas {
			for s := range cfg.Stages {
				members = append(members, member{fmt.Sprintf("pp%d", d), cfg.Stages, s, d*cfg.Stages + s, &pp})
			}
		}
	}
	if cfg.Replicas > 1 {
		for s := range cfg.Stages {
			for d := range cfg.Replicas {
				members = append(members, member{fmt.Sprintf("dp%d", s), cfg.Replicas, d, d*cfg.Stages + s, &dp})
			}
		}
	}
	if len(members) == 0 {
		return pp, dp, nil
	}
	// The unique ids travel through files, as between processes.
	dir, err := os.MkdirTemp("", "trainscope-ids-")
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline: process groups: %w", err)
	}
	defer os.RemoveAll(dir)
	created := make([]*ccl.ProcessGroup, len(members))
	errs := make([]error, len(members))
	// The first failure ends the others' waits for a unique id that
	// will not come.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range members {
		f := ccl.NewProcessGroupFactory(t.impl, t.rt)
		t.factories = append(t.factories, f)
		dev := t.device(m.id)
		wg.Go(func() {
			pg, err := f.GetOrCreateRank(ctx, m.name, m.size, m.rank, dev, dir)
			if err != nil {
				errs[i] = fmt.Errorf("pipeline: process group %s, rank %d on %s: %w", m.name, m.rank, dev, sharedTimeout(t.ownTimeout, t.cfg, err))
				cancel()
				return
			}
			created[i] = pg
		})
	}
	wg.Wait()
	for i, m := range members {
		if pg := created[i]; pg != nil {
			(*m.slot)[m.id] = pg
			t.groups = append(t.groups, pg)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return pp, dp, nil
}

// threadDevice reports whether rt's current device belongs to the OS
// thread (CUDA's), so that a rank's goroutine is best kept on one thread
// whose current device is the rank's. The host backend's current device
// is one for the whole process: its ranks' goroutines stay unlocked, as
// a locked goroutine costs an OS thread of its own and a thread handoff
// at every wake-up, which with hundreds of ranks on a few cores made a
// step's time grow much faster than its work.
func threadDevice(rt runtime.Impl) bool { return rt.Type() != runtime.CPU }

// run is a rank's goroutine: setup, steps as they are handed over, then
// teardown, on one locked OS thread where the backend's current device is
// the thread's (threadDevice).
func (w *rankWorker) run(setup chan<- error, results chan<- rankResult) {
	if w.lockThread {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
	}
	r := w.r
	// The rank's device is the thread's current device for the
	// goroutine's life, so a backend that makes a call's device current
	// (CUDA) finds it so and switches nothing.
	if g, err := runtime.NewGuard(r.dev); err == nil {
		defer func() { _ = g.Release() }()
	}
	err := r.setup()
	if err != nil {
		err = fmt.Errorf("pipeline: %v: setup: %w", r, err)
	}
	setup <- err
	for cmd := range w.cmds { // after a failed setup, Close closes it at once
		sse, err := r.step(cmd.ctx, cmd.failed, cmd.step)
		if err != nil {
			err = fmt.Errorf("pipeline: %v: step %d: %w", r, cmd.step, sharedTimeout(w.ownTimeout, r.cfg, err))
		}
		results <- rankResult{rank: r.id, sse: sse, err: err}
	}
	w.done <- r.teardown(w.closeBy)
}

// Step runs the next training step on every rank and returns its loss and
// wall time. A ctx that ends stops each rank at its next action; a rank
// that had queued the whole step waits for that work (within the
// communication timeout), so when every rank had, the step completes.
// The work the ranks queued gets CommTimeout from ctx's end in all: a
// step not done by then fails with a *CommTimeoutError, its
// communicators aborted, and a rank that is not back within a tick of
// the watchdog's (a host blocked handing work to a device that does not
// get through it) is left running; Close waits no later either.
// The first rank to fail cancels the others and aborts the
// process groups so that no rank waits for a peer that will not come; its
// error, which names the rank, is returned once every rank has stopped,
// or after twice the communication timeout (at least 10 s) with the
// ranks the abort did not reach left running, which the error counts. A rank whose host has waited
// CommTimeout for its device to accept more work (a full queue behind a
// transfer that does not come, where the backend's own wait has no
// deadline, as NCCL's) fails the step the same way, with a
// *CommTimeoutError.
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
	select {
	case <-t.now:
		return StepResult{}, fmt.Errorf("pipeline: step %d: %w", t.step, ErrStoppedNow)
	default:
	}
	sctx, cancelStep := context.WithCancel(ctx)
	failed, cancelFailed := context.WithCancel(context.WithoutCancel(ctx))
	cancel := func() { cancelStep(); cancelFailed() }
	defer cancel()
	start := time.Now()
	for _, w := range t.ranks {
		w.cmds <- stepCmd{ctx: sctx, failed: failed, step: t.step}
	}
	var (
		sse      float64
		first    error
		giveUp   <-chan time.Time
		grace    *time.Timer
		graceFor time.Duration
	)
	timeout := t.cfg.commTimeout()
	fail := func(err error) {
		// Only the first failure is news: the others follow from the
		// cancellation and the abort it triggers.
		if first == nil {
			first = err
			cancel()
			t.abort()
			// The other ranks stop at once, unless the abort did not
			// reach one (a backend call that ignores it): the step
			// does not wait for such a rank for ever.
			graceFor = stopGrace(timeout)
			grace = time.NewTimer(graceFor)
			giveUp = grace.C
		}
	}
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	tick := watchTick(timeout)
	watch := time.NewTicker(tick)
	defer watch.Stop()
	stopped, now := ctx.Done(), (<-chan struct{})(t.now)
	var (
		drain   *time.Timer
		drained <-chan time.Time
	)
	defer func() {
		if drain != nil {
			drain.Stop()
		}
	}()
	for left := len(t.ranks); left > 0; {
		select {
		case res := <-t.results:
			left--
			if res.err != nil {
				fail(res.err)
			}
			sse += res.sse
		case <-watch.C:
			if err := t.stuck(timeout); err != nil {
				fail(err)
			}
		case <-stopped:
			// The ranks stop at their next action; what they queued
			// gets the timeout from now to finish.
			stopped = nil
			t.drainBy = time.Now().Add(timeout)
			drain = time.NewTimer(timeout)
			drained = drain.C
		case <-drained:
			drained = nil
			fail(fmt.Errorf("pipeline: step %d: %w", t.step, &CommTimeoutError{Timeout: timeout, Err: errDrain}))
			// The caller stopped the step and its deadline has passed:
			// the ranks the abort and the cancellation reach are back
			// within a tick; stopGrace is not waited for.
			graceFor = tick
			grace.Reset(tick)
		case <-now:
			// The caller gives up the step's queued work at once: the
			// ranks the abort and the cancellation reach are back
			// within moments; the others are left.
			now, stopped, drained = nil, nil, nil
			fail(fmt.Errorf("pipeline: step %d: %w", t.step, ErrStoppedNow))
			graceFor = stopNowGrace
			grace.Reset(graceFor)
		case <-giveUp:
			first = fmt.Errorf("%w (then %d of the %d ranks did not stop within %v of it: they are left running)", first, left, len(t.ranks), graceFor)
			t.stranded = true
			left = 0
		}
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

// errDrain is what a step whose caller stopped it says when the work its
// ranks had queued was not done CommTimeout after the stop.
var errDrain = errors.New("the step was stopped, and the work its ranks had queued did not finish within the timeout after that")

// ErrStoppedNow is wrapped by the error of a step that StopNow ended, and
// of every step after it.
var ErrStoppedNow = errors.New("stopped at once (Trainer.StopNow): the work the ranks had queued was given up")

// stopNowGrace is how long a step that StopNow ended waits for the ranks
// the abort and the cancellation reach, and Close for their teardown.
const stopNowGrace = 100 * time.Millisecond

// StopNow gives up at once the work of the step under way, if any, as a
// second interrupt asks: the step fails with ErrStoppedNow without
// waiting for the device work the ranks had queued, the communicators are
// aborted, and ranks that do not stop at once are left; later steps fail
// the same way, and Close waits for nothing more than stopNowGrace. It is
// safe to call from any goroutine, at any time, more than once.
func (t *Trainer) StopNow() {
	t.nowOnce.Do(func() {
		t.nowAt.Store(time.Now().UnixNano())
		close(t.now)
	})
}

// watchTick is the period of the watchdog (Trainer.stuck) for timeout.
func watchTick(timeout time.Duration) time.Duration {
	return min(max(timeout/4, time.Millisecond), time.Second)
}

// errStuck is what the watchdog says of a rank whose host is held up
// handing work to its device.
var errStuck = errors.New("a call handing the step's work to its device, or copying its loss back, did not return: the device has not got through the work queued before it (a transfer from a peer that does not come, or a step longer than the timeout?)")

// stuck returns the error of the first rank whose host has been handing
// work to its device (rank.enter) without getting any further for timeout
// or longer, nil when none has. Getting further is a new call on the
// rank's compute stream (its Ops count moves: every action, and every
// transfer, which first orders itself after the compute stream, enqueues
// there) or a new enter: a host that waits at each launch for a slow
// device to free a slot in its queue is not stuck, however long the
// launches of one round take in all. Such a rank cannot see a deadline of
// its own; the abort that follows the error fails its pending transfers,
// which frees its queue. Progress is seen at the watchdog's ticks, so a
// stuck rank is named between timeout and timeout plus a tick after its
// last call began.
func (t *Trainer) stuck(timeout time.Duration) error {
	now := busyNow()
	for _, w := range t.ranks {
		busy := w.r.busy.Load()
		if busy == 0 {
			w.seenBusy = 0
			continue
		}
		var ops uint64
		if w.r.compute != nil {
			ops = w.r.compute.Ops()
		}
		switch {
		case ops != w.seenOps:
			w.quiet = now
		case busy != w.seenBusy:
			w.quiet = busy
		}
		w.seenBusy, w.seenOps = busy, ops
		if time.Duration(now-w.quiet) < timeout {
			continue
		}
		return fmt.Errorf("pipeline: %v: step %d: %w", w.r, t.step, &CommTimeoutError{Timeout: timeout, Err: errStuck})
	}
	return nil
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
// free their buffers, and destroys the process groups, which wait for
// their communication. All of it is bounded by one deadline: CommTimeout
// from the call, or, after a step the caller stopped, the end of the time
// that step's queued work had (see Step). Past it, a rank's device work
// still running keeps its buffers (not freed), a communicator with work
// pending is aborted, and a rank a failed step left running is left.
// After StopNow the deadline is stopNowGrace after it. It is safe to call
// more than once; later calls return nil.
func (t *Trainer) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	deadline := time.Now().Add(t.cfg.commTimeout())
	if !t.drainBy.IsZero() && t.drainBy.Before(deadline) {
		deadline = t.drainBy
	}
	if at := t.nowAt.Load(); at != 0 {
		// StopNow: nothing is waited for past its grace.
		deadline = time.Unix(0, at).Add(stopNowGrace)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var errs []error
	for _, w := range t.ranks {
		w.closeBy = deadline
		close(w.cmds)
	}
	// Each rank is waited for until the deadline only, and a moment
	// more for a teardown whose own wait ends with it: one a failed step
	// left running (stranded) may never end, and a teardown may block in
	// the driver where its deadline does not reach (CUDA's cudaFree waits
	// for every stream of the device, another rank's included).
	rctx, rcancel := context.WithDeadline(context.Background(), deadline.Add(teardownGrace))
	defer rcancel()
	for id, w := range t.ranks {
		select {
		case err := <-w.done:
			errs = append(errs, err)
			continue
		default:
		}
		select {
		case err := <-w.done:
			errs = append(errs, err)
		case <-rctx.Done():
			if t.stranded {
				errs = append(errs, fmt.Errorf("pipeline: rank %d did not stop: its goroutine and its buffers are left", id))
			} else {
				errs = append(errs, fmt.Errorf("pipeline: rank %d: teardown did not return by the deadline (freeing device memory waits for the device's other work): its goroutine is left", id))
			}
		}
	}
	gerr := t.destroyGroups(ctx)
	if !t.aborted {
		// After an abort the backend refuses to destroy the aborted
		// communicators again; that is expected, not news.
		errs = append(errs, gerr)
	}
	return errors.Join(errs...)
}

// stopGrace is how long a failed step waits for the ranks to stop after
// the first failure aborted their communication, and Close for a rank
// that did not: twice the communication timeout, at least 10 s.
func stopGrace(timeout time.Duration) time.Duration {
	return max(2*timeout, stopGraceMin)
}

// stopGraceMin is stopGrace's least value (a variable for tests).
var stopGraceMin = 10 * time.Second

// teardownGrace is how long past Close's deadline it waits for a rank
// whose teardown gives up at that deadline to say so.
const teardownGrace = 250 * time.Millisecond

// destroyGroups destroys the process groups, each wait for their work
// bounded by ctx.
func (t *Trainer) destroyGroups(ctx context.Context) error {
	t.groups = nil
	var errs []error
	for _, f := range t.factories {
		errs = append(errs, f.DestroyContext(ctx))
	}
	t.factories = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pipeline: destroying process groups: %w", err)
	}
	return nil
}

// device is rank id's device.
func (t *Trainer) device(id int) runtime.Device {
	return runtime.Device{Type: t.cfg.Backend, Index: id % t.placement.Devices}
}

// Placement says where the ranks run and whether they share devices.
func (t *Trainer) Placement() Placement { return t.placement }

// Config returns the trainer's configuration, with the Precision its
// GEMMs compute in (Config.EffectivePrecision).
func (t *Trainer) Config() Config { return t.cfg }
