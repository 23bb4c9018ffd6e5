package ccl_test

import (
	"context"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// stuckStream returns a stream of dev whose work is held until release is
// called (a kernel that does not end), and release. The stream is
// destroyed at cleanup, after release.
func stuckStream(t *testing.T, dev runtime.Device) (s *runtime.Stream, release func()) {
	t.Helper()
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	held, started := make(chan struct{}), make(chan struct{})
	if err := cpu.Enqueue(s, func() { close(started); <-held }); err != nil {
		t.Fatal(err)
	}
	<-started
	released := false
	release = func() {
		if !released {
			released = true
			close(held)
		}
	}
	t.Cleanup(func() {
		release()
		_ = s.Destroy()
	})
	return s, release
}

// destroyWithin runs destroy and fails t unless it returns within d; it
// returns destroy's error.
func destroyWithin(t *testing.T, d time.Duration, destroy func() error) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- destroy() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("DestroyContext still waiting %v after it began (its context ended long before; DestroyTimeout is %v)", time.Since(start), ccl.DestroyTimeout)
		return nil
	}
}

// TestDestroyContextEndsWithItsContext: a communication stream whose work
// waits for a compute stream that does not get there (a kernel that does
// not end: no abort reaches it) keeps DestroyContext only until its
// context ends, not DestroyTimeout (a minute); the rank is aborted, and
// the error says why. Its Work fails. The communication stream, still
// busy after the abort, is left to its work, not destroyed (CUDA's
// cudaStreamDestroy of such a stream blocked until the kernel ended).
func TestDestroyContextEndsWithItsContext(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, time.Minute)
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("stuck-compute", devs)
	if err != nil {
		t.Fatal(err)
	}
	s, release := stuckStream(t, devs[0])
	buf := floats(t, devs[0], values(0, 4))
	w, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
	if err != nil {
		t.Fatal(err)
	}
	const bound = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err = destroyWithin(t, ccl.DestroyTimeout/2, func() error { return f.DestroyContext(ctx) })
	if err == nil || !strings.Contains(err.Error(), "aborting") || !strings.Contains(err.Error(), "caller's deadline") {
		t.Errorf("DestroyContext = %v, want the abort at the caller's deadline reported", err)
	}
	if err == nil || !strings.Contains(err.Error(), "stream is left") {
		t.Errorf("DestroyContext = %v, want the busy communication stream said to be left", err)
	}
	if werr := w.Err(); werr == nil {
		t.Error("the AllReduce behind the stuck stream reports success after the abort")
	}
	if _, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum); err == nil {
		t.Error("an operation after DestroyContext was accepted")
	}
	cs := pg.Stream(devs[0])
	if cs == nil {
		t.Fatal("the group has no communication stream for its device")
	}
	if err := cs.Err(); err != nil {
		t.Errorf("the communication stream with work pending was destroyed: %v", err)
	}
	release()
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Left to its work, it ends with it, and its owner may destroy it.
	if err := cs.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := cs.Destroy(); err != nil {
		t.Errorf("destroying the stream DestroyContext left: %v", err)
	}
	// The first call decides; a second returns its result.
	if err2 := pg.Destroy(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Destroy = %v, want the first's %v", err2, err)
	}
}

// TestDestroyContextWhileAnOperationIsIssued: an operation whose host
// call is blocked handing work to a full queue holds its rank; Destroy
// waited for it without a deadline. DestroyContext aborts the rank's
// communicator when its context ends, leaves its stream to the operation,
// and returns; the operation then fails.
func TestDestroyContextWhileAnOperationIsIssued(t *testing.T) {
	noLeaks(t)
	f, _ := newFactory(t, time.Minute)
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("issuing", devs)
	if err != nil {
		t.Fatal(err)
	}
	s, release := stuckStream(t, devs[0])
	// Fill s's queue (the cpu backend's streams hold 1024 items) behind
	// its held work, so that the operation's first enqueue on s,
	// ordering it after s's work, blocks.
	for range 1024 {
		if err := cpu.Enqueue(s, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	buf := floats(t, devs[0], values(0, 4))
	issued := make(chan error, 1)
	go func() {
		_, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
		issued <- err
	}()
	// The operation holds its rank while it orders itself after s's
	// work (ProcessGroup.follow), where it blocks.
	for deadline := time.Now().Add(time.Minute); !inStack("ccl.(*ProcessGroup).follow"); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-issued:
			t.Fatalf("the AllReduce was issued on a full queue: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the AllReduce did not reach its enqueue on the full queue within a minute")
		}
	}
	const bound = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err = destroyWithin(t, ccl.DestroyTimeout/2, func() error { return pg.DestroyContext(ctx) })
	if err == nil || !strings.Contains(err.Error(), "had not returned") || !strings.Contains(err.Error(), "caller's deadline") {
		t.Errorf("DestroyContext = %v, want the operation being issued named and the rank aborted", err)
	}
	release()
	select {
	case err := <-issued:
		if err == nil {
			t.Error("the AllReduce issued on the aborted communicator succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the AllReduce did not return once its queue drained")
	}
	// Its stream was left to it: once it has returned, nothing holds
	// the stream but its owner.
	if cs := pg.Stream(devs[0]); cs != nil {
		if err := cs.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := cs.Destroy(); err != nil {
			t.Errorf("destroying the stream DestroyContext left: %v", err)
		}
	}
}

// inStack reports whether a goroutine's stack holds fn.
func inStack(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:goruntime.Stack(buf, true)]), fn)
}
