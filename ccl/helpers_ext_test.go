package ccl_test

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noLeaks fails t if goroutines are still running once its cleanups have
// run (factories destroyed, streams synchronised and destroyed). It is
// called first in a test, so its cleanup runs last. goleak waits a little
// for goroutines that are on their way out before it reports them.
func noLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

func cpuDevs(first, n int) []runtime.Device {
	out := make([]runtime.Device, n)
	for i := range out {
		out[i] = runtime.Device{Type: runtime.CPU, Index: first + i}
	}
	return out
}

func cpuRuntime(t *testing.T) runtime.Impl {
	t.Helper()
	rt, err := runtime.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// countingImpl counts the communicators a backend creates.
type countingImpl struct {
	ccl.Impl
	initAll, initRank atomic.Int32
}

func (c *countingImpl) CommInitAll(devs []runtime.Device) ([]ccl.Comm, error) {
	c.initAll.Add(1)
	time.Sleep(5 * time.Millisecond) // widen the window for a racing second creation
	return c.Impl.CommInitAll(devs)
}

func (c *countingImpl) CommInitRank(n int, id ccl.UniqueID, rank int, dev runtime.Device) (ccl.Comm, error) {
	c.initRank.Add(1)
	return c.Impl.CommInitRank(n, id, rank, dev)
}

// newFactory returns a private factory on the local backend with timeout.
func newFactory(t *testing.T, timeout time.Duration) (*ccl.ProcessGroupFactory, *countingImpl) {
	t.Helper()
	impl := &countingImpl{Impl: local.New(local.WithTimeout(timeout))}
	return factoryOn(t, impl), impl
}

// factoryOn makes a factory over impl on the cpu runtime, destroyed (and
// its error reported) at cleanup.
func factoryOn(t *testing.T, impl ccl.Impl) *ccl.ProcessGroupFactory {
	t.Helper()
	f := ccl.NewProcessGroupFactory(impl, cpuRuntime(t))
	t.Cleanup(func() {
		if err := f.Destroy(); err != nil {
			t.Errorf("factory Destroy: %v", err)
		}
	})
	return f
}

// floats allocates a float32 buffer on dev holding vals.
func floats(t *testing.T, dev runtime.Device, vals []float32) runtime.Buffer {
	t.Helper()
	b, err := runtime.Malloc(dev, int64(4*len(vals)))
	if err != nil {
		t.Error(err)
		return runtime.Buffer{}
	}
	t.Cleanup(func() { _ = runtime.Free(b) })
	f, err := cpu.Float32s(b)
	if err != nil {
		t.Error(err)
		return b
	}
	copy(f, vals)
	return b
}

// read returns a float32 buffer's values.
func read(t *testing.T, b runtime.Buffer) []float32 {
	t.Helper()
	f, err := cpu.Float32s(b)
	if err != nil {
		t.Error(err)
		return nil
	}
	return append([]float32(nil), f...)
}

// stream makes a stream on dev, destroyed when the test ends.
func stream(t *testing.T, dev runtime.Device) *runtime.Stream {
	t.Helper()
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Synchronize(ctx); err != nil {
			t.Error(err)
		}
		_ = s.Destroy()
	})
	return s
}

// ranks runs fn for every rank index on its own goroutine and fails t
// with their errors.
func ranks(t *testing.T, n int, fn func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func float32Bytes(vals ...float32) []byte {
	out := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		out = binary.NativeEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

func bytesFloat32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:]))
	}
	return out
}

// profiled is a process group of cpu ranks with a profiler (closed at
// cleanup, its error reported), a recorder and a stream per rank.
type profiled struct {
	p       *profiler.Profiler
	pg      *ccl.ProcessGroup
	devs    []runtime.Device
	recs    []*profiler.Recorder
	streams []*runtime.Stream
}

func newProfiled(t *testing.T, name string, n int) *profiled {
	t.Helper()
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	f, _ := newFactory(t, 5*time.Second)
	x := &profiled{p: p, devs: cpuDevs(0, n), recs: make([]*profiler.Recorder, n), streams: make([]*runtime.Stream, n)}
	if x.pg, err = f.GetOrCreate(name, x.devs); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		if x.recs[r], err = p.NewRecorder(r, x.devs[r]); err != nil {
			t.Fatal(err)
		}
		x.streams[r] = stream(t, x.devs[r])
	}
	return x
}
