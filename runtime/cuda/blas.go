package cuda

import (
	"math"
	"math/bits"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// cuBLAS enumerations.
const (
	cublasOpN = 0
	cublasOpT = 1

	cublasDefaultMath = 0 // no TF32: float32 GEMMs in full fp32

	cudaR32F  = 0
	cudaR16F  = 2
	cudaR16BF = 14

	// cublasComputeType_t, as cublas_api.h numbers it (CUDA 11 and
	// later): CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75,
	// CUBLAS_COMPUTE_32F_FAST_TF32 = 77. With CUDA_R_32F A, B and C the
	// FAST types let cuBLAS convert the inputs to a narrower format for
	// the tensor cores (75: bfloat16, or TF32; 77: TF32) and accumulate
	// in fp32.
	cublasCompute32F         = 68
	cublasCompute32FFast16BF = 75
	cublasCompute32FFastTF32 = 77
	cublasGemmDefault        = -1
)

// gemmDefaultAlgo is CUBLAS_GEMM_DEFAULT (-1) as a C int argument: the
// callee reads the low 32 bits.
var gemmDefaultAlgo = ^uintptr(0)

// blasHandle returns the stream's cuBLAS handle, creating it on first use.
// The caller holds s.blasMu and has entered s.dev.
func (m *Impl) blasHandle(op string, b *cublas, s *stream) (uintptr, error) {
	if s.blas != 0 {
		return s.blas, nil
	}
	f := dl.Get()
	defer f.Put()
	if rc := int32(f.Call(b.create, f.OutPtr(0))); rc != 0 {
		return 0, m.blasErr(op, rc)
	}
	h := uintptr(f.Out[0])
	if rc := int32(f.Call(b.setStream, h, s.h)); rc != 0 {
		dl.Call(b.destroy, h)
		return 0, m.blasErr(op, rc)
	}
	// Explicitly the default math mode: cuBLAS may not use TF32 for
	// float32 unless WithTF32 asks for it (through cublasGemmEx).
	if rc := int32(f.Call(b.setMathMode, h, cublasDefaultMath)); rc != 0 {
		dl.Call(b.destroy, h)
		return 0, m.blasErr(op, rc)
	}
	s.blas = h
	return h, nil
}

// blasCall runs call with the stream's cuBLAS handle, on a locked thread
// with the stream's device current.
func (m *Impl) blasCall(op string, s *stream, call func(b *cublas, h uintptr, f *dl.Frame) int32) error {
	b, err := m.cublasAPI(op)
	if err != nil {
		return err
	}
	sc, err := m.enter(op, s.dev)
	if err != nil {
		return err
	}
	defer sc.exit()
	s.blasMu.Lock()
	defer s.blasMu.Unlock()
	// StreamDestroy marks the stream before it takes blasMu to destroy
	// the handle: a call that got here after it must not make a new
	// handle, which nothing would destroy, bound to a destroyed stream.
	if s.destroyed.Load() {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "stream on cuda:%d used after StreamDestroy", s.dev)
	}
	h, err := m.blasHandle(op, b, s)
	if err != nil {
		return err
	}
	f := dl.Get()
	defer f.Put()
	if rc := call(b, h, f); rc != 0 {
		return m.blasErr(op, rc)
	}
	return nil
}

func blasOp(t bool) uintptr {
	if t {
		return cublasOpT
	}
	return cublasOpN
}

// Gemm enqueues C = alpha·op(A)·op(B) + beta·C through cuBLAS, column-major.
// float32 is computed as g.Math says: MathDefault in full fp32
// (cublasSgemm), or TF32 if the backend was made WithTF32; MathTF32 and
// MathBF16 through cublasGemmEx with float32 operands and the compute type
// CUBLAS_COMPUTE_32F_FAST_TF32 or _FAST_16BF, whatever WithTF32 says.
// float64 runs with cublasDgemm; float16 and bfloat16 with cublasGemmEx,
// accumulating in fp32.
func (m *Impl) Gemm(sh any, g runtime.GemmArgs) error {
	const op = "Gemm"
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "negative shape M=%d N=%d K=%d", g.M, g.N, g.K)
	}
	switch g.Type {
	case runtime.Float32, runtime.Float64, runtime.Float16, runtime.BFloat16:
	default:
		return runtime.Errorf(op, runtime.StatusNotSupported, "the cuda backend's GEMM supports float32, float64, float16 and bfloat16, not %s", g.Type)
	}
	compute, err := float32Compute(g, m.cfg.tf32)
	if err != nil {
		return err
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"M", g.M}, {"N", g.N}, {"K", g.K}, {"LDA", g.LDA}, {"LDB", g.LDB}, {"LDC", g.LDC}} {
		if g.K == 0 && (d.name == "LDA" || d.name == "LDB") {
			continue // not read, and not passed on (leadingDims)
		}
		if d.v > math.MaxInt32 {
			// cuBLAS takes C ints: a larger value would be cut short in
			// silence.
			return runtime.Errorf(op, runtime.StatusInvalidArgument, "%s %d is beyond cuBLAS's 32-bit dimensions", d.name, d.v)
		}
	}
	es := int64(g.Type.Size())
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = ac, ar
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = bc, br
	}
	c, err := m.matrix(op, "C", s, g.C, g.M, g.N, g.LDC, es)
	if err != nil {
		return err
	}
	var a, b uintptr
	if g.K > 0 {
		if a, err = m.matrix(op, "A", s, g.A, ar, ac, g.LDA, es); err != nil {
			return err
		}
		if b, err = m.matrix(op, "B", s, g.B, br, bc, g.LDB, es); err != nil {
			return err
		}
	}
	ta, tb := blasOp(g.TransA), blasOp(g.TransB)
	mm, nn, kk := uintptr(g.M), uintptr(g.N), uintptr(g.K)
	lda, ldb, ldc := leadingDims(g)
	return m.blasCall(op, s, func(bl *cublas, h uintptr, f *dl.Frame) int32 {
		switch g.Type {
		case runtime.Float64:
			f.Out[0], f.Out[1] = math.Float64bits(float64(g.Alpha)), math.Float64bits(float64(g.Beta))
			return int32(f.Call(bl.dgemm, h, ta, tb, mm, nn, kk, f.OutPtr(0), a, lda, b, ldb, f.OutPtr(1), c, ldc))
		case runtime.Float32:
			f.Out[0], f.Out[1] = uint64(math.Float32bits(g.Alpha)), uint64(math.Float32bits(g.Beta))
			if compute == cublasCompute32F {
				return int32(f.Call(bl.sgemm, h, ta, tb, mm, nn, kk, f.OutPtr(0), a, lda, b, ldb, f.OutPtr(1), c, ldc))
			}
			return int32(f.Call(bl.gemmEx, h, ta, tb, mm, nn, kk, f.OutPtr(0), a, cudaR32F, lda, b, cudaR32F, ldb,
				f.OutPtr(1), c, cudaR32F, ldc, compute, gemmDefaultAlgo))
		default:
			dt := uintptr(cudaR16F)
			if g.Type == runtime.BFloat16 {
				dt = cudaR16BF
			}
			f.Out[0], f.Out[1] = uint64(math.Float32bits(g.Alpha)), uint64(math.Float32bits(g.Beta))
			return int32(f.Call(bl.gemmEx, h, ta, tb, mm, nn, kk, f.OutPtr(0), a, dt, lda, b, dt, ldb,
				f.OutPtr(1), c, dt, ldc, cublasCompute32F, gemmDefaultAlgo))
		}
	})
}

// leadingDims returns the leading dimensions a checked GEMM passes to
// cuBLAS. cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE) an lda below
// max(1, rows of A as stored) — M, or K when A is transposed — and an
// ldb below max(1, rows of B as stored) — K, or N when B is transposed —
// whatever K is, as the reference BLAS does. With K = 0, A and B are
// never read and neither the runtime nor this backend checks LDA and LDB,
// so any value is legal there (the CPU backend accepts it): cuBLAS gets
// the smallest values it accepts instead, which also fit its C ints. With
// K > 0, Gemm has checked them already and they pass unchanged.
func leadingDims(g runtime.GemmArgs) (lda, ldb, ldc uintptr) {
	if g.K == 0 {
		ar, br := g.M, 0
		if g.TransA {
			ar = 0
		}
		if g.TransB {
			br = g.N
		}
		return uintptr(max(ar, 1)), uintptr(max(br, 1)), uintptr(g.LDC)
	}
	return uintptr(g.LDA), uintptr(g.LDB), uintptr(g.LDC)
}

// float32Compute checks g.Math and returns the cuBLAS compute type of a
// float32 GEMM: cublasCompute32F (full fp32, through cublasSgemm) for
// MathDefault unless tf32 (WithTF32) lowers it, the FAST type of an
// explicit mode otherwise. Another element type takes MathDefault only.
func float32Compute(g runtime.GemmArgs, tf32 bool) (uintptr, error) {
	const op = "Gemm"
	switch g.Math {
	case runtime.MathDefault:
		if tf32 {
			return cublasCompute32FFastTF32, nil
		}
		return cublasCompute32F, nil
	case runtime.MathTF32, runtime.MathBF16:
		if g.Type != runtime.Float32 {
			return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "math mode %s needs float32 operands, not %s", g.Math, g.Type)
		}
		if g.Math == runtime.MathTF32 {
			return cublasCompute32FFastTF32, nil
		}
		return cublasCompute32FFast16BF, nil
	}
	return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "%s", g.Math)
}

// SupportsMath reports true for every listed mode: the FAST compute types
// are part of the cuBLAS API of every CUDA version the backend loads
// (12.0 and later). Only GPUs with TF32 and bfloat16 tensor cores
// (compute capability 8.0 and later) run them at tensor-core rates.
func (*Impl) SupportsMath(mode runtime.MathMode) bool {
	switch mode {
	case runtime.MathDefault, runtime.MathTF32, runtime.MathBF16:
		return true
	}
	return false
}

// matrix returns the device address of a rows×cols column-major matrix
// operand with leading dimension ld and elements of es bytes, after
// checking that it is live memory of m on the stream's device that holds
// ld·(cols−1)+rows elements.
func (m *Impl) matrix(op, name string, s *stream, b runtime.Buffer, rows, cols, ld int, es int64) (uintptr, error) {
	if ld < max(1, rows) {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "ld%s=%d smaller than %d rows", name, ld, rows)
	}
	if b.Device().Index != s.dev {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "matrix %s on %s, stream on cuda:%d", name, b.Device(), s.dev)
	}
	n, ok := matrixBytes(rows, cols, ld, es)
	if !ok {
		return 0, runtime.Errorf(op, runtime.StatusInvalidArgument, "matrix %s (%d×%d, ld%s=%d) needs more than 2^63 bytes", name, rows, cols, name, ld)
	}
	return m.pointer(op, b, n)
}

// matrixBytes is the size in bytes of a rows×cols column-major matrix
// with leading dimension ld, (ld·(cols−1)+rows)·es, 0 when it has no
// element, and whether that fits in an int64. The arguments are not
// negative.
func matrixBytes(rows, cols, ld int, es int64) (int64, bool) {
	if rows == 0 || cols == 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(uint64(ld), uint64(cols-1))
	elems, carry := bits.Add64(lo, uint64(rows), 0)
	if hi != 0 || carry != 0 || elems > math.MaxInt64/uint64(es) {
		return 0, false
	}
	return int64(elems) * es, true
}

// Axpy enqueues y[i] += alpha·x[i] for n float32s (cublasSaxpy).
func (m *Impl) Axpy(sh any, alpha float32, x, y runtime.Buffer, n int) error {
	const op = "Axpy"
	s, p, err := m.vectors(op, sh, n, x, y)
	if err != nil || n == 0 {
		return err
	}
	// cuBLAS takes the length as a C int: longer vectors go in parts.
	for off := 0; off < n; off += maxBlasLen {
		k := min(n-off, maxBlasLen)
		x0, y0 := p[0]+uintptr(off)*4, p[1]+uintptr(off)*4
		if err := m.blasCall(op, s, func(b *cublas, h uintptr, f *dl.Frame) int32 {
			f.Out[0] = uint64(math.Float32bits(alpha))
			return int32(f.Call(b.saxpy, h, uintptr(k), f.OutPtr(0), x0, 1, y0, 1))
		}); err != nil {
			return err
		}
	}
	return nil
}

// cublasPointerMode_t: where scalar arguments and results live.
const (
	cublasPointerModeHost   = 0
	cublasPointerModeDevice = 1
)

// Dot enqueues result[0] = Σ x[i]·y[i] for n float32s (cublasSdot), the
// handle switched to device pointer mode for the call so that the sum is
// written on the device in stream order, with no wait for it on the host;
// the handle is back in host mode, which every other call here assumes,
// before the stream's lock is let go.
func (m *Impl) Dot(sh any, x, y, result runtime.Buffer, n int) error {
	const op = "Dot"
	s, p, err := m.vectors(op, sh, n, x, y)
	if err != nil {
		return err
	}
	_, r, err := m.vectors(op, sh, 1, result)
	if err != nil {
		return err
	}
	if n > maxBlasLen {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "n=%d: more than a cuBLAS call takes (%d); sum the parts", n, maxBlasLen)
	}
	return m.blasCall(op, s, func(b *cublas, h uintptr, f *dl.Frame) int32 {
		if rc := int32(f.Call(b.setPointerMode, h, cublasPointerModeDevice)); rc != 0 {
			return rc
		}
		rc := int32(f.Call(b.sdot, h, uintptr(n), p[0], 1, p[1], 1, r[0]))
		if back := int32(f.Call(b.setPointerMode, h, cublasPointerModeHost)); rc == 0 {
			rc = back
		}
		return rc
	})
}

// maxBlasLen is the longest vector one cuBLAS level-1 call takes (its
// length is a C int).
const maxBlasLen = math.MaxInt32

// Scale enqueues x[i] *= alpha for n float32s (cublasSscal).
func (m *Impl) Scale(sh any, alpha float32, x runtime.Buffer, n int) error {
	const op = "Scale"
	s, p, err := m.vectors(op, sh, n, x)
	if err != nil || n == 0 {
		return err
	}
	for off := 0; off < n; off += maxBlasLen {
		k := min(n-off, maxBlasLen)
		x0 := p[0] + uintptr(off)*4
		if err := m.blasCall(op, s, func(b *cublas, h uintptr, f *dl.Frame) int32 {
			f.Out[0] = uint64(math.Float32bits(alpha))
			return int32(f.Call(b.sscal, h, uintptr(k), f.OutPtr(0), x0, 1))
		}); err != nil {
			return err
		}
	}
	return nil
}
