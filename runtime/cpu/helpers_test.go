package cpu_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// registered returns the process-wide cpu backend, which runtime.Malloc and
// runtime.NewStream use.
func registered(t testing.TB) *cpu.Impl {
	t.Helper()
	impl, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := impl.(*cpu.Impl)
	if !ok {
		t.Fatalf("registered cpu backend is %T", impl)
	}
	return c
}

var dev0 = runtime.Device{Type: runtime.CPU, Index: 0}

// newStream makes a stream on dev through the registry and destroys it
// when the test ends.
func newStream(t testing.TB, dev runtime.Device) *runtime.Stream {
	t.Helper()
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	return s
}

func newEvent(t testing.TB, dev runtime.Device, flags runtime.EventFlag) *runtime.Event {
	t.Helper()
	e, err := runtime.NewEvent(dev, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Destroy() })
	return e
}

// malloc allocates size bytes on dev and frees them when the test ends.
func malloc(t testing.TB, dev runtime.Device, size int64) runtime.Buffer {
	t.Helper()
	b, err := runtime.Malloc(dev, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Free(b) })
	return b
}

// block enqueues work that holds s until the returned function is called
// (the test calls it at the latest when it ends).
func block(t testing.TB, s *runtime.Stream) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			close(gate)
		}
	}
	t.Cleanup(release)
	return release
}

// wantStatus fails the test unless err wraps st (nil for StatusSuccess).
func wantStatus(t testing.TB, err error, st runtime.Status) {
	t.Helper()
	if st == runtime.StatusSuccess {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		return
	}
	if !errors.Is(err, st) {
		t.Fatalf("got error %v, want one wrapping %s", err, st)
	}
}

// uploadF32 copies v into b synchronously.
func uploadF32(t testing.TB, b runtime.Buffer, v []float32) {
	t.Helper()
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	if err := runtime.CopyToDevice(b, raw, nil); err != nil {
		t.Fatal(err)
	}
}

// downloadF32 copies n float32s out of b synchronously.
func downloadF32(t testing.TB, b runtime.Buffer, n int) []float32 {
	t.Helper()
	raw := make([]byte, 4*n)
	if err := runtime.CopyToHost(raw, b, nil); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}
