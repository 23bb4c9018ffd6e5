package cuda

import (
	goruntime "runtime"
	"sync/atomic"
	"unsafe"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// cudaMemcpyKind values.
const (
	cudaMemcpyHostToDevice = 1
	cudaMemcpyDeviceToHost = 2
	cudaMemcpyDefault      = 4 // inferred from the pointers (unified addressing)
)

// allocation is the handle of device memory.
type allocation struct {
	owner *Impl
	ptr   uintptr
	dev   int
	size  int64
	freed atomic.Bool
}

// Malloc allocates size bytes on device. Failure to find the memory is an
// error wrapping StatusOutOfMemory with CUDA's cudaErrorMemoryAllocation.
func (m *Impl) Malloc(device int, size int64) (any, error) {
	const op = "Malloc"
	d, err := m.device(op, device)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "size %d", size)
	}
	sc, err := m.enter(op, device)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.malloc, f.OutPtr(0), uintptr(size))); rc != 0 {
		err := m.cudaErr(op, rc)
		if runtime.StatusOf(err) == runtime.StatusOutOfMemory {
			m.refreshMemInfo(d, f)
			err = runtime.Errorf(op, runtime.StatusOutOfMemory, "%v; %d bytes requested on cuda:%d, %d free of %d",
				err.(*runtime.Error).Detail, size, device, d.free.Load(), d.total.Load())
		}
		return nil, err
	}
	m.account(d, size)
	m.refreshMemInfo(d, f)
	return &allocation{owner: m, ptr: uintptr(f.Out[0]), dev: device, size: size}, nil
}

// refreshMemInfo reads the device's free and total memory; it runs on
// the device's locked scope, after allocation changes only.
func (m *Impl) refreshMemInfo(d *device, f *dl.Frame) {
	if int32(f.Call(m.rt.memGetInfo, f.OutPtr(2), f.OutPtr(3))) == 0 {
		d.free.Store(int64(f.Out[2]))
		d.total.Store(int64(f.Out[3]))
	} else {
		dl.Call(m.rt.getLastError)
	}
}

func (m *Impl) account(d *device, size int64) {
	in := d.inUse.Add(size)
	for {
		p := d.peak.Load()
		if in <= p || d.peak.CompareAndSwap(p, in) {
			return
		}
	}
}

// take checks that h is live memory of m and marks it freed. A caller
// whose free then fails gives it back (untake), so that the memory, still
// allocated, can be freed again rather than being lost with a handle that
// says "already freed".
func (m *Impl) take(op string, h any) (*allocation, error) {
	a, ok := h.(*allocation)
	if !ok || a == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cuda memory handle", h)
	}
	if a.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "memory handle belongs to another cuda backend instance")
	}
	if a.freed.Swap(true) {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "memory on cuda:%d already freed", a.dev)
	}
	return a, nil
}

func untake(a *allocation) { a.freed.Store(false) }

// Free releases an allocation. cudaFree waits for work using it. Where it
// fails, the allocation stays live.
func (m *Impl) Free(h any) error {
	const op = "Free"
	a, err := m.take(op, h)
	if err != nil {
		return err
	}
	sc, err := m.enter(op, a.dev)
	if err != nil {
		untake(a)
		return err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.free, a.ptr)); rc != 0 {
		untake(a)
		return m.cudaErr(op, rc)
	}
	d := &m.devices[a.dev]
	d.inUse.Add(-a.size)
	m.refreshMemInfo(d, f)
	return nil
}

// MallocAsync allocates from the stream's device memory pool, ordered on
// the stream.
func (m *Impl) MallocAsync(size int64, sh any) (any, error) {
	const op = "MallocAsync"
	s, err := m.stream(op, sh)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "size %d", size)
	}
	sc, err := m.enter(op, s.dev)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.mallocAsync, f.OutPtr(0), uintptr(size), s.h)); rc != 0 {
		return nil, m.cudaErr(op, rc)
	}
	m.account(&m.devices[s.dev], size)
	return &allocation{owner: m, ptr: uintptr(f.Out[0]), dev: s.dev, size: size}, nil
}

// FreeAsync frees memory when the stream reaches this point; the bytes
// leave the backend's in-use count at once. Where it fails, the
// allocation stays live.
func (m *Impl) FreeAsync(h, sh any) error {
	const op = "FreeAsync"
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	a, err := m.take(op, h)
	if err != nil {
		return err
	}
	sc, err := m.enter(op, s.dev)
	if err != nil {
		untake(a)
		return err
	}
	defer sc.exit()
	if rc := int32(dl.Call(m.rt.freeAsync, a.ptr, s.h)); rc != 0 {
		untake(a)
		return m.cudaErr(op, rc)
	}
	m.devices[a.dev].inUse.Add(-a.size)
	return nil
}

// pointer returns the device address of b's first n bytes, checking that
// b is live memory of m.
func (m *Impl) pointer(op string, b runtime.Buffer, n int64) (uintptr, error) {
	a, ok := b.Handle().(*allocation)
	if !ok || a == nil {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer handle %T is not cuda memory", b.Handle())
	}
	if a.owner != m {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer belongs to another cuda backend instance")
	}
	return checkView(op, a, b, n)
}

func checkView(op string, a *allocation, b runtime.Buffer, n int64) (uintptr, error) {
	if a.freed.Load() {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer on cuda:%d used after Free", a.dev)
	}
	off, size := b.Offset(), b.Size()
	if off < 0 || size < 0 || off > a.size || size > a.size-off {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "view of %d bytes at offset %d of a %d-byte allocation", size, off, a.size)
	}
	if n < 0 || n > size {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "%d bytes asked of a %d-byte buffer", n, size)
	}
	return a.ptr + uintptr(off), nil
}

// DevicePointer returns the device address a buffer of this package's
// backend starts at, for libraries that take raw pointers (NCCL).
func DevicePointer(b runtime.Buffer) (uintptr, error) {
	a, ok := b.Handle().(*allocation)
	if !ok || a == nil {
		return 0, runtime.Errorf("DevicePointer", runtime.StatusInvalidArgument, "buffer on %s is not cuda memory (%T)", b.Device(), b.Handle())
	}
	return checkView("DevicePointer", a, b, 0)
}

// hostPtr is the address of a host slice's first byte.
func hostPtr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

// copyCall runs a copy on sh, or synchronously when sh is nil, with dev
// (the device of the buffer, or of the stream) current: a synchronous
// copy or memset runs on the current device's default stream, and CUDA
// refuses memory of another device there.
func (m *Impl) copyCall(op string, dev int, sh any, dst, src uintptr, n int64, kind uintptr) error {
	var s *stream
	if sh != nil {
		var err error
		if s, err = m.stream(op, sh); err != nil {
			return err
		}
		dev = s.dev
	}
	if n == 0 {
		return nil
	}
	sc, err := m.enter(op, dev)
	if err != nil {
		return err
	}
	defer sc.exit()
	var rc int32
	if s == nil {
		// cudaMemcpy returns before a device-to-device copy is done, on
		// the legacy stream, which the backend's non-blocking streams do
		// not wait for: wait for it, as a nil stream promises.
		if rc = int32(dl.Call(m.rt.memcpy, dst, src, uintptr(n), kind)); rc == 0 {
			rc = int32(dl.Call(m.rt.streamSynchronize, 0))
		}
	} else {
		from := m.issuing()
		rc = int32(dl.Call(m.rt.memcpyAsync, dst, src, uintptr(n), kind, s.h))
		m.noteIssue(s, from)
	}
	if rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// MemcpyHtoD copies src into the start of dst.
func (m *Impl) MemcpyHtoD(dst runtime.Buffer, src []byte, sh any) error {
	const op = "MemcpyHtoD"
	p, err := m.pointer(op, dst, int64(len(src)))
	if err != nil {
		return err
	}
	err = m.copyCall(op, dst.Device().Index, sh, p, hostPtr(src), int64(len(src)), cudaMemcpyHostToDevice)
	goruntime.KeepAlive(src)
	return err
}

// MemcpyDtoH copies the start of src into dst.
func (m *Impl) MemcpyDtoH(dst []byte, src runtime.Buffer, sh any) error {
	const op = "MemcpyDtoH"
	p, err := m.pointer(op, src, int64(len(dst)))
	if err != nil {
		return err
	}
	err = m.copyCall(op, src.Device().Index, sh, hostPtr(dst), p, int64(len(dst)), cudaMemcpyDeviceToHost)
	goruntime.KeepAlive(dst)
	return err
}

// MemcpyDtoD copies src into the start of dst; the buffers may be on
// different GPUs.
func (m *Impl) MemcpyDtoD(dst, src runtime.Buffer, sh any) error {
	const op = "MemcpyDtoD"
	s, err := m.pointer(op, src, src.Size())
	if err != nil {
		return err
	}
	d, err := m.pointer(op, dst, src.Size())
	if err != nil {
		return err
	}
	return m.copyCall(op, dst.Device().Index, sh, d, s, src.Size(), cudaMemcpyDefault)
}

// Memset sets every byte of dst to value.
func (m *Impl) Memset(dst runtime.Buffer, value byte, sh any) error {
	const op = "Memset"
	p, err := m.pointer(op, dst, dst.Size())
	if err != nil {
		return err
	}
	var s *stream
	dev := dst.Device().Index
	if sh != nil {
		if s, err = m.stream(op, sh); err != nil {
			return err
		}
		dev = s.dev
	}
	n := dst.Size()
	if n == 0 {
		return nil
	}
	sc, err := m.enter(op, dev)
	if err != nil {
		return err
	}
	defer sc.exit()
	var rc int32
	if s == nil {
		// cudaMemset of device memory returns before it is done (see
		// the copy above): wait for the legacy stream.
		if rc = int32(dl.Call(m.rt.memset, p, uintptr(value), uintptr(n))); rc == 0 {
			rc = int32(dl.Call(m.rt.streamSynchronize, 0))
		}
	} else {
		from := m.issuing()
		rc = int32(dl.Call(m.rt.memsetAsync, p, uintptr(value), uintptr(n), s.h))
		m.noteIssue(s, from)
	}
	if rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}

// MemoryStats reports the bytes allocated through the backend on device
// and their peak, with the device's total and free memory as of the last
// allocation change (0 before the first). It makes no driver call.
func (m *Impl) MemoryStats(device int) (runtime.MemoryStats, error) {
	d, err := m.device("MemoryStats", device)
	if err != nil {
		return runtime.MemoryStats{}, err
	}
	return runtime.MemoryStats{InUse: d.inUse.Load(), Peak: d.peak.Load(), Total: d.total.Load(), Free: d.free.Load()}, nil
}

// DeviceMemory asks CUDA (cudaMemGetInfo) for the GPU's total and free
// memory, and keeps them for MemoryStats. It creates the device's primary
// context if nothing has yet. Where CUDA is not loaded it returns the
// error every method does (wrapping StatusUnavailable): memory unknown.
func (m *Impl) DeviceMemory(index int) (runtime.DeviceMemory, error) {
	const op = "DeviceMemory"
	d, err := m.device(op, index)
	if err != nil {
		return runtime.DeviceMemory{}, err
	}
	sc, err := m.enter(op, index)
	if err != nil {
		return runtime.DeviceMemory{}, err
	}
	defer sc.exit()
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(m.rt.memGetInfo, f.OutPtr(0), f.OutPtr(1))); rc != 0 {
		return runtime.DeviceMemory{}, m.cudaErr(op, rc)
	}
	free, total := int64(f.Out[0]), int64(f.Out[1])
	d.free.Store(free)
	d.total.Store(total)
	return runtime.DeviceMemory{Total: total, Available: free, AvailableKnown: true}, nil
}

// ResetPeakMemory sets the peak to the bytes in use now.
func (m *Impl) ResetPeakMemory(device int) error {
	d, err := m.device("ResetPeakMemory", device)
	if err != nil {
		return err
	}
	d.peak.Store(d.inUse.Load())
	return nil
}

// cudaHostAllocPortable makes pinned memory page-locked for every CUDA
// context, not only the current device's.
const cudaHostAllocPortable = 1

// HostAlloc allocates size bytes of page-locked host memory
// (cudaHostAlloc, portable across devices), so that copies between it and
// a device run asynchronously at the bus's full speed. The memory is
// outside Go's heap; free it with HostFree (runtime.PinnedHostMemory).
func (m *Impl) HostAlloc(size int64) ([]byte, error) {
	const op = "HostAlloc"
	if err := m.Init(); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "size %d", size)
	}
	var p uintptr
	var rc int32
	if err := m.inSomeContext(op, func() {
		f := dl.Get()
		defer f.Put()
		rc = int32(f.Call(m.rt.hostAlloc, f.OutPtr(0), uintptr(size), cudaHostAllocPortable))
		p = uintptr(f.Out[0])
	}); err != nil {
		return nil, err
	}
	if rc != 0 {
		return nil, m.cudaErr(op, rc)
	}
	if p == 0 {
		return nil, runtime.Errorf(op, runtime.StatusOutOfMemory, "cudaHostAlloc of %d bytes returned no memory", size)
	}
	return unsafe.Slice((*byte)(cPointer(p)), size), nil
}

// inSomeContext runs fn, a call that needs a CUDA context but no
// particular device (pinned host memory, which is portable), on a locked
// thread: in the thread's current context where it has one (a rank's
// goroutine has its device's), else in the primary context of the first
// device that already has one, so that the CUDA runtime does not make one
// on device 0, hundreds of MiB of its memory, in a process that uses other
// GPUs. Only where no device has a context yet does the runtime choose.
func (m *Impl) inSomeContext(op string, fn func()) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if dev, ok := m.deviceWithContext(op); ok {
		return m.OnDevice(dev, fn)
	}
	fn()
	return nil
}

// deviceWithContext returns the first device whose primary context is
// active, when the calling (locked) thread has no current context; false
// when it has one, when no device has a context, or when the driver API
// cannot say.
func (m *Impl) deviceWithContext(op string) (int, bool) {
	drv := m.loadDriver(op)
	if drv == nil {
		return 0, false
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(drv.ctxGetCurrent, f.OutPtr(0))); rc != 0 || f.Out[0] != 0 {
		return 0, false
	}
	n, err := m.DeviceCount()
	if err != nil {
		return 0, false
	}
	for i := range n {
		if rc := int32(f.Call(drv.deviceGet, f.OutPtr(0), uintptr(i))); rc != 0 {
			return 0, false
		}
		f.Out[1], f.Out[2] = 0, 0
		if rc := int32(f.Call(drv.primaryCtxGetState, uintptr(int32(f.Out[0])), f.OutPtr(1), f.OutPtr(2))); rc != 0 {
			return 0, false
		}
		if int32(f.Out[2]) != 0 {
			return i, true
		}
	}
	return 0, false
}

// HostFree releases memory HostAlloc returned.
func (m *Impl) HostFree(b []byte) error {
	const op = "HostFree"
	if len(b) == 0 {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "empty buffer")
	}
	if err := m.Init(); err != nil {
		return err
	}
	var rc int32
	if err := m.inSomeContext(op, func() { rc = int32(dl.Call(m.rt.freeHost, hostPtr(b))) }); err != nil {
		return err
	}
	if rc != 0 {
		return m.cudaErr(op, rc)
	}
	return nil
}
