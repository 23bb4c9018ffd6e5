package cpu

import (
	"github.com/trainscope/trainscope/runtime"
)

// gemmCall is one GEMM with its operands resolved to host memory.
type gemmCall struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
}

func (g *gemmCall) run() {
	sgemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
}

// Gemm enqueues C = alpha·op(A)·op(B) + beta·C on the stream, in BLAS
// conventions (column-major, leading dimensions in elements). Only float32
// is supported, computed in full fp32: a reduced precision (g.Math
// MathTF32 or MathBF16) is refused with StatusNotSupported. With beta 0, C
// is overwritten without being read, so NaNs in it do not propagate; with
// alpha 0, A and B are not read.
func (m *Impl) Gemm(sh any, g runtime.GemmArgs) error {
	const op = "Gemm"
	s, err := m.stream(op, sh)
	if err != nil {
		return err
	}
	if g.Type != runtime.Float32 {
		return runtime.Errorf(op, runtime.StatusNotSupported, "the cpu backend's GEMM supports float32, not %s", g.Type)
	}
	if g.Math != runtime.MathDefault {
		return runtime.Errorf(op, runtime.StatusNotSupported, "the cpu backend computes in float32, not %s", g.Math)
	}
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return runtime.Errorf(op, runtime.StatusInvalidArgument, "negative shape M=%d N=%d K=%d", g.M, g.N, g.K)
	}
	call := &gemmCall{
		transA: g.TransA, transB: g.TransB,
		m: g.M, n: g.N, k: g.K,
		alpha: g.Alpha, beta: g.Beta,
		lda: g.LDA, ldb: g.LDB, ldc: g.LDC,
	}
	if g.M == 0 || g.N == 0 {
		if s.isClosed() {
			return errDestroyed(op)
		}
		return nil // nothing to compute
	}
	if call.c, err = m.matrix("C", g.C, g.M, g.N, g.LDC); err != nil {
		return err
	}
	if g.K > 0 {
		ar, ac := g.M, g.K
		if g.TransA {
			ar, ac = ac, ar
		}
		br, bc := g.K, g.N
		if g.TransB {
			br, bc = bc, br
		}
		if call.a, err = m.matrix("A", g.A, ar, ac, g.LDA); err != nil {
			return err
		}
		if call.b, err = m.matrix("B", g.B, br, bc, g.LDB); err != nil {
			return err
		}
	}
	return s.push(op, &item{kind: opGemm, gemm: call})
}

// matrix returns the float32s of a rows×cols column-major matrix with
// leading dimension ld stored in b, checking that they fit.
func (m *Impl) matrix(name string, b runtime.Buffer, rows, cols, ld int) ([]float32, error) {
	const op = "Gemm"
	if ld < max(1, rows) {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "ld%s=%d smaller than %d rows", name, ld, rows)
	}
	v, err := m.floats(op, b)
	if err != nil {
		return nil, err
	}
	// ld·(cols−1)+rows elements, compared without a product that could
	// overflow.
	holds := int64(len(v))
	if int64(rows) > holds || (cols > 1 && int64(ld) > (holds-int64(rows))/int64(cols-1)) {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "matrix %s (%d×%d, ld%s=%d) does not fit a buffer of %d float32s", name, rows, cols, name, ld, len(v))
	}
	return v, nil
}

// SupportsMath reports whether float32 GEMMs compute in mode: only
// MathDefault (full fp32), the one precision the host kernel has.
func (*Impl) SupportsMath(mode runtime.MathMode) bool { return mode == runtime.MathDefault }
