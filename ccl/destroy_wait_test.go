package ccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestWorkAnswersWhileCommDestroyed: Done, Err and Wait keep their own
// deadlines while Destroy is inside the backend's CommDestroy. A Work
// whose operation has completed is done; they used to wait for the
// communicator's destruction to end.
func TestWorkAnswersWhileCommDestroyed(t *testing.T) {
	noLeaks(t)
	impl := &slowDestroyImpl{Impl: local.New(local.WithTimeout(5 * time.Second)), entered: make(chan struct{}), proceed: make(chan struct{})}
	f := ccl.NewProcessGroupFactory(impl, cpuRuntime(t))
	devs := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("slow-destroy", devs)
	if err != nil {
		t.Fatal(err)
	}
	buf := floats(t, devs[0], values(0, 4))
	// slowDestroyImpl's CommDestroy waits, as NCCL's finalize does for
	// a peer that never reaches quiescence (up to the backend's timeout).
	// One rank: the AllReduce completes by itself; nobody has asked yet.
	w, err := pg.AllReduce(context.Background(), pg.Stream(devs[0]), buf, runtime.Float32, ccl.Sum)
	if err != nil {
		t.Fatal(err)
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- pg.Destroy() }()
	<-impl.entered // Destroy has synchronised the stream and is freeing the communicator

	answered := make(chan error, 1)
	go func() {
		if !w.Done() {
			t.Error("Done = false for a completed operation")
		}
		if err := w.Err(); err != nil {
			t.Errorf("Err = %v for a completed operation", err)
		}
		answered <- w.Wait(100 * time.Millisecond)
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Errorf("Wait(100ms) = %v, want nil: the operation completed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Done, Err and Wait(100ms) still waiting after 5s: they wait for CommDestroy")
		close(impl.proceed)
		<-answered
		impl.proceed = nil
	}
	if impl.proceed != nil {
		close(impl.proceed)
	}
	if err := <-destroyed; err != nil {
		t.Errorf("Destroy: %v", err)
	}
}
