package runtime

import (
	"math"
	"math/bits"
	"time"
)

// Gemm enqueues C = alpha·op(A)·op(B) + beta·C on s (see GemmArgs). The
// shapes are checked against the buffers' sizes before the backend sees
// them. A reduced precision (g.Math) goes to backends with the MathModes
// capability, which refuse the modes they lack themselves; any other
// backend is refused it here with StatusNotSupported, since it would
// ignore the field.
func Gemm(s *Stream, g GemmArgs) error {
	if err := s.live("Gemm"); err != nil {
		return err
	}
	if err := checkGemm(g, s.dev); err != nil {
		return err
	}
	if _, ok := s.impl.(MathModes); !ok && g.Math != MathDefault {
		return Errorf("Gemm", StatusNotSupported, "the %s backend computes float32 GEMMs in full precision only, not %s", s.impl.Type(), g.Math)
	}
	s.enqueued()
	return s.impl.Gemm(s.h, g)
}

func checkGemm(g GemmArgs, dev Device) error {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return Errorf("Gemm", StatusInvalidArgument, "negative shape M=%d N=%d K=%d", g.M, g.N, g.K)
	}
	es := int64(g.Type.Size())
	if es == 0 {
		return Errorf("Gemm", StatusInvalidArgument, "data type %s", g.Type)
	}
	if !g.Math.valid() {
		return Errorf("Gemm", StatusInvalidArgument, "%s", g.Math)
	}
	if g.Math != MathDefault && g.Type != Float32 {
		return Errorf("Gemm", StatusInvalidArgument, "math mode %s needs float32 operands, not %s", g.Math, g.Type)
	}
	// Column-major: a rows×cols matrix with leading dimension ld needs
	// ld ≥ rows and ld·(cols−1)+rows elements.
	need := func(name string, b Buffer, rows, cols, ld int) error {
		if rows == 0 || cols == 0 {
			return nil
		}
		if err := b.check("Gemm"); err != nil {
			return Errorf("Gemm", StatusInvalidArgument, "matrix %s: zero Buffer", name)
		}
		if b.dev != dev {
			return Errorf("Gemm", StatusInvalidArgument, "matrix %s on %s, stream on %s", name, b.dev, dev)
		}
		if ld < max(1, rows) {
			return Errorf("Gemm", StatusInvalidArgument, "ld%s=%d smaller than %d rows", name, ld, rows)
		}
		// Compared in elements, so that no product can overflow: a
		// shape of 2^40 on each side passed and reached the backend.
		holds := b.size / es
		if int64(rows) <= holds && (cols == 1 || int64(ld) <= (holds-int64(rows))/int64(cols-1)) {
			return nil
		}
		if n, ok := matrixBytes(ld, rows, cols, es); ok {
			return Errorf("Gemm", StatusInvalidArgument, "matrix %s needs %d bytes, buffer has %d", name, n, b.size)
		}
		return Errorf("Gemm", StatusInvalidArgument, "matrix %s (%d×%d, ld%s=%d) needs more than 2^63 bytes, buffer has %d", name, rows, cols, name, ld, b.size)
	}
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = ac, ar
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = bc, br
	}
	if err := need("A", g.A, ar, ac, g.LDA); err != nil {
		return err
	}
	if err := need("B", g.B, br, bc, g.LDB); err != nil {
		return err
	}
	return need("C", g.C, g.M, g.N, g.LDC)
}

// matrixBytes is (ld·(cols−1)+rows)·es for non-negative sizes, and
// whether it fits in an int64.
func matrixBytes(ld, rows, cols int, es int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(ld), uint64(cols-1))
	elems, carry := bits.Add64(lo, uint64(rows), 0)
	if hi != 0 || carry != 0 || elems > math.MaxInt64/uint64(es) {
		return 0, false
	}
	return int64(elems) * es, true
}

func elementwise(s *Stream, op string, n int, bufs ...Buffer) (Elementwise, error) {
	if err := s.live(op); err != nil {
		return nil, err
	}
	ew, ok := s.impl.(Elementwise)
	if !ok {
		return nil, Errorf(op, StatusNotSupported, "the %s backend has no elementwise kernels", s.impl.Type())
	}
	if n < 0 {
		return nil, Errorf(op, StatusInvalidArgument, "n=%d", n)
	}
	for _, b := range bufs {
		if err := b.check(op); err != nil {
			return nil, err
		}
		if b.dev != s.dev {
			return nil, Errorf(op, StatusInvalidArgument, "buffer on %s, stream on %s", b.dev, s.dev)
		}
		if int64(n) > b.size/4 { // not n·4, which may overflow
			return nil, Errorf(op, StatusInvalidArgument, "%d float32 elements in a %d-byte buffer", n, b.size)
		}
	}
	s.enqueued()
	return ew, nil
}

// Tanh enqueues y = tanh(x) over n float32 elements.
func Tanh(s *Stream, x, y Buffer, n int) error {
	ew, err := elementwise(s, "Tanh", n, x, y)
	if err != nil {
		return err
	}
	return ew.Tanh(s.h, x, y, n)
}

// TanhBackward enqueues dx = dy·(1 − y²) over n float32 elements.
func TanhBackward(s *Stream, y, dy, dx Buffer, n int) error {
	ew, err := elementwise(s, "TanhBackward", n, y, dy, dx)
	if err != nil {
		return err
	}
	return ew.TanhBackward(s.h, y, dy, dx, n)
}

// Axpy enqueues y += alpha·x over n float32 elements.
func Axpy(s *Stream, alpha float32, x, y Buffer, n int) error {
	ew, err := elementwise(s, "Axpy", n, x, y)
	if err != nil {
		return err
	}
	return ew.Axpy(s.h, alpha, x, y, n)
}

// Scale enqueues x *= alpha over n float32 elements.
func Scale(s *Stream, alpha float32, x Buffer, n int) error {
	ew, err := elementwise(s, "Scale", n, x)
	if err != nil {
		return err
	}
	return ew.Scale(s.h, alpha, x, n)
}

// Dot enqueues result[0] = Σ x[i]·y[i] over n float32 elements, the sum
// written to the device in stream order (a one-element result buffer on
// s's device): a reduction for the built-in trainer's loss that needs no
// copy back until the step's end. n is at most math.MaxInt32 (a BLAS
// library's C int): callers sum longer vectors in parts.
func Dot(s *Stream, x, y, result Buffer, n int) error {
	if n > math.MaxInt32 {
		return Errorf("Dot", StatusInvalidArgument, "n=%d: more than %d elements in one sum; sum the parts", n, math.MaxInt32)
	}
	// The result first: elementwise counts the operation once it has
	// checked the vectors.
	if err := result.check("Dot"); err != nil {
		return err
	}
	if result.size < 4 {
		return Errorf("Dot", StatusInvalidArgument, "a %d-byte result buffer holds no float32", result.size)
	}
	if result.dev != s.dev {
		return Errorf("Dot", StatusInvalidArgument, "result on %s, stream on %s", result.dev, s.dev)
	}
	ew, err := elementwise(s, "Dot", n, x, y)
	if err != nil {
		return err
	}
	return ew.Dot(s.h, x, y, result, n)
}

// Sleep enqueues a wait of d on s (see Sleeper): the stream holds still
// for d without computing, and what is enqueued after it starts no sooner.
// A d of 0 enqueues nothing; backends without the capability return
// StatusNotSupported.
func Sleep(s *Stream, d time.Duration) error {
	if err := s.live("Sleep"); err != nil {
		return err
	}
	if d < 0 {
		return Errorf("Sleep", StatusInvalidArgument, "negative duration %v", d)
	}
	sl, ok := s.impl.(Sleeper)
	if !ok {
		return Errorf("Sleep", StatusNotSupported, "the %s backend cannot hold a stream still", s.impl.Type())
	}
	if d == 0 {
		return nil
	}
	s.enqueued()
	return sl.Sleep(s.h, d)
}
