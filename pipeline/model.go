package pipeline

import (
	stdmath "math"

	"github.com/trainscope/trainscope/runtime"
)

// Device layout. Activations are row-major rows×width matrices (one sample
// per row), which BLAS, being column-major, sees as width×rows matrices
// with leading dimension width. A weight is row-major [in][out], which
// BLAS sees as its transpose. In those terms a layer computes, for a
// microbatch X (rows×width) and weight W:
//
//	forward:  Z = X·W          → Zᵀ = Wᵀ·Xᵀ           (no transposes)
//	weights:  dW += Xᵀ·dZ      → dWᵀ += dZᵀ·(Xᵀ)ᵀ     (B transposed)
//	input:    dX = dZ·Wᵀ       → dXᵀ = (Wᵀ)ᵀ·dZᵀ      (A transposed)
//
// so every GEMM below has M = width and leading dimensions width. Each
// computes in precision math (Config.EffectivePrecision), on float32
// operands.
//
// BLAS libraries take 32-bit dimensions, and cuBLAS does not reach the
// top of that range: on an H200 (CUDA 13) one SGEMM of M = K = 1 and
// N = 2^31−1 failed with CUBLAS_STATUS_INTERNAL_ERROR, where N = 2^30
// and N = 2^31 − 2^16 ran, in either layout of B, and a dot product of
// K = 2^31−1 ran too. So a GEMM over more rows than maxGemmRows (2^30) is
// enqueued in pieces of at most maxGemmRows rows; Width, the other
// dimension, is far smaller (Validate bounds Width² by the memory a rank
// may count). The loss's dot product runs over rows·Width elements in
// pieces of at most maxDotLen.

// maxGemmRows and maxDotLen bound the pieces above; tests lower them to
// exercise the pieces.
var (
	maxGemmRows = 1 << 30
	maxDotLen   = stdmath.MaxInt32
)

// inPieces calls f for consecutive pieces [off, off+k) of [0, n), each at
// most most long, in order; the first has off 0.
func inPieces(n, most int, f func(off, k int) error) error {
	for off := 0; off < n; off += min(n-off, most) {
		if err := f(off, min(n-off, most)); err != nil {
			return err
		}
	}
	return nil
}

// rowsOf is rows off … off+k−1 of b, a row-major matrix of width columns.
func rowsOf(b runtime.Buffer, off, k, width int) (runtime.Buffer, error) {
	return b.Elems(runtime.Float32, off*width, k*width)
}

// linearForward enqueues z = x·w for rows rows.
func linearForward(s *runtime.Stream, w, x, z runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return inPieces(rows, maxGemmRows, func(off, k int) error {
		xk, err := rowsOf(x, off, k, width)
		if err != nil {
			return err
		}
		zk, err := rowsOf(z, off, k, width)
		if err != nil {
			return err
		}
		return runtime.Gemm(s, runtime.GemmArgs{
			M: width, N: k, K: width, Alpha: 1,
			A: w, LDA: width, B: xk, LDB: width, C: zk, LDC: width,
			Type: runtime.Float32, Math: math,
		})
	})
}

// linearGradWeight enqueues dw += xᵀ·dz.
func linearGradWeight(s *runtime.Stream, x, dz, dw runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return inPieces(rows, maxGemmRows, func(off, k int) error {
		xk, err := rowsOf(x, off, k, width)
		if err != nil {
			return err
		}
		dzk, err := rowsOf(dz, off, k, width)
		if err != nil {
			return err
		}
		return runtime.Gemm(s, runtime.GemmArgs{
			TransB: true,
			M:      width, N: width, K: k, Alpha: 1, Beta: 1,
			A: dzk, LDA: width, B: xk, LDB: width, C: dw, LDC: width,
			Type: runtime.Float32, Math: math,
		})
	})
}

// linearGradInput enqueues dx = dz·wᵀ.
func linearGradInput(s *runtime.Stream, w, dz, dx runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return inPieces(rows, maxGemmRows, func(off, k int) error {
		dzk, err := rowsOf(dz, off, k, width)
		if err != nil {
			return err
		}
		dxk, err := rowsOf(dx, off, k, width)
		if err != nil {
			return err
		}
		return runtime.Gemm(s, runtime.GemmArgs{
			TransA: true,
			M:      width, N: k, K: width, Alpha: 1,
			A: w, LDA: width, B: dzk, LDB: width, C: dxk, LDC: width,
			Type: runtime.Float32, Math: math,
		})
	})
}
