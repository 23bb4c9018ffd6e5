package nccl_test

import (
	"encoding/binary"
	"errors"
	"math"
	goruntime "runtime"
	"sync"
	"testing"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/nccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// gpus returns the CUDA runtime and the registered NCCL backend when this
// machine has at least n GPUs and both load; otherwise it skips, saying
// why.
func gpus(tb testing.TB, n int) (*cuda.Impl, *nccl.Backend) {
	tb.Helper()
	rt, err := runtime.Available(runtime.CUDA)
	if err != nil {
		if errors.Is(err, runtime.StatusUnavailable) {
			tb.Skipf("skipped: no CUDA GPU on this machine: %v", err)
		}
		tb.Fatal(err)
	}
	if have, _ := rt.DeviceCount(); have < n {
		tb.Skipf("skipped: needs %d GPUs, this machine has %d", n, have)
	}
	c, err := ccl.Available(runtime.CUDA)
	if err != nil {
		if errors.Is(err, ccl.StatusUnavailable) {
			tb.Skipf("skipped: NCCL not available: %v", err)
		}
		tb.Fatal(err)
	}
	return rt.(*cuda.Impl), c.(*nccl.Backend)
}

func devices(n int) []runtime.Device {
	out := make([]runtime.Device, n)
	for i := range out {
		out[i] = runtime.Device{Type: runtime.CUDA, Index: i}
	}
	return out
}

// onRanks runs fn for ranks 0…n−1 at once, each on its own goroutine
// locked to its thread, and returns their errors joined.
func onRanks(n int, fn func(rank int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			errs[r] = fn(r)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesf32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func malloc(tb testing.TB, d runtime.Device, n int64) runtime.Buffer {
	tb.Helper()
	b, err := runtime.Malloc(d, n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = runtime.Free(b) })
	return b
}

func newStream(tb testing.TB, d runtime.Device) *runtime.Stream {
	tb.Helper()
	s, err := runtime.NewStream(d)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Destroy() })
	return s
}
