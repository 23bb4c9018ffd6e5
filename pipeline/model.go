package pipeline

import "github.com/trainscope/trainscope/runtime"

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

// linearForward enqueues z = x·w for rows rows.
func linearForward(s *runtime.Stream, w, x, z runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return runtime.Gemm(s, runtime.GemmArgs{
		M: width, N: rows, K: width, Alpha: 1,
		A: w, LDA: width, B: x, LDB: width, C: z, LDC: width,
		Type: runtime.Float32, Math: math,
	})
}

// linearGradWeight enqueues dw += xᵀ·dz.
func linearGradWeight(s *runtime.Stream, x, dz, dw runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return runtime.Gemm(s, runtime.GemmArgs{
		TransB: true,
		M:      width, N: width, K: rows, Alpha: 1, Beta: 1,
		A: dz, LDA: width, B: x, LDB: width, C: dw, LDC: width,
		Type: runtime.Float32, Math: math,
	})
}

// linearGradInput enqueues dx = dz·wᵀ.
func linearGradInput(s *runtime.Stream, w, dz, dx runtime.Buffer, rows, width int, math runtime.MathMode) error {
	return runtime.Gemm(s, runtime.GemmArgs{
		TransA: true,
		M:      width, N: rows, K: width, Alpha: 1,
		A: w, LDA: width, B: dz, LDB: width, C: dx, LDC: width,
		Type: runtime.Float32, Math: math,
	})
}
