package pipeline

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A device that does not get through its work: every forward and backward
// action holds its rank's stream still for an hour (ActionDelay), longer
// than any test waits. The ranks' stream goroutines are left sleeping;
// nothing else is.
const stuckDelay = time.Hour

// stuckConfig is a 2-stage, 2-chunk 1F1B step on such a device. Its host
// work is small: each rank queues its whole step without waiting.
func stuckConfig(timeout time.Duration) Config {
	cfg := smallConfig(2, 2, 1, Schedule1F1B)
	cfg.Steps = 1
	cfg.ActionDelay = stuckDelay
	cfg.CommTimeout = timeout
	return cfg
}

// stepAndClose runs one step of tr under ctx and Close, and returns when
// Close returned, the step's error and Close's. It fails t if they have
// not both returned by limit (the goroutine is then left).
func stepAndClose(ctx context.Context, t *testing.T, tr *Trainer, limit time.Time) (closed time.Time, stepErr, closeErr error) {
	t.Helper()
	type result struct {
		step, close error
		at          time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, serr := tr.Step(ctx)
		cerr := tr.Close()
		done <- result{serr, cerr, time.Now()}
	}()
	select {
	case r := <-done:
		return r.at, r.step, r.close
	case <-time.After(time.Until(limit)):
		t.Fatalf("Step and Close still running %v past their limit", time.Since(limit))
		return time.Time{}, nil, nil
	}
}

// The caller stops a step once every rank has queued it whole, on a
// device that never gets through it (a kernel that does not end). The
// queued work gets CommTimeout from the stop; then the step fails with a
// *CommTimeoutError and Close returns too, without waiting again for
// the device or for the communication streams stuck behind it. Before,
// Close waited CommTimeout more for the ranks' streams, then a minute
// (ccl.DestroyTimeout) for each process group's.
func TestStopWithQueuedWorkOnAStuckDevice(t *testing.T) {
	const timeout = time.Second
	cfg := stuckConfig(timeout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var queued atomic.Int32
	var stoppedAt atomic.Int64
	fault := func(_ context.Context, rank, step, round int) error {
		if round == queuedRound && queued.Add(1) == int32(cfg.Stages) {
			stoppedAt.Store(time.Now().UnixNano())
			cancel() // a signal, once every rank has queued the step
		}
		return nil
	}
	tr, err := newTrainer(context.Background(), cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	// Generous for a loaded machine, far below the minutes it took.
	limit := time.Now().Add(timeout + 20*time.Second)
	closed, stepErr, closeErr := stepAndClose(ctx, t, tr, limit)
	if queued.Load() != int32(cfg.Stages) {
		t.Fatalf("%d of %d ranks queued the step", queued.Load(), cfg.Stages)
	}
	var te *CommTimeoutError
	if !errors.As(stepErr, &te) || te.Timeout != timeout {
		t.Errorf("Step = %v, want a CommTimeoutError of %v", stepErr, timeout)
	}
	stop := time.Unix(0, stoppedAt.Load())
	if d := closed.Sub(stop); d < timeout-100*time.Millisecond {
		t.Errorf("Close returned %v after the stop: the queued work did not get its %v", d, timeout)
	}
	// The ranks' device work did not finish: their buffers are kept, and
	// Close says so; the communicators stuck behind it are aborted.
	if closeErr == nil || !strings.Contains(closeErr.Error(), "buffers not freed") {
		t.Errorf("Close = %v, want the ranks' unfinished device work reported", closeErr)
	}
	t.Logf("stop → Close returned: %v; Step: %v; Close: %v", closed.Sub(stop), stepErr, closeErr)
}

// A step that fails on its own (no stop) on a stuck device: Close after it
// waits CommTimeout in all, for the ranks' device work and the process
// groups' communication together.
func TestCloseAfterATimeoutOnAStuckDevice(t *testing.T) {
	const timeout = time.Second
	cfg := stuckConfig(timeout)
	tr, err := NewTrainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The step's own wait, then Close's: a timeout each, and a margin.
	limit := start.Add(2*timeout + 20*time.Second)
	_, stepErr, closeErr := stepAndClose(context.Background(), t, tr, limit)
	if !errors.Is(stepErr, ErrCommTimeout) {
		t.Errorf("Step = %v, want a communication timeout", stepErr)
	}
	if closeErr == nil || !strings.Contains(closeErr.Error(), "buffers not freed") {
		t.Errorf("Close = %v, want the ranks' unfinished device work reported", closeErr)
	}
	t.Logf("Step and Close took %v", time.Since(start))
}

// The caller stops a step while the rank's host is blocked handing work
// to a device that does not get through it (its queue full behind an
// action that does not end): no cancellation or abort reaches that call.
// Step returns a tick after the stop's CommTimeout with the rank left
// running, and Close does not wait for it again; before, the step waited
// stopGrace (at least 10 s) for it, and Close as long again.
func TestStopWhileAHostIsBlockedOnAStuckDevice(t *testing.T) {
	const timeout = time.Second
	cfg := fullQueueConfig() // a step of far more work than a queue holds
	cfg.Stages = 1
	cfg.ActionDelay = stuckDelay
	cfg.CommTimeout = timeout
	// The hosts and streams that earlier tests left blocked stay so, or
	// come free meanwhile: this trainer's are goroutines started after
	// this.
	earlier := goroutinesWith(func(string) bool { return true })
	tr, err := NewTrainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The rank's host is blocked for good once its stream holds still in
	// its first action's delay, with no room left in its queue.
	go func() {
		defer cancel()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if newGoroutine(blockedHosts(), earlier) && newGoroutine(stuckStreams(), earlier) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	limit := start.Add(2*timeout + 20*time.Second)
	closed, stepErr, closeErr := stepAndClose(ctx, t, tr, limit)
	if stepErr == nil || !strings.Contains(stepErr.Error(), "left running") || closeErr == nil || !strings.Contains(closeErr.Error(), "did not stop") {
		t.Errorf("Step = %v\nClose = %v\nwant the blocked rank left running, and said so", stepErr, closeErr)
	}
	t.Logf("Step and Close took %v", closed.Sub(start))
}

// blockedHosts returns the goroutines of ranks' hosts blocked handing
// work to their device: they wait in the cpu backend's enqueue for room
// in a full queue (not merely pass through it, as every enqueue does).
func blockedHosts() map[string]bool {
	return goroutinesWith(func(g string) bool {
		return strings.Contains(g, "pipeline.(*rankWorker).run") && strings.Contains(g, "cpu.(*stream).push") && strings.Contains(g, "sync.(*Cond).Wait")
	})
}

// stuckStreams returns the goroutines of cpu streams holding still in a
// delay.
func stuckStreams() map[string]bool {
	return goroutinesWith(func(g string) bool { return strings.Contains(g, "cpu.(*Impl).Sleep.func1(") })
}

// goroutinesWith returns the ids of the goroutines whose stacks match.
func goroutinesWith(match func(stack string) bool) map[string]bool {
	buf := make([]byte, 1<<22)
	ids := map[string]bool{}
	for _, g := range strings.Split(string(buf[:goruntime.Stack(buf, true)]), "\n\n") {
		if match(g) {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids[id] = true
		}
	}
	return ids
}

// newGoroutine reports whether now holds a goroutine before did not.
func newGoroutine(now, before map[string]bool) bool {
	for id := range now {
		if !before[id] {
			return true
		}
	}
	return false
}

// A second interrupt: the caller stops a step once every rank has queued
// it whole on a device that never gets through it, then calls StopNow.
// The queued work does not get its CommTimeout (a minute here): the step
// fails with ErrStoppedNow and Close returns moments after StopNow,
// without waiting for the device; a later step fails the same way at
// once.
func TestStopNowGivesUpQueuedWork(t *testing.T) {
	const timeout = time.Minute
	cfg := stuckConfig(timeout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var queued atomic.Int32
	var tr *Trainer
	var nowAt atomic.Int64
	fault := func(_ context.Context, rank, step, round int) error {
		if round == queuedRound && queued.Add(1) == int32(cfg.Stages) {
			cancel() // the first signal
			go func() {
				time.Sleep(50 * time.Millisecond)
				nowAt.Store(time.Now().UnixNano())
				tr.StopNow() // the second
			}()
		}
		return nil
	}
	var err error
	tr, err = newTrainer(context.Background(), cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		step, close error
		at          time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, serr := tr.Step(ctx)
		_, again := tr.Step(context.Background())
		if !errors.Is(again, ErrStoppedNow) {
			t.Errorf("a step after StopNow = %v, want ErrStoppedNow", again)
		}
		cerr := tr.Close()
		done <- result{serr, cerr, time.Now()}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(timeout / 2):
		t.Fatalf("Step and Close still running %v after the stop: StopNow did not cut the wait short", timeout/2)
	}
	if !errors.Is(r.step, ErrStoppedNow) || errors.Is(r.step, ErrCommTimeout) {
		t.Errorf("Step = %v, want ErrStoppedNow, not a communication timeout", r.step)
	}
	// Two graces (the step's, Close's for the ranks) and the process
	// groups' aborts; generous for a loaded machine, far below the
	// minute the queued work would otherwise get.
	if d := r.at.Sub(time.Unix(0, nowAt.Load())); d > 10*time.Second {
		t.Errorf("Close returned %v after StopNow", d)
	}
	if r.close == nil || !strings.Contains(r.close.Error(), "buffers not freed") {
		t.Errorf("Close = %v, want the ranks' unfinished device work reported", r.close)
	}
	t.Logf("StopNow → Close returned: %v; Step: %v", r.at.Sub(time.Unix(0, nowAt.Load())), r.step)
}
