package runtime

import "sync/atomic"

// Buffer is a range of device memory: an allocation from Malloc or a view
// of one from Slice. It is a small value; copies refer to the same memory.
type Buffer struct {
	dev    Device
	impl   Impl
	h      any
	offset int64
	size   int64
	root   bool // the whole allocation, as Malloc returned it
}

// NewBufferView lets a backend describe memory it owns (a CCL backend's
// scratch space, say) as a Buffer; size and offset are in bytes.
func NewBufferView(impl Impl, dev Device, handle any, offset, size int64) Buffer {
	return Buffer{dev: dev, impl: impl, h: handle, offset: offset, size: size}
}

// Device returns the buffer's device.
func (b Buffer) Device() Device { return b.dev }

// Handle returns the backend's allocation handle; Offset says where in that
// allocation this buffer starts.
func (b Buffer) Handle() any { return b.h }

// Offset is the buffer's start within its allocation, in bytes.
func (b Buffer) Offset() int64 { return b.offset }

// Size is the buffer's length in bytes.
func (b Buffer) Size() int64 { return b.size }

// IsZero reports whether b is the zero Buffer (no memory).
func (b Buffer) IsZero() bool { return b.h == nil }

// Slice returns the view [off, off+n) of b, in bytes. An out-of-range view
// is an error.
func (b Buffer) Slice(off, n int64) (Buffer, error) {
	if off < 0 || n < 0 || off > b.size || n > b.size-off {
		return Buffer{}, Errorf("BufferSlice", StatusInvalidArgument, "view of %d bytes at offset %d of a %d-byte buffer", n, off, b.size)
	}
	return Buffer{dev: b.dev, impl: b.impl, h: b.h, offset: b.offset + off, size: n}, nil
}

// Elems returns the view of n elements of type t starting at element i.
func (b Buffer) Elems(t DataType, i, n int) (Buffer, error) {
	sz := int64(t.Size())
	if sz == 0 {
		return Buffer{}, Errorf("BufferElems", StatusInvalidArgument, "data type %s", t)
	}
	// Compared in whole elements, so that no product overflows and a view
	// that runs past the end is reported here, in elements.
	if count := b.size / sz; i < 0 || n < 0 || int64(i) > count || int64(n) > count-int64(i) {
		return Buffer{}, Errorf("BufferElems", StatusInvalidArgument, "%d elements at element %d of a %d-byte buffer of %s", n, i, b.size, t)
	}
	return b.Slice(int64(i)*sz, int64(n)*sz)
}

func (b Buffer) check(op string) error {
	if b.h == nil || b.impl == nil {
		return Errorf(op, StatusInvalidArgument, "zero Buffer")
	}
	return nil
}

// Malloc allocates size bytes on dev.
func Malloc(dev Device, size int64) (Buffer, error) {
	impl, err := Available(dev.Type)
	if err != nil {
		return Buffer{}, err
	}
	if size <= 0 {
		return Buffer{}, Errorf("Malloc", StatusInvalidArgument, "size %d", size)
	}
	if err := checkDevice(impl, dev, "Malloc"); err != nil {
		return Buffer{}, err
	}
	h, err := impl.Malloc(dev.Index, size)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{dev: dev, impl: impl, h: h, size: size, root: true}, nil
}

// MallocAsync allocates size bytes on s's device, ordered on s.
func MallocAsync(size int64, s *Stream) (Buffer, error) {
	if err := s.live("MallocAsync"); err != nil {
		return Buffer{}, err
	}
	if size <= 0 {
		return Buffer{}, Errorf("MallocAsync", StatusInvalidArgument, "size %d", size)
	}
	s.enqueued()
	h, err := s.impl.MallocAsync(size, s.h)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{dev: s.dev, impl: s.impl, h: h, size: size, root: true}, nil
}

// Free releases an allocation made by Malloc or MallocAsync.
func Free(b Buffer) error {
	if err := b.check("Free"); err != nil {
		return err
	}
	if !b.root {
		return Errorf("Free", StatusInvalidArgument, "Free of a view; free the allocation it came from")
	}
	return b.impl.Free(b.h)
}

// FreeAsync releases an allocation, ordered on s.
func FreeAsync(b Buffer, s *Stream) error {
	if err := b.check("FreeAsync"); err != nil {
		return err
	}
	if err := s.live("FreeAsync"); err != nil {
		return err
	}
	if !b.root {
		return Errorf("FreeAsync", StatusInvalidArgument, "FreeAsync of a view; free the allocation it came from")
	}
	s.enqueued()
	return b.impl.FreeAsync(b.h, s.h)
}

func streamHandle(s *Stream, b Buffer, op string) (any, error) {
	if s == nil {
		return nil, nil
	}
	if err := s.live(op); err != nil {
		return nil, err
	}
	if s.dev != b.dev {
		return nil, Errorf(op, StatusInvalidArgument, "buffer on %s, stream on %s", b.dev, s.dev)
	}
	s.enqueued() // the caller enqueues next
	return s.h, nil
}

// CopyToDevice copies len(src) bytes from host memory into dst. With a nil
// stream it completes before returning; otherwise src must stay untouched
// until the stream reaches the copy.
func CopyToDevice(dst Buffer, src []byte, s *Stream) error {
	if err := dst.check("MemcpyHtoD"); err != nil {
		return err
	}
	if int64(len(src)) > dst.size {
		return Errorf("MemcpyHtoD", StatusInvalidArgument, "%d bytes into a %d-byte buffer", len(src), dst.size)
	}
	h, err := streamHandle(s, dst, "MemcpyHtoD")
	if err != nil {
		return err
	}
	return dst.impl.MemcpyHtoD(dst, src, h)
}

// CopyToHost copies len(dst) bytes from src into host memory.
func CopyToHost(dst []byte, src Buffer, s *Stream) error {
	if err := src.check("MemcpyDtoH"); err != nil {
		return err
	}
	if int64(len(dst)) > src.size {
		return Errorf("MemcpyDtoH", StatusInvalidArgument, "%d bytes out of a %d-byte buffer", len(dst), src.size)
	}
	h, err := streamHandle(s, src, "MemcpyDtoH")
	if err != nil {
		return err
	}
	return src.impl.MemcpyDtoH(dst, src, h)
}

// Copy copies src into dst on one device; the sizes must match.
func Copy(dst, src Buffer, s *Stream) error {
	if err := dst.check("MemcpyDtoD"); err != nil {
		return err
	}
	if err := src.check("MemcpyDtoD"); err != nil {
		return err
	}
	if dst.size != src.size {
		return Errorf("MemcpyDtoD", StatusInvalidArgument, "sizes differ: %d-byte destination, %d-byte source", dst.size, src.size)
	}
	if dst.dev.Type != src.dev.Type {
		return Errorf("MemcpyDtoD", StatusInvalidArgument, "copy between %s and %s", src.dev, dst.dev)
	}
	h, err := streamHandle(s, dst, "MemcpyDtoD")
	if err != nil {
		return err
	}
	return dst.impl.MemcpyDtoD(dst, src, h)
}

// Memset sets every byte of dst to value.
func Memset(dst Buffer, value byte, s *Stream) error {
	if err := dst.check("Memset"); err != nil {
		return err
	}
	h, err := streamHandle(s, dst, "Memset")
	if err != nil {
		return err
	}
	return dst.impl.Memset(dst, value, h)
}

// Memory returns the memory statistics of dev.
func Memory(dev Device) (MemoryStats, error) {
	impl, err := Available(dev.Type)
	if err != nil {
		return MemoryStats{}, err
	}
	if err := checkDevice(impl, dev, "MemoryStats"); err != nil {
		return MemoryStats{}, err
	}
	return impl.MemoryStats(dev.Index)
}

// PinnedHostMemory is an optional backend capability: page-locked host
// memory, which the device copies to and from asynchronously at the bus's
// full speed (cudaHostAlloc). Pageable memory is staged through a bounce
// buffer instead, with the host waiting for it. Discover it with a type
// assertion, or use HostAlloc.
type PinnedHostMemory interface {
	// HostAlloc allocates size bytes of page-locked host memory, outside
	// Go's heap.
	HostAlloc(size int64) ([]byte, error)
	// HostFree releases memory HostAlloc returned.
	HostFree(b []byte) error
}

// maxHostAlloc bounds one allocation from Go's heap (64 TiB), so that an
// absurd size is an error rather than a panic in make.
const maxHostAlloc = 1 << 46

// checkHostAlloc refuses a Go-heap allocation above maxHostAlloc or, where
// the backend's devices allocate from the host's memory and say how much
// is available (MemoryDescriber), above that.
func checkHostAlloc(impl Impl, size int64) error {
	if size > maxHostAlloc {
		return Errorf("HostAlloc", StatusOutOfMemory, "%d bytes is more than one host allocation may hold (%d)", size, int64(maxHostAlloc))
	}
	if d, ok := impl.(MemoryDescriber); ok && size > 0 {
		if m, err := d.DeviceMemory(0); err == nil && m.Host && m.Available > 0 && size > m.Available {
			return Errorf("HostAlloc", StatusOutOfMemory, "%d bytes requested, but the host has %d bytes available", size, m.Available)
		}
	}
	return nil
}

// HostAlloc returns size bytes of host memory to copy to and from devices
// of type t: page-locked where the backend offers it (PinnedHostMemory),
// else from Go's heap. free releases it; the memory must not be used
// afterwards, nor while a copy from or to it may still run. A size larger
// than the host can give is an error wrapping StatusOutOfMemory.
func HostAlloc(t DeviceType, size int64) (b []byte, free func() error, err error) {
	if size < 0 {
		return nil, nil, Errorf("HostAlloc", StatusInvalidArgument, "size %d", size)
	}
	impl, err := Available(t)
	if err != nil {
		return nil, nil, err
	}
	p, ok := impl.(PinnedHostMemory)
	if !ok || size == 0 {
		if err := checkHostAlloc(impl, size); err != nil {
			return nil, nil, err
		}
		return make([]byte, size), onceFree(func() error { return nil }), nil
	}
	if b, err = p.HostAlloc(size); err != nil {
		return nil, nil, err
	}
	mem := b
	return b, onceFree(func() error { return p.HostFree(mem) }), nil
}

// onceFree wraps the release of HostAlloc's memory so that it reaches the
// backend once: a second call, or one concurrent with the first, is an
// error rather than a second cudaFreeHost of memory that may by then
// belong to another allocation. A release that fails may be retried.
func onceFree(release func() error) func() error {
	var freed atomic.Bool
	return func() error {
		if !freed.CompareAndSwap(false, true) {
			return Errorf("HostFree", StatusInvalidArgument, "host memory from HostAlloc freed twice")
		}
		if err := release(); err != nil {
			freed.Store(false)
			return err
		}
		return nil
	}
}
