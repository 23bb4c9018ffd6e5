package cpu

import (
	"sync/atomic"
	"unsafe"

	"github.com/trainscope/trainscope/runtime"
)

// maxAlloc bounds one allocation so that an absurd size is reported as
// out of memory instead of crashing the process.
const maxAlloc = 1 << 46

// hostCheckMin is the smallest allocation compared with the host's
// available memory: reading it costs a read of /proc/meminfo, and only a
// large allocation can be refused by it.
const hostCheckMin = 16 << 20

// checkHostMemory refuses an allocation larger than the memory the host
// has available: Go would otherwise end the process with a fatal
// out-of-memory error. A memory limit (WithMemoryLimit) does not exempt
// it, since the limit may be more than the host has (a GPU's memory
// modelled on a smaller machine).
func checkHostMemory(op string, device int, size int64) error {
	if size < hostCheckMin {
		return nil
	}
	total, avail := hostMemory()
	if avail > 0 && size > avail {
		return runtime.Errorf(op, runtime.StatusOutOfMemory, "%d bytes requested on cpu:%d, but the host has %d bytes available (of %d)", size, device, avail, total)
	}
	return nil
}

// allocation is the handle of cpu memory: bytes viewing a []uint64, so
// that they can be read as float32 or float64 at any 8-byte offset.
type allocation struct {
	owner *Impl
	dev   int
	size  int64
	mem   atomic.Pointer[[]byte] // nil once freed
}

// Malloc allocates size bytes, zeroed, on device.
func (m *Impl) Malloc(device int, size int64) (any, error) {
	return m.malloc("Malloc", device, size)
}

func (m *Impl) malloc(op string, device int, size int64) (*allocation, error) {
	d, err := m.device(op, device)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "size %d", size)
	}
	if size > maxAlloc {
		return nil, runtime.Errorf(op, runtime.StatusOutOfMemory, "%d bytes is more than one allocation may hold (%d)", size, int64(maxAlloc))
	}
	if err := checkHostMemory(op, device, size); err != nil {
		return nil, err
	}
	inUse, ok := reserve(&d.inUse, size, m.cfg.memLimit)
	if !ok {
		return nil, runtime.Errorf(op, runtime.StatusOutOfMemory, "%d bytes requested on cpu:%d, %d of %d in use", size, device, inUse, m.cfg.memLimit)
	}
	raise(&d.peak, inUse)
	words := make([]uint64, max(1, (size+7)/8))
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	a := &allocation{owner: m, dev: device, size: size}
	a.mem.Store(&b)
	return a, nil
}

// Free releases an allocation. Freeing a handle twice, or a handle of
// another backend, is an error.
func (m *Impl) Free(h any) error {
	a, err := m.take("Free", h)
	if err != nil {
		return err
	}
	m.release(a)
	return nil
}

// MallocAsync allocates at once, on the stream's device: host memory needs
// no ordering.
func (m *Impl) MallocAsync(size int64, sh any) (any, error) {
	s, err := m.liveStream("MallocAsync", sh)
	if err != nil {
		return nil, err
	}
	return m.malloc("MallocAsync", s.dev, size)
}

// FreeAsync invalidates the handle at once and returns its bytes to the
// device's accounting when the stream reaches this point. Work already
// enqueued that uses the memory still sees it.
func (m *Impl) FreeAsync(h, sh any) error {
	s, err := m.liveStream("FreeAsync", sh)
	if err != nil {
		return err
	}
	a, err := m.take("FreeAsync", h)
	if err != nil {
		return err
	}
	if err := s.push("FreeAsync", &item{kind: opRelease, mem: a}); err != nil {
		m.release(a) // the stream was destroyed meanwhile: free now
		return err
	}
	return nil
}

// take checks that h is a live allocation of m and marks it freed.
func (m *Impl) take(op string, h any) (*allocation, error) {
	a, ok := h.(*allocation)
	if !ok || a == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cpu memory handle", h)
	}
	if a.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "memory handle belongs to another cpu backend instance")
	}
	if a.mem.Swap(nil) == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "memory already freed")
	}
	return a, nil
}

// reserve adds size to *inUse unless that passes limit (0: no limit) and
// returns the new count, or, refused, the count it found. A refused size
// never enters the counter: added and taken off again, it made a
// concurrent allocation that fits fail, and showed in MemoryStats.
func reserve(inUse *atomic.Int64, size, limit int64) (int64, bool) {
	if limit <= 0 {
		return inUse.Add(size), true
	}
	for {
		cur := inUse.Load()
		if size > limit-cur {
			return cur, false
		}
		if inUse.CompareAndSwap(cur, cur+size) {
			return cur + size, true
		}
	}
}

// raise sets *peak to v if v is higher.
func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (m *Impl) release(a *allocation) { m.devices[a.dev].inUse.Add(-a.size) }

// MemoryStats reports the bytes in use on device and their peak; Total and
// Free are the WithMemoryLimit cap and what is left of it, or 0 (unknown)
// without a cap.
func (m *Impl) MemoryStats(device int) (runtime.MemoryStats, error) {
	d, err := m.device("MemoryStats", device)
	if err != nil {
		return runtime.MemoryStats{}, err
	}
	st := runtime.MemoryStats{InUse: d.inUse.Load(), Peak: d.peak.Load()}
	if lim := m.cfg.memLimit; lim > 0 {
		st.Total, st.Free = lim, max(0, lim-st.InUse)
	}
	return st, nil
}

// ResetPeakMemory sets the device's peak to the bytes in use now.
func (m *Impl) ResetPeakMemory(device int) error {
	d, err := m.device("ResetPeakMemory", device)
	if err != nil {
		return err
	}
	d.peak.Store(d.inUse.Load())
	return nil
}

// MemcpyHtoD copies src into the start of dst.
func (m *Impl) MemcpyHtoD(dst runtime.Buffer, src []byte, sh any) error {
	const op = "MemcpyHtoD"
	d, err := m.view(op, dst)
	if err != nil {
		return err
	}
	if len(src) > len(d) {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "%d bytes into a %d-byte buffer", len(src), len(d))
	}
	return m.enqueue(op, sh, &item{kind: opCopy, a: d[:len(src)], b: src})
}

// MemcpyDtoH copies the start of src into dst.
func (m *Impl) MemcpyDtoH(dst []byte, src runtime.Buffer, sh any) error {
	const op = "MemcpyDtoH"
	s, err := m.view(op, src)
	if err != nil {
		return err
	}
	if len(dst) > len(s) {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "%d bytes out of a %d-byte buffer", len(dst), len(s))
	}
	return m.enqueue(op, sh, &item{kind: opCopy, a: dst, b: s[:len(dst)]})
}

// MemcpyDtoD copies src into the start of dst; the ranges may overlap.
func (m *Impl) MemcpyDtoD(dst, src runtime.Buffer, sh any) error {
	const op = "MemcpyDtoD"
	d, err := m.view(op, dst)
	if err != nil {
		return err
	}
	s, err := m.view(op, src)
	if err != nil {
		return err
	}
	if len(s) > len(d) {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "%d-byte source into a %d-byte destination", len(s), len(d))
	}
	return m.enqueue(op, sh, &item{kind: opCopy, a: d[:len(s)], b: s})
}

// Memset sets every byte of dst to value.
func (m *Impl) Memset(dst runtime.Buffer, value byte, sh any) error {
	const op = "Memset"
	d, err := m.view(op, dst)
	if err != nil {
		return err
	}
	return m.enqueue(op, sh, &item{kind: opSet, a: d, val: value})
}

// enqueue puts it on the stream sh, or runs it now when sh is nil.
func (m *Impl) enqueue(op string, sh any, it *item) error {
	s, err := m.optionalStream(op, sh)
	if err != nil {
		return err
	}
	return submit(op, s, it)
}

// view returns the bytes b views, checking that b is live memory of m.
func (m *Impl) view(op string, b runtime.Buffer) ([]byte, error) {
	a, mem, err := viewOf(op, b)
	if err != nil {
		return nil, err
	}
	if a.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer belongs to another cpu backend instance")
	}
	return mem, nil
}

// viewOf returns the allocation behind b and the bytes b views.
func viewOf(op string, b runtime.Buffer) (*allocation, []byte, error) {
	a, ok := b.Handle().(*allocation)
	if !ok || a == nil {
		return nil, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer handle %T is not cpu memory", b.Handle())
	}
	p := a.mem.Load()
	if p == nil {
		return nil, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer used after Free")
	}
	off, n := b.Offset(), b.Size()
	if off < 0 || n < 0 || off > a.size || n > a.size-off {
		return nil, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "view of %d bytes at offset %d of a %d-byte allocation", n, off, a.size)
	}
	return a, (*p)[off : off+n : off+n], nil
}

// Bytes returns the host memory a cpu buffer views. The slice aliases the
// buffer: writes through it are writes to the buffer, and it must not be
// used after the buffer is freed. Order its use with the stream's work
// (Enqueue) where the buffer is in flight.
func Bytes(b runtime.Buffer) ([]byte, error) {
	_, mem, err := viewOf("Bytes", b)
	return mem, err
}

// Float32s returns the host memory a cpu buffer views, as float32s (see
// Bytes). The buffer must start at a multiple of 4 bytes; a trailing
// partial element is left out.
func Float32s(b runtime.Buffer) ([]float32, error) {
	return float32View("Float32s", b)
}

func float32View(op string, b runtime.Buffer) ([]float32, error) {
	_, mem, err := viewOf(op, b)
	if err != nil {
		return nil, err
	}
	return aligned(op, b, mem)
}

// floats is view for float32 operands.
func (m *Impl) floats(op string, b runtime.Buffer) ([]float32, error) {
	mem, err := m.view(op, b)
	if err != nil {
		return nil, err
	}
	return aligned(op, b, mem)
}

func aligned(op string, b runtime.Buffer, mem []byte) ([]float32, error) {
	if b.Offset()%4 != 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer offset %d is not float32-aligned", b.Offset())
	}
	return f32(mem), nil
}
