package nccl

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// onDeviceRuntime runs OnDevice's fn on the calling thread; nothing else
// of the runtime is used.
type onDeviceRuntime struct{ runtime.Impl }

func (onDeviceRuntime) OnDevice(_ int, fn func()) error { fn(); return nil }

// TestAbortedCommFailsCallsWhileAGroupHoldsIt: in blocking mode, CommAbort
// frees a communicator that an open group still holds (its goroutine has
// not reached GroupEnd); a call made on it afterwards, on another
// goroutine, fails at once with the abort. It used to wait, without a
// deadline, behind the write lock that CommAbort's clean-up queued until
// that group ended.
func TestAbortedCommFailsCallsWhileAGroupHoldsIt(t *testing.T) {
	_, a := stubAPI(t)
	b := New(WithBlockingOps(true), WithTimeout(10*time.Second))
	b.api, b.rt = a, onDeviceRuntime{}
	b.loaded.Store(true)
	c := &comm{b: b, rank: 0, size: 2, dev: runtime.Device{Type: runtime.CUDA}, h: 0x5eed}
	allReduce := func() error { return b.issue(&call{op: "AllReduce", c: c, fn: a.allReduce}) }

	issued, end, ended := make(chan error), make(chan struct{}), make(chan error)
	var endOnce sync.Once
	endGroup := func() { endOnce.Do(func() { close(end) }) }
	go func() {
		if err := b.GroupStart(); err != nil {
			issued <- err
			return
		}
		issued <- allReduce() // the group holds c until its GroupEnd
		<-end
		ended <- b.GroupEnd()
	}()
	if err := <-issued; err != nil {
		t.Fatal(err)
	}
	if err := b.CommAbort(c); err != nil {
		t.Fatalf("CommAbort: %v", err)
	}
	// Give CommAbort's clean-up time to queue for the write lock, if it
	// does: then c can no longer be read-locked.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !c.mu.TryRLock() {
			break
		}
		c.mu.RUnlock()
	}
	called := make(chan error, 1)
	go func() { called <- allReduce() }()
	select {
	case err := <-called:
		if !errors.Is(err, ccl.StatusError) {
			t.Errorf("AllReduce on the aborted communicator = %v, want an error wrapping StatusError", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("AllReduce on the aborted communicator still waiting after 5s, for a group that has not ended")
		endGroup()
		<-called
	}
	endGroup()
	if err := <-ended; err != nil {
		t.Errorf("GroupEnd: %v", err)
	}
}
