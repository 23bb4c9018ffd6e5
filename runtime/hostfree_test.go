package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// An Elems view that runs past the buffer is reported by Elems, in
// elements, not by the Slice it is built on, in bytes.
func TestElemsOutOfRangeNamesElems(t *testing.T) {
	b, err := runtime.Malloc(runtime.Device{Type: runtime.CPU}, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer runtime.Free(b)
	for _, c := range [][2]int{{3, 2}, {4, 1}, {1, 4}} {
		_, err := b.Elems(runtime.Float32, c[0], c[1])
		if !errors.Is(err, runtime.StatusInvalidArgument) || !strings.Contains(err.Error(), "BufferElems") ||
			strings.Contains(err.Error(), "BufferSlice") {
			t.Errorf("Elems(float32, %d, %d) of 16 bytes: %v, want an InvalidArgument error from BufferElems", c[0], c[1], err)
		}
	}
	// The last whole elements are still a valid view.
	if v, err := b.Elems(runtime.Float32, 2, 2); err != nil || v.Offset() != 8 || v.Size() != 8 {
		t.Errorf("Elems(float32, 2, 2) = off %d size %d, %v", v.Offset(), v.Size(), err)
	}
}

// A nil StreamOption is refused, not called.
func TestNewStreamNilOption(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	impl, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, "NewStream(dev, nil)", func() error {
		s, err := runtime.NewStream(dev, nil)
		if err == nil {
			s.Destroy()
		}
		return err
	})
	wantInvalid(t, "NewStreamWith(impl, dev, WithPriority(0), nil)", func() error {
		s, err := runtime.NewStreamWith(impl, dev, runtime.WithPriority(0), nil)
		if err == nil {
			s.Destroy()
		}
		return err
	})
}

// pinnedType is a device type served only by pinnedFake in these tests.
const pinnedType runtime.DeviceType = 100

// pinnedFake is a backend with page-locked host memory that counts how
// often each allocation is released.
type pinnedFake struct {
	runtime.Impl // only Type, Init and the PinnedHostMemory methods are called
	mu           sync.Mutex
	frees        map[*byte]int
}

func (*pinnedFake) Type() runtime.DeviceType { return pinnedType }
func (*pinnedFake) Init() error              { return nil }
func (*pinnedFake) HostAlloc(size int64) ([]byte, error) {
	return make([]byte, size), nil
}
func (p *pinnedFake) HostFree(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frees[&b[0]]++
	return nil
}

var (
	pinnedOnce sync.Once
	pinned     = &pinnedFake{frees: make(map[*byte]int)}
)

// The function HostAlloc returns releases page-locked memory once: a
// second call, or a concurrent one, is an error and does not hand the
// memory to the backend again (a double cudaFreeHost).
func TestHostAllocFreeTwice(t *testing.T) {
	pinnedOnce.Do(func() { runtime.MustRegister(pinnedType, pinned) })
	b, free, err := runtime.HostAlloc(pinnedType, 64)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok, invalid atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := free(); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, runtime.StatusInvalidArgument):
				invalid.Add(1)
			default:
				t.Errorf("free: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || invalid.Load() != 3 {
		t.Errorf("4 calls of free: %d succeeded, %d refused; want 1 and 3", ok.Load(), invalid.Load())
	}
	pinned.mu.Lock()
	n := pinned.frees[&b[0]]
	pinned.mu.Unlock()
	if n != 1 {
		t.Errorf("the backend freed the memory %d times, want 1", n)
	}

	// Go-heap memory (the cpu backend) says the same.
	_, free, err = runtime.HostAlloc(runtime.CPU, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if err := free(); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("second free of Go memory: %v, want InvalidArgument", err)
	}
}
