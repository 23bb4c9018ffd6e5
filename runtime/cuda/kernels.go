package cuda

import (
	_ "embed"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// kernelsPTX is the PTX of the elementwise kernels. PTX rather than a
// binary (cubin) so that the driver compiles it for whatever GPU it finds;
// loaded through the driver API rather than compiled from CUDA C with NVRTC
// so that nothing beyond the driver is needed (libnvrtc is a separate,
// large package, often missing where the runtime is installed).
//
//go:embed kernels.ptx
var kernelsPTX string

// Driver-API JIT options for cuModuleLoadDataEx.
const (
	cuJitErrorLogBuffer          = 5
	cuJitErrorLogBufferSizeBytes = 6
)

// threadsPerBlock is the block size of every elementwise launch.
const threadsPerBlock = 256

// kernels is one device's loaded module.
type kernels struct {
	ctx                uintptr // the device's primary context
	tanh, tanhBackward uintptr // CUfunction
	sleep              uintptr
}

// kernelsOn loads the module into device d's primary context at its first
// use. A failure is kept where loading again would meet it again (the
// driver refuses the PTX); one that may pass (the device short of memory)
// is tried again at the next call.
func (m *Impl) kernelsOn(op string, d *device) (*kernels, error) {
	if k := d.kern.loaded(); k != nil {
		return k, nil
	}
	k, err := d.kern.get(func() (*kernels, bool, error) { return m.loadKernels(op, d.index) })
	if err != nil {
		return nil, forOp(op, err)
	}
	return k, nil
}

// loadKernels loads the module into device index's primary context and
// says whether its failure is to be kept. A failure leaves nothing
// behind: the context's retain is released and the module unloaded.
func (m *Impl) loadKernels(op string, index int) (k *kernels, keep bool, err error) {
	drv, err := m.driverAPI(op)
	if err != nil {
		return nil, false, err // kept, or not, by the driver's own load
	}
	// cudaSetDevice initialises the device's primary context, which the
	// runtime, cuBLAS and NCCL share with the driver API.
	sc, err := m.enter(op, index)
	if err != nil {
		return nil, false, err
	}
	defer sc.exit()
	fail := func(rc int32) (*kernels, bool, error) {
		return nil, !retryable(rc), m.driverErr(op, rc)
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(drv.deviceGet, f.OutPtr(0), uintptr(index))); rc != 0 {
		return fail(rc)
	}
	cuDevice := uintptr(int32(f.Out[0]))
	if rc := int32(f.Call(drv.primaryCtxRetain, f.OutPtr(1), cuDevice)); rc != 0 {
		return fail(rc)
	}
	ok := false
	defer func() {
		if !ok {
			dl.Call(drv.primaryCtxRelease, cuDevice)
		}
	}()
	k = &kernels{ctx: uintptr(f.Out[1])}
	if rc := int32(f.Call(drv.ctxGetCurrent, f.OutPtr(2))); rc != 0 {
		return fail(rc)
	}
	prev := uintptr(f.Out[2])
	if prev != k.ctx {
		if rc := int32(f.Call(drv.ctxSetCurrent, k.ctx)); rc != 0 {
			return fail(rc)
		}
		defer dl.Call(drv.ctxSetCurrent, prev)
	}
	image := dl.CString(kernelsPTX)
	logBuf := make([]byte, 8192)
	opts := []uint32{cuJitErrorLogBuffer, cuJitErrorLogBufferSizeBytes}
	vals := []uintptr{hostPtr(logBuf), uintptr(len(logBuf))}
	rc := int32(f.Call(drv.moduleLoadDataEx, f.OutPtr(3), hostPtr(image), uintptr(len(opts)),
		uintptr(unsafePointer(&opts[0])), uintptr(unsafePointer(&vals[0]))))
	goruntime.KeepAlive(image)
	goruntime.KeepAlive(opts)
	goruntime.KeepAlive(vals)
	goruntime.KeepAlive(logBuf)
	if rc != 0 {
		err := m.driverErr(op, rc)
		log := strings.TrimSpace(strings.TrimRight(string(logBuf), "\x00"))
		return nil, !retryable(rc), &runtime.Error{Op: op, Status: runtime.StatusOf(err), Detail: "loading the elementwise kernels (PTX JIT log: " + log + ")", Err: err}
	}
	mod := uintptr(f.Out[3])
	// Runs before the context is made the previous one again: the
	// module's context is current.
	defer func() {
		if !ok {
			dl.Call(drv.moduleUnload, mod)
		}
	}()
	for _, fn := range []struct {
		name string
		dst  *uintptr
	}{{"ts_tanh", &k.tanh}, {"ts_tanh_backward", &k.tanhBackward}, {"ts_sleep", &k.sleep}} {
		name := dl.CString(fn.name)
		rc := int32(f.Call(drv.moduleGetFunction, f.OutPtr(0), mod, hostPtr(name)))
		goruntime.KeepAlive(name)
		if rc != 0 {
			return fail(rc)
		}
		*fn.dst = uintptr(f.Out[0])
	}
	ok = true
	return k, true, nil
}

// launch runs a kernel with nparams 64-bit parameters over n elements on
// stream s, threadsPerBlock elements a block.
func (m *Impl) launch(op string, s *stream, fn func(*kernels) uintptr, n int, params ...uintptr) error {
	blocks := (n + threadsPerBlock - 1) / threadsPerBlock
	return m.launchBlocks(op, s, fn, blocks, threadsPerBlock, params...)
}

// launchBlocks runs a kernel with nparams 64-bit parameters as blocks
// blocks of threads threads on stream s. The kernel's context is made
// current on a locked thread for the launch and the previous one restored.
func (m *Impl) launchBlocks(op string, s *stream, fn func(*kernels) uintptr, blocks, threads int, params ...uintptr) error {
	k, err := m.kernelsOn(op, &m.devices[s.dev])
	if err != nil {
		return err
	}
	drv := m.drv.loaded() // loaded before the kernels
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	g := dl.Get()
	rc := int32(g.Call(drv.ctxGetCurrent, g.OutPtr(0)))
	prev := uintptr(g.Out[0])
	g.Put()
	if rc != 0 {
		return m.driverErr(op, rc)
	}
	if prev != k.ctx {
		if rc := int32(dl.Call(drv.ctxSetCurrent, k.ctx)); rc != 0 {
			return m.driverErr(op, rc)
		}
		defer dl.Call(drv.ctxSetCurrent, prev)
	}
	f := dl.Get()
	defer f.Put()
	for i, p := range params {
		f.Out[i] = uint64(p)
		f.Params[i] = f.OutPtr(i)
	}
	if rc := int32(f.Call(drv.launchKernel, fn(k), uintptr(blocks), 1, 1, uintptr(threads), 1, 1, 0, s.h, f.ParamsPtr(), 0)); rc != 0 {
		return m.driverErr(op, rc)
	}
	return nil
}

// Tanh enqueues y[i] = tanh(x[i]) for n float32s.
func (m *Impl) Tanh(sh any, x, y runtime.Buffer, n int) error {
	const op = "Tanh"
	s, ptrs, err := m.vectors(op, sh, n, x, y)
	if err != nil || n == 0 {
		return err
	}
	return m.launch(op, s, func(k *kernels) uintptr { return k.tanh }, n, ptrs[0], ptrs[1], uintptr(n))
}

// TanhBackward enqueues dx[i] = dy[i]·(1 − y[i]²) for n float32s.
func (m *Impl) TanhBackward(sh any, y, dy, dx runtime.Buffer, n int) error {
	const op = "TanhBackward"
	s, ptrs, err := m.vectors(op, sh, n, y, dy, dx)
	if err != nil || n == 0 {
		return err
	}
	return m.launch(op, s, func(k *kernels) uintptr { return k.tanhBackward }, n, ptrs[0], ptrs[1], ptrs[2], uintptr(n))
}

// vectors resolves the stream and the device addresses of n float32s in
// each buffer (at most three).
func (m *Impl) vectors(op string, sh any, n int, bufs ...runtime.Buffer) (*stream, [3]uintptr, error) {
	var out [3]uintptr
	s, err := m.stream(op, sh)
	if err != nil {
		return nil, out, err
	}
	if n < 0 {
		return nil, out, runtime.Errorf(op, runtime.StatusInvalidArgument, "n=%d", n)
	}
	for i, b := range bufs {
		if b.Device().Index != s.dev {
			return nil, out, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer on %s, stream on cuda:%d", b.Device(), s.dev)
		}
		if b.Offset()%4 != 0 {
			return nil, out, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer offset %d is not float32-aligned", b.Offset())
		}
		p, err := m.pointer(op, b, 0)
		if err != nil {
			return nil, out, err
		}
		if int64(n) > b.Size()/4 { // not n·4, which may overflow
			return nil, out, runtime.Errorf(op, runtime.StatusInvalidArgument, "%d float32 elements in a %d-byte buffer", n, b.Size())
		}
		out[i] = p
	}
	return s, out, nil
}

// Sleep enqueues a kernel of one thread that spins on the GPU's global
// timer, napping between reads, until d has passed
// (runtime.Sleeper): known device time that uses no more than one SM.
func (m *Impl) Sleep(sh any, d time.Duration) error {
	const op = "Sleep"
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	if d < 0 {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "negative duration %v", d)
	}
	return m.launchBlocks(op, s, func(k *kernels) uintptr { return k.sleep }, 1, 1, uintptr(d))
}
