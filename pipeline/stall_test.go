package pipeline

import (
	"context"
	"errors"
	"math"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// fullQueueConfig is a 2-stage 1F1B run whose last stage hands its device
// far more work in a step than a stream queues (the CPU backend's streams
// hold 1024 items, a GPU's launch queue about as many): 256 microbatches
// of a 4-layer chunk, some 25 items each. When the first stage sends
// nothing, the last stage's stream stops at the wait for the first
// microbatch and its host, still enqueueing, blocks on the full queue.
func fullQueueConfig() Config {
	cfg := smallConfig(2, 1, 1, Schedule1F1B)
	cfg.Width, cfg.MicrobatchSize, cfg.Microbatches, cfg.Layers = 4, 1, 256, 8
	cfg.Steps = 1
	cfg.CommTimeout = 300 * time.Millisecond
	return cfg
}

// stallRank0 stalls rank 0 before its first action until the run gives
// up: it neither fails nor sends.
func stallRank0(ctx context.Context, rank, step, round int) error {
	if rank == 0 && step == 0 && round == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// checkStallError checks that err is a CommTimeoutError of cfg's timeout
// naming rank 1, the rank left waiting.
func checkStallError(t *testing.T, cfg Config, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Train succeeded with a stalled rank")
	}
	var te *CommTimeoutError
	if !errors.As(err, &te) || te.Timeout != cfg.CommTimeout {
		t.Fatalf("error %q is not a CommTimeoutError of %v", err, cfg.CommTimeout)
	}
	if !strings.Contains(err.Error(), "rank 1 (replica 0, stage 1)") {
		t.Errorf("error %q does not name the waiting rank 1", err)
	}
}

// A stalled peer fails the run after CommTimeout even where the waiting
// rank's host is held up enqueueing behind the missing transfer, rather
// than after the in-process backend's own default timeout (60 s), with an
// error that is not a CommTimeoutError.
func TestStalledPeerWithFullQueue(t *testing.T) {
	before := goruntime.NumGoroutine()
	cfg := fullQueueConfig()
	_, err := train(context.Background(), cfg, stallRank0)
	checkStallError(t, cfg, err)
	waitGoroutines(t, before)
}

// The in-process collectives of ranks on CPU devices of their own wait
// CommTimeout, shorter or longer than ccl/local's default.
func TestInProcessCollectivesWaitCommTimeout(t *testing.T) {
	for _, d := range []time.Duration{300 * time.Millisecond, 90 * time.Second} {
		cfg := smallConfig(2, 1, 2, Schedule1F1B)
		cfg.CommTimeout = d
		tr, err := NewTrainer(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Placement().Shared {
			t.Fatalf("placement %v: want ranks on devices of their own", tr.Placement())
		}
		lb, ok := tr.impl.(*local.Backend)
		if !ok || lb.Timeout() != d {
			t.Errorf("CommTimeout %v: collectives %T with timeout %v", d, tr.impl, timeoutOf(tr.impl))
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func timeoutOf(impl ccl.Impl) any {
	if lb, ok := impl.(*local.Backend); ok {
		return lb.Timeout()
	}
	return "unknown"
}

// Where the backend's own waits outlast CommTimeout (NCCL's device-side
// waits have no deadline; here ccl/local with its 60 s default), a rank
// whose host blocks on a full queue behind a transfer that does not come
// cannot see a deadline of its own: the trainer's watchdog fails the step
// after CommTimeout, naming that rank, and the abort that follows frees
// it, so that nothing is left running.
func TestWatchdogFreesARankBlockedOnItsQueue(t *testing.T) {
	before := goruntime.NumGoroutine()
	cfg := fullQueueConfig()
	tr, err := newTrainerHooks(context.Background(), cfg, hooks{fault: stallRank0, ccl: local.New()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Step(context.Background())
	checkStallError(t, cfg, err)
	if !errors.Is(err, errStuck) {
		t.Errorf("error %q is not the watchdog's", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("Close after the watchdog's abort: %v", err)
	}
	waitGoroutines(t, before)
}

// The watchdog fails a rank that has made no call on its compute stream
// for the timeout, not one whose calls of one round take longer than
// that in all: a host that waits at each launch for a slow device to free
// a slot in its queue progresses. Each watchdog tick below sees one new
// call, in a round entered four timeouts before.
func TestWatchdogSparesARankThatProgresses(t *testing.T) {
	s, err := runtime.NewStream(runtime.Device{Type: runtime.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Destroy() }()
	const timeout = 50 * time.Millisecond
	r := &rank{compute: s}
	tr := &Trainer{ranks: []*rankWorker{{r: r}}}
	if err := tr.stuck(timeout); err != nil {
		t.Fatalf("a rank outside its calls: %v", err)
	}
	r.busy.Store(busyNow() - int64(4*timeout))
	for i := range 3 {
		s.MarkEnqueued()
		if err := tr.stuck(timeout); err != nil {
			t.Fatalf("tick %d, after a new call: %v", i, err)
		}
		time.Sleep(timeout / 2)
	}
	// No call since the last tick, and a timeout has passed since it.
	time.Sleep(timeout)
	err = tr.stuck(timeout)
	if !errors.Is(err, errStuck) {
		t.Fatalf("a rank with no new call for %v: %v, want the watchdog's error", timeout, err)
	}
	// A rank that entered a timeout ago and made no call is stuck at the
	// first tick that sees it.
	r.leave()
	if err := tr.stuck(timeout); err != nil {
		t.Fatalf("after leave: %v", err)
	}
	r.busy.Store(busyNow() - int64(2*timeout))
	if err := tr.stuck(timeout); !errors.Is(err, errStuck) {
		t.Fatalf("a rank in one call for %v: %v, want the watchdog's error", 2*timeout, err)
	}
}

// Steps may be any positive int, a run until the context ends: nothing
// is allocated for steps not run.
func TestTrainHugeSteps(t *testing.T) {
	cfg := smallConfig(1, 1, 1, Schedule1F1B)
	cfg.Steps = math.MaxInt
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := train(ctx, cfg, func(_ context.Context, _, step, _ int) error {
		if step == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "step 2") {
		t.Fatalf("Train = %v, want step 2 cancelled", err)
	}
}

// A profiler that synchronises each device range (profile-run -profile
// sync) waits on the rank's stream with no deadline of its own: where
// that stream stops at a transfer whose sender stalled, and the
// backend's waits outlast CommTimeout (as NCCL's do), the watchdog still
// fails the step after CommTimeout and its abort frees the waiting rank,
// and the ranges recorded so far survive.
func TestWatchdogFreesARankSynchronisingEachRange(t *testing.T) {
	before := goruntime.NumGoroutine()
	p, err := profiler.New(profiler.WithSyncEachRange())
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig(2, 1, 1, Schedule1F1B)
	cfg.Steps = 1
	cfg.CommTimeout = 300 * time.Millisecond
	cfg.Profiler = p
	tr, err := newTrainerHooks(context.Background(), cfg, hooks{fault: stallRank0, ccl: local.New()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tr.Step(context.Background())
	checkStallError(t, cfg, err)
	if !errors.Is(err, errStuck) {
		t.Errorf("error %q is not the watchdog's", err)
	}
	// ccl/local's own wait is 60 s: a step that ended well before it
	// was ended by the watchdog.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the step failed after %v", d)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("Close after the watchdog's abort: %v", err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	cut := 0
	for _, r := range p.Snapshot() {
		if r.Depth == 0 && r.Name == profiler.StepName && r.CutShort {
			cut++
		}
	}
	if cut != 2 {
		t.Errorf("%d step ranges cut short, want one per rank (2)", cut)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("profiler Close: %v", err)
	}
	waitGoroutines(t, before)
}
