package pipeline

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
)

// waitGoroutines waits for the goroutine count to fall back to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for goruntime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before the run:\n%s", goruntime.NumGoroutine(), n, buf[:goruntime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rank that fails in the middle of a step, while its peers wait for its
// data, fails the run at once with its own error; nothing is left running.
func TestTrainRankFailure(t *testing.T) {
	before := goruntime.NumGoroutine()
	boom := errors.New("injected failure")
	cfg := smallConfig(2, 2, 2, Schedule1F1B)
	cfg.CommTimeout = time.Minute // the failure must not wait for it
	fault := func(_ context.Context, rank, step, round int) error {
		if rank == 3 && step == 1 && round == 5 {
			return boom
		}
		return nil
	}
	start := time.Now()
	res, err := train(context.Background(), cfg, fault)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Train took %v to report a failure", took)
	}
	if res != nil || !errors.Is(err, boom) {
		t.Fatalf("Train = %v, %v; want the injected failure", res, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "rank 3 (replica 1, stage 1)") || !strings.Contains(msg, "step 1") {
		t.Errorf("error %q does not name rank 3 and step 1", msg)
	}
	waitGoroutines(t, before)
}

// A rank that stops without failing leaves its peers waiting; they give up
// after CommTimeout and the run fails with a timeout naming a rank.
func TestTrainCommTimeout(t *testing.T) {
	before := goruntime.NumGoroutine()
	cfg := smallConfig(2, 1, 1, Schedule1F1B)
	cfg.CommTimeout = 300 * time.Millisecond
	fault := func(ctx context.Context, rank, step, round int) error {
		if rank == 0 && step == 0 && round == 2 {
			<-ctx.Done() // stall until the run gives up
			return ctx.Err()
		}
		return nil
	}
	start := time.Now()
	_, err := train(context.Background(), cfg, fault)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Train succeeded with a stalled rank")
	}
	if !strings.Contains(err.Error(), "rank 1 (replica 0, stage 0)") && !strings.Contains(err.Error(), "rank 1 (replica 0, stage 1)") {
		t.Errorf("error %q does not name the waiting rank 1", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("error %q is the stalled rank's cancellation, not the timeout", err)
	}
	// The error says which deadline expired, for a caller to name it.
	var te *CommTimeoutError
	if !errors.Is(err, ErrCommTimeout) || !errors.As(err, &te) || te.Timeout != 300*time.Millisecond {
		t.Errorf("error %q is not a CommTimeoutError of 300ms (%+v)", err, te)
	}
	if !strings.Contains(err.Error(), "after the communication timeout (300ms)") {
		t.Errorf("error %q does not say the communication timeout expired", err)
	}
	if took < cfg.CommTimeout || took > cfg.CommTimeout+10*time.Second {
		t.Errorf("Train failed after %v with CommTimeout %v", took, cfg.CommTimeout)
	}
	t.Log(err)
	waitGoroutines(t, before)
}

// Cancelling the caller's context stops a run.
func TestTrainCancel(t *testing.T) {
	before := goruntime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := smallConfig(2, 2, 1, Schedule1F1B)
	fault := func(_ context.Context, rank, step, round int) error {
		if rank == 1 && step == 2 && round == 0 {
			cancel()
		}
		return nil
	}
	_, err := train(ctx, cfg, fault)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Train = %v, want context.Canceled", err)
	}
	waitGoroutines(t, before)
}

// An invalid configuration fails before anything starts; a closed Trainer
// refuses steps and closes again quietly.
func TestTrainerLifecycle(t *testing.T) {
	bad := smallConfig(2, 2, 1, Schedule1F1B)
	bad.Layers = 6
	if _, err := Train(context.Background(), bad); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Train with 6 layers over 4 virtual stages = %v, want ErrInvalidConfig", err)
	}
	tr, err := NewTrainer(context.Background(), smallConfig(2, 1, 1, ScheduleGPipe))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Config().Stages; got != 2 {
		t.Errorf("Config().Stages = %d", got)
	}
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := tr.Step(context.Background()); err == nil {
		t.Error("Step after Close succeeded")
	}
}

// The step a failure cuts short is recorded, marked Record.CutShort on
// every rank that had begun it, and the steps before it are not.
func TestFailedStepIsCutShort(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	boom := errors.New("injected failure")
	cfg := smallConfig(2, 2, 2, Schedule1F1B)
	cfg.Steps = 3
	cfg.Profiler = p
	fault := func(_ context.Context, rank, step, round int) error {
		if rank == 3 && step == 1 && round == 5 {
			return boom
		}
		return nil
	}
	if _, err := train(context.Background(), cfg, fault); !errors.Is(err, boom) {
		t.Fatalf("Train: %v; want the injected failure", err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	ranks := cfg.Stages * cfg.Replicas
	cut, whole := map[int]int{}, map[int]int{}
	for _, r := range p.Snapshot() {
		if r.Depth != 0 || r.Name != profiler.StepName {
			continue
		}
		if r.CutShort {
			cut[int(r.Step)]++
		} else {
			whole[int(r.Step)]++
		}
	}
	if whole[0] != ranks || cut[0] != 0 {
		t.Errorf("step 0: %d whole step ranges, %d cut short; want %d and 0", whole[0], cut[0], ranks)
	}
	if cut[1] != ranks || whole[1] != 0 {
		t.Errorf("step 1: %d cut short, %d whole; want %d and 0", cut[1], whole[1], ranks)
	}
	if cut[2]+whole[2] != 0 {
		t.Errorf("step 2 has step ranges: it never began")
	}
}

// Only a wait that the communication timeout ended is called one: not one
// that the caller's context ended, not a failure, and a collective's
// timeout only where the collectives are the shared backend's, whose
// timeout is CommTimeout.
func TestCommTimeoutWrapping(t *testing.T) {
	failed := errors.New("device lost")
	parent := context.Background()
	expired, cancel := context.WithTimeout(parent, time.Nanosecond)
	defer cancel()
	<-expired.Done()
	if err := timedOut(failed, parent, expired, time.Second); !errors.Is(err, ErrCommTimeout) || !errors.Is(err, failed) {
		t.Errorf("a wait cut short by its deadline: %v", err)
	}
	live, cancelLive := context.WithTimeout(parent, time.Hour)
	defer cancelLive()
	if err := timedOut(failed, parent, live, time.Hour); err != failed {
		t.Errorf("a failure before the deadline: %v, want it unchanged", err)
	}
	stopped, stop := context.WithCancel(parent)
	stop()
	under, cancelUnder := context.WithTimeout(stopped, time.Hour)
	defer cancelUnder()
	if err := timedOut(failed, stopped, under, time.Hour); err != failed {
		t.Errorf("a wait the caller stopped: %v, want it unchanged", err)
	}
	if err := timedOut(nil, parent, expired, time.Second); err != nil {
		t.Errorf("no error: %v", err)
	}

	cfg := Config{CommTimeout: 7 * time.Millisecond}
	collective := ccl.Errorf(ccl.OpRecv, ccl.StatusTimeout, "nothing within 7ms")
	err := sharedTimeout(true, cfg, collective)
	var te *CommTimeoutError
	if !errors.As(err, &te) || te.Timeout != 7*time.Millisecond || !errors.Is(err, ccl.StatusTimeout) {
		t.Errorf("a shared collective's timeout: %v", err)
	}
	if again := sharedTimeout(true, cfg, err); again != err {
		t.Errorf("wrapped twice: %v", again)
	}
	if err := sharedTimeout(false, cfg, collective); errors.Is(err, ErrCommTimeout) {
		t.Errorf("another backend's timeout taken for CommTimeout: %v", err)
	}
	if err := sharedTimeout(true, cfg, failed); errors.Is(err, ErrCommTimeout) {
		t.Errorf("a failure taken for a timeout: %v", err)
	}
	ended := &ccl.Error{Op: ccl.OpRecv, Status: ccl.StatusTimeout, Detail: "the caller's context ended", Err: context.DeadlineExceeded}
	if err := sharedTimeout(true, cfg, ended); errors.Is(err, ErrCommTimeout) {
		t.Errorf("a context's deadline taken for CommTimeout: %v", err)
	}
}

// A caller's deadline that ends the setup is not called the communication
// timeout, whether the ranks have devices of their own or share them.
func TestSetupDeadlineIsNotCommTimeout(t *testing.T) {
	before := goruntime.NumGoroutine()
	for _, devices := range []int{0, 1} {
		cfg := withDevices(smallConfig(2, 1, 2, Schedule1F1B), devices)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		_, err := NewTrainer(ctx, cfg)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Devices=%d: NewTrainer with an expired context = %v, want its deadline", devices, err)
		}
		if errors.Is(err, ErrCommTimeout) {
			t.Errorf("Devices=%d: the caller's deadline is called the communication timeout (%v): %v", devices, cfg.CommTimeout, err)
		}
	}
	waitGoroutines(t, before)
}

// Cancelling the caller's context once every rank has enqueued the whole
// step lets that step finish — its queued work completes — with the loss
// of an uncancelled run; the next step is refused.
func TestCancelAfterTheStepIsQueued(t *testing.T) {
	before := goruntime.NumGoroutine()
	cfg := smallConfig(2, 2, 2, Schedule1F1B)
	cfg.Steps = 2
	want, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var queued atomic.Int32
	ranks := int32(cfg.Stages * cfg.Replicas)
	tr, err := newTrainer(context.Background(), cfg, func(_ context.Context, _, step, round int) error {
		if step == 1 && round == queuedRound && queued.Add(1) == ranks {
			cancel() // every rank has enqueued all of step 1
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for step := range 2 {
		sr, err := tr.Step(ctx)
		if err != nil {
			t.Fatalf("step %d: %v; want it to finish: its work was all queued when the context ended", step, err)
		}
		if sr.Loss != want.Losses[step] {
			t.Errorf("step %d: loss %v, want %v as uncancelled", step, sr.Loss, want.Losses[step])
		}
	}
	if ctx.Err() == nil {
		t.Fatal("the context was never cancelled: the hook after the last round did not run")
	}
	if _, err := tr.Step(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("the step after the cancellation: %v, want context.Canceled", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, before)
}

// A rank that the abort does not reach (a backend call that ignores it,
// as a wedged device's can) held a failed step, and Close, for ever. The
// step now gives the ranks stopGrace after the first failure, then fails
// saying how many are left running; Close waits for such a rank as long,
// then names it.
func TestFailedStepDoesNotWaitForAWedgedRank(t *testing.T) {
	defer func(d time.Duration) { stopGraceMin = d }(stopGraceMin)
	stopGraceMin = 200 * time.Millisecond
	boom := errors.New("injected failure")
	wedged := make(chan struct{})
	cfg := smallConfig(2, 1, 1, Schedule1F1B)
	cfg.CommTimeout = 50 * time.Millisecond // stopGrace: 200 ms
	inWedge := make(chan struct{})
	fault := func(_ context.Context, rank, step, round int) error {
		switch {
		case rank == 1 && round == 0:
			close(inWedge)
			<-wedged // ignores its context and the abort
		case rank == 0 && round == 1:
			<-inWedge // fails once rank 1 is wedged
			return boom
		}
		return nil
	}
	tr, err := newTrainer(context.Background(), cfg, fault)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.Step(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "1 of the 2 ranks did not stop") {
			t.Errorf("Step = %v; want the injected failure, saying one rank did not stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Step waited for a rank the abort did not reach")
	}
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "rank 1 did not stop") {
			t.Errorf("Close = %v; want an error naming rank 1", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for a rank the abort did not reach")
	}
	// Let the wedged rank go, and wait for it to free its buffers: the
	// tests after this one measure the devices' memory.
	close(wedged)
	select {
	case <-tr.ranks[1].done:
	case <-time.After(30 * time.Second):
		t.Fatal("the wedged rank did not end once let go")
	}
}
