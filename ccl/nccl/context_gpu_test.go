package nccl_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// primaryContextActive asks the driver whether GPU index has its primary
// context; a process using only other GPUs should make none.
func primaryContextActive(t *testing.T, rt *cuda.Impl, index int) bool {
	t.Helper()
	active, err := rt.PrimaryContextActive(index)
	if err != nil {
		t.Fatalf("PrimaryContextActive(%d): %v", index, err)
	}
	return active
}

// onFreshThread runs fn on a goroutine locked to an OS thread that it
// then gives up (a goroutine that exits locked ends its thread), so that
// no CUDA context is current on the thread beforehand or kept afterwards.
func onFreshThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		done <- fn()
	}()
	return <-done
}

// TestNoContextOnGPU0: communicators, operations, streams, events and
// pinned host memory on GPU 1, used from threads that had no context,
// leave GPU 0 without a context. Setting the thread's "previous" device back made one there (a
// thread without a context reports device 0), as NCCL's finalize, destroy
// and abort do on the calling thread. It needs a process in which nothing
// has touched GPU 0, so it runs alone:
//
//	nccl.test -test.run '^TestNoContextOnGPU0$'
func TestNoContextOnGPU0(t *testing.T) {
	rt, b := gpus(t, 2)
	if primaryContextActive(t, rt, 0) {
		t.Skip("skipped: GPU 0 has a context already; run this test alone in a fresh process (-test.run '^TestNoContextOnGPU0$')")
	}
	dev := runtime.Device{Type: runtime.CUDA, Index: 1}
	step := func(name string, fn func() error) {
		t.Helper()
		if t.Failed() {
			return // GPU 0 has a context now: later steps would prove nothing
		}
		if err := onFreshThread(fn); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if primaryContextActive(t, rt, 0) {
			t.Errorf("%s on %s made a context on GPU 0", name, dev)
		}
	}
	newComm := func() (ccl.Comm, error) {
		id, err := b.GetUniqueID()
		if err != nil {
			return nil, err
		}
		return b.CommInitRank(1, id, 0, dev)
	}
	var comm ccl.Comm
	step("ncclCommInitRank", func() (err error) { comm, err = newComm(); return err })
	var s *runtime.Stream
	step("a stream", func() (err error) { s, err = runtime.NewStreamWith(rt, dev); return err })
	var buf runtime.Buffer
	step("cudaMalloc", func() (err error) { buf, err = runtime.Malloc(dev, 1<<20); return err })
	step("an all-reduce", func() error {
		if err := b.AllReduce(buf, buf, 1<<18, runtime.Float32, ccl.Sum, comm, s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return s.Synchronize(ctx)
	})
	step("events recorded, queried and timed", func() error {
		start, err := runtime.NewEventWith(rt, dev, 0)
		if err != nil {
			return err
		}
		end, err := runtime.NewEventWith(rt, dev, 0)
		if err != nil {
			return err
		}
		if err := start.Record(s); err != nil {
			return err
		}
		if err := end.Record(s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := end.Synchronize(ctx); err != nil {
			return err
		}
		if _, err := runtime.Elapsed(start, end); err != nil {
			return err
		}
		return errors.Join(start.Destroy(), end.Destroy())
	})
	step("ncclCommFinalize and ncclCommDestroy", func() error { return b.CommDestroy(comm) })
	step("ncclCommAbort", func() error {
		c, err := newComm()
		if err != nil {
			return err
		}
		return b.CommAbort(c)
	})
	step("pinned host memory allocated and freed", func() error {
		b, free, err := runtime.HostAlloc(runtime.CUDA, 1<<20)
		if err != nil {
			return err
		}
		if err := runtime.CopyToHost(b, buf, s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Synchronize(ctx); err != nil {
			return err
		}
		return free()
	})
	step("cudaFree and the stream's destroy", func() error { return errors.Join(runtime.Free(buf), s.Destroy()) })
}
