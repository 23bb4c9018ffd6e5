package local_test

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noLeaks fails t if goroutines are still running once its cleanups have
// run (streams destroyed, ranks returned). It is called first in a test,
// so its cleanup runs last. goleak waits a little for goroutines that are
// on their way out before it reports them.
func noLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// group is n ranks of one communicator, each with a stream on its own
// cpu device.
type group struct {
	t       *testing.T
	b       *local.Backend
	comms   []ccl.Comm
	streams []*runtime.Stream
}

func devices(first, n int) []runtime.Device {
	out := make([]runtime.Device, n)
	for i := range out {
		out[i] = runtime.Device{Type: runtime.CPU, Index: first + i}
	}
	return out
}

func newGroup(t *testing.T, b *local.Backend, n int) *group {
	t.Helper()
	comms, err := b.CommInitAll(devices(0, n))
	if err != nil {
		t.Fatalf("CommInitAll(%d): %v", n, err)
	}
	return withComms(t, b, comms)
}

func withComms(t *testing.T, b *local.Backend, comms []ccl.Comm) *group {
	t.Helper()
	g := &group{t: t, b: b, comms: comms}
	for _, c := range comms {
		s, err := runtime.NewStream(c.Device())
		if err != nil {
			t.Fatal(err)
		}
		g.streams = append(g.streams, s)
	}
	t.Cleanup(func() {
		for i, s := range g.streams {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.Synchronize(ctx); err != nil {
				t.Errorf("rank %d stream: %v", i, err)
			}
			cancel()
			if err := s.Destroy(); err != nil {
				t.Error(err)
			}
		}
		for _, c := range comms {
			_ = b.CommDestroy(c)
		}
	})
	return g
}

// each runs fn for every rank on its own goroutine and fails the test with
// the ranks' errors.
func (g *group) each(fn func(r int) error) {
	g.t.Helper()
	errs := make([]error, len(g.comms))
	var wg sync.WaitGroup
	for r := range g.comms {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			g.t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// sync waits for rank r's stream, bounded.
func (g *group) sync(r int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return g.streams[r].Synchronize(ctx)
}

// alloc allocates a buffer on dev holding the image of vals.
func alloc(t *testing.T, dev runtime.Device, dt runtime.DataType, vals []float64) runtime.Buffer {
	t.Helper()
	b, err := runtime.Malloc(dev, int64(len(vals)*dt.Size()))
	if err != nil {
		t.Error(err) // Error, not Fatal: ranks call alloc on their own goroutines
		return runtime.Buffer{}
	}
	t.Cleanup(func() { _ = runtime.Free(b) })
	mem, err := cpu.Bytes(b)
	if err != nil {
		t.Error(err)
		return b
	}
	encode(dt, mem, vals)
	return b
}

// encode writes vals as dt elements into mem, in native byte order.
func encode(dt runtime.DataType, mem []byte, vals []float64) {
	for i, v := range vals {
		switch dt {
		case runtime.Float32:
			binary.NativeEndian.PutUint32(mem[4*i:], math.Float32bits(float32(v)))
		case runtime.Float64:
			binary.NativeEndian.PutUint64(mem[8*i:], math.Float64bits(v))
		case runtime.Int32:
			binary.NativeEndian.PutUint32(mem[4*i:], uint32(int32(v)))
		case runtime.Int64:
			binary.NativeEndian.PutUint64(mem[8*i:], uint64(int64(v)))
		case runtime.Uint8, runtime.Int8:
			mem[i] = byte(int8(v))
		case runtime.Float16, runtime.BFloat16:
			binary.NativeEndian.PutUint16(mem[2*i:], uint16(v))
		default:
			panic(dt)
		}
	}
}

// decode reads a buffer's dt elements.
func decode(t *testing.T, dt runtime.DataType, b runtime.Buffer) []float64 {
	t.Helper()
	mem, err := cpu.Bytes(b)
	if err != nil {
		t.Error(err)
		return nil
	}
	out := make([]float64, len(mem)/dt.Size())
	for i := range out {
		switch dt {
		case runtime.Float32:
			out[i] = float64(math.Float32frombits(binary.NativeEndian.Uint32(mem[4*i:])))
		case runtime.Float64:
			out[i] = math.Float64frombits(binary.NativeEndian.Uint64(mem[8*i:]))
		case runtime.Int32:
			out[i] = float64(int32(binary.NativeEndian.Uint32(mem[4*i:])))
		case runtime.Int64:
			out[i] = float64(int64(binary.NativeEndian.Uint64(mem[8*i:])))
		case runtime.Uint8, runtime.Int8:
			out[i] = float64(int8(mem[i]))
		case runtime.Float16, runtime.BFloat16:
			out[i] = float64(binary.NativeEndian.Uint16(mem[2*i:]))
		default:
			panic(dt)
		}
	}
	return out
}

// same reports whether got matches want closely enough for dt.
func same(dt runtime.DataType, got, want float64) bool {
	switch dt {
	case runtime.Float32:
		return math.Abs(got-want) <= 1e-5*math.Max(1, math.Abs(want))
	case runtime.Float64:
		return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
	}
	return got == want
}

func checkValues(t *testing.T, what string, dt runtime.DataType, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !same(dt, got[i], want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}
