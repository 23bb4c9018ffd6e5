package ccl

import (
	"errors"
	"sync"

	"github.com/trainscope/trainscope/runtime"
)

// fakeImpl is a backend of a given type that records group calls; the
// methods it does not override panic (the embedded Impl is nil).
type fakeImpl struct {
	Impl
	typ runtime.DeviceType

	mu               sync.Mutex
	starts, ends     int
	startErr, endErr error
}

func (f *fakeImpl) Type() runtime.DeviceType { return f.typ }
func (f *fakeImpl) Init() error              { return nil }

func (f *fakeImpl) GroupStart() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	f.starts++
	return nil
}

func (f *fakeImpl) GroupEnd() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ends++
	return f.endErr
}

func (f *fakeImpl) counts() (starts, ends int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts, f.ends
}

var errFn = errors.New("fn failed")

// bytesID is a UniqueID of n bytes.
type bytesID struct{ b []byte }

func newBytesID(n int) *bytesID { return &bytesID{b: make([]byte, n)} }

func (u *bytesID) Data() []byte { return append([]byte(nil), u.b...) }
func (u *bytesID) Size() int    { return len(u.b) }
func (u *bytesID) Load(b []byte) error {
	if len(b) != len(u.b) {
		return Errorf("Load", StatusInvalidArgument, "want %d bytes, got %d", len(u.b), len(b))
	}
	copy(u.b, b)
	return nil
}
