package cuda_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// gpu returns the registered CUDA backend, initialised, or skips the test
// saying why there is none.
func gpu(tb testing.TB) *cuda.Impl {
	tb.Helper()
	impl, err := runtime.Available(runtime.CUDA)
	if err != nil {
		if errors.Is(err, runtime.StatusUnavailable) {
			tb.Skipf("skipped: no CUDA GPU on this machine: %v", err)
		}
		tb.Fatalf("CUDA backend present but failing: %v", err)
	}
	return impl.(*cuda.Impl)
}

func dev(i int) runtime.Device { return runtime.Device{Type: runtime.CUDA, Index: i} }

func newStream(tb testing.TB, d runtime.Device, opts ...runtime.StreamOption) *runtime.Stream {
	tb.Helper()
	s, err := runtime.NewStream(d, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Destroy() })
	return s
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

// upload copies v to a new buffer on d.
func upload(tb testing.TB, d runtime.Device, v []float32) runtime.Buffer {
	tb.Helper()
	b := malloc(tb, d, int64(4*len(v)))
	if err := runtime.CopyToDevice(b, f32bytes(v), nil); err != nil {
		tb.Fatal(err)
	}
	return b
}

// download reads n float32s of b after s has finished.
func download(tb testing.TB, s *runtime.Stream, b runtime.Buffer, n int) []float32 {
	tb.Helper()
	if err := s.Synchronize(context.Background()); err != nil {
		tb.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := runtime.CopyToHost(out, b, nil); err != nil {
		tb.Fatal(err)
	}
	return bytesf32(out)
}

// ulps is the distance between two float32s in units in the last place.
func ulps(a, b float32) float64 {
	if a == b {
		return 0
	}
	if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
		return math.Inf(1)
	}
	ord := func(x float32) int64 {
		i := int64(int32(math.Float32bits(x)))
		if i < 0 {
			i = math.MinInt32 - i
		}
		return i
	}
	return math.Abs(float64(ord(a) - ord(b)))
}
