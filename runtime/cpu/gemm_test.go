package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// naiveGemm is the BLAS definition, accumulated in float64: the reference
// the blocked GEMM is checked against.
func naiveGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	opA := func(i, p int) float64 {
		if transA {
			return float64(a[p+i*lda])
		}
		return float64(a[i+p*lda])
	}
	opB := func(p, j int) float64 {
		if transB {
			return float64(b[j+p*ldb])
		}
		return float64(b[p+j*ldb])
	}
	for j := range n {
		for i := range m {
			var sum float64
			for p := range k {
				sum += opA(i, p) * opB(p, j)
			}
			v := float64(alpha) * sum
			if beta != 0 {
				v += float64(beta) * float64(c[i+j*ldc])
			}
			c[i+j*ldc] = float32(v)
		}
	}
}

func randomF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// gemmCase is one GEMM of the table: shapes, ops, scalars, extra leading
// dimension and element offsets of the three buffers inside larger
// allocations.
type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	padA, padB     int // ld − rows
	padC           int
	offA, offB     int // elements before the matrix
	offC           int
}

func (g gemmCase) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_%dx%dx%d_a%g_b%g_pad%d.%d.%d_off%d.%d.%d", t(g.transA), t(g.transB), g.m, g.n, g.k, g.alpha, g.beta, g.padA, g.padB, g.padC, g.offA, g.offB, g.offC)
}

func gemmCases() []gemmCase {
	shapes := [][3]int{
		{1, 1, 1}, {1, 1, 7}, {2, 3, 1}, {3, 5, 7}, {4, 4, 4}, {5, 4, 3},
		{7, 9, 13}, {16, 16, 16}, {17, 33, 65}, {33, 1, 70}, {1, 45, 9},
		{129, 7, 300}, {64, 130, 257}, {131, 1030, 5},
	}
	scalars := [][2]float32{{1, 0}, {1, 1}, {0.5, -2}, {-1.25, 0.75}}
	var cases []gemmCase
	for si, sh := range shapes {
		for tt := range 4 {
			sc := scalars[(si+tt)%len(scalars)]
			g := gemmCase{
				transA: tt&1 != 0, transB: tt&2 != 0,
				m: sh[0], n: sh[1], k: sh[2],
				alpha: sc[0], beta: sc[1],
			}
			if si%2 == 1 { // every other shape: padded leading dimensions and views
				g.padA, g.padB, g.padC = 3, 1, 5
				g.offA, g.offB, g.offC = 1, 7, 2
			}
			cases = append(cases, g)
		}
	}
	return cases
}

func TestGemmMatchesNaive(t *testing.T) {
	s := newStream(t, dev0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range gemmCases() {
		t.Run(g.String(), func(t *testing.T) {
			ar, ac := g.m, g.k
			if g.transA {
				ar, ac = ac, ar
			}
			br, bc := g.k, g.n
			if g.transB {
				br, bc = bc, br
			}
			lda, ldb, ldc := ar+g.padA, br+g.padB, g.m+g.padC
			a := randomF32(r, g.offA+lda*ac)
			b := randomF32(r, g.offB+ldb*bc)
			c := randomF32(r, g.offC+ldc*g.n)

			view := func(host []float32, off int) runtime.Buffer {
				buf := malloc(t, dev0, int64(4*len(host)))
				uploadF32(t, buf, host)
				v, err := buf.Elems(runtime.Float32, off, len(host)-off)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			bufC := malloc(t, dev0, int64(4*len(c)))
			uploadF32(t, bufC, c)
			viewC, err := bufC.Elems(runtime.Float32, g.offC, len(c)-g.offC)
			if err != nil {
				t.Fatal(err)
			}
			err = runtime.Gemm(s, runtime.GemmArgs{
				TransA: g.transA, TransB: g.transB,
				M: g.m, N: g.n, K: g.k, Alpha: g.alpha, Beta: g.beta,
				A: view(a, g.offA), B: view(b, g.offB), C: viewC,
				LDA: lda, LDB: ldb, LDC: ldc, Type: runtime.Float32,
			})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]float32(nil), c...)
			naiveGemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, a[g.offA:], lda, b[g.offB:], ldb, g.beta, want[g.offC:], ldc)
			if err := s.Synchronize(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := downloadF32(t, bufC, len(c))
			tol := 1e-5 * float64(g.k+2)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > tol || math.IsNaN(d) {
					t.Fatalf("C[%d] = %v, want %v (|diff| %g > %g)", i, got[i], want[i], d, tol)
				}
			}
		})
	}
}

// With beta 0, C is overwritten, NaNs included; with alpha 0, A and B are
// not read.
func TestGemmSpecialScalars(t *testing.T) {
	s := newStream(t, dev0)
	nan := float32(math.NaN())
	const m, n, k = 5, 6, 7
	cases := []struct {
		name        string
		alpha, beta float32
		a, c        float32 // fill values
		want        float32
	}{
		{"beta0 overwrites NaN", 1, 0, 1, nan, k * 2},
		{"alpha0 ignores NaN inputs", 0, 3, nan, 2, 6},
		{"alpha0 beta0 zeroes", 0, 0, nan, nan, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fill := func(n int, v float32) runtime.Buffer {
				host := make([]float32, n)
				for i := range host {
					host[i] = v
				}
				buf := malloc(t, dev0, int64(4*n))
				uploadF32(t, buf, host)
				return buf
			}
			a, b, c := fill(m*k, tc.a), fill(k*n, 2), fill(m*n, tc.c)
			err := runtime.Gemm(s, runtime.GemmArgs{M: m, N: n, K: k, Alpha: tc.alpha, Beta: tc.beta,
				A: a, B: b, C: c, LDA: m, LDB: k, LDC: m, Type: runtime.Float32})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(t.Context()); err != nil {
				t.Fatal(err)
			}
			for i, v := range downloadF32(t, c, m*n) {
				if v != tc.want {
					t.Fatalf("C[%d] = %v, want %v", i, v, tc.want)
				}
			}
		})
	}
}

func TestGemmErrors(t *testing.T) {
	impl := registered(t)
	s := newStream(t, dev0)
	buf := malloc(t, dev0, 64)
	odd, err := buf.Slice(2, 32)
	if err != nil {
		t.Fatal(err)
	}
	ok := runtime.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1, A: buf, B: buf, C: buf, LDA: 2, LDB: 2, LDC: 2, Type: runtime.Float32}
	with := func(f func(*runtime.GemmArgs)) runtime.GemmArgs { g := ok; f(&g); return g }
	cases := []struct {
		name   string
		stream any
		args   runtime.GemmArgs
		want   runtime.Status
	}{
		{"valid", s.Handle(), ok, runtime.StatusSuccess},
		{"float64", s.Handle(), with(func(g *runtime.GemmArgs) { g.Type = runtime.Float64 }), runtime.StatusNotSupported},
		{"negative", s.Handle(), with(func(g *runtime.GemmArgs) { g.K = -1 }), runtime.StatusInvalidArgument},
		{"small lda", s.Handle(), with(func(g *runtime.GemmArgs) { g.LDA = 1 }), runtime.StatusInvalidArgument},
		{"too big", s.Handle(), with(func(g *runtime.GemmArgs) { g.M, g.LDA, g.LDC = 9, 9, 9 }), runtime.StatusInvalidArgument},
		// Sizes whose element count overflows int64 (1<<40 squared).
		{"huge", s.Handle(), with(func(g *runtime.GemmArgs) {
			g.M, g.N, g.K, g.LDA, g.LDB, g.LDC = 1<<40, 1<<40, 1<<40, 1<<40, 1<<40, 1<<40
		}), runtime.StatusInvalidArgument},
		{"unaligned view", s.Handle(), with(func(g *runtime.GemmArgs) { g.A = odd }), runtime.StatusInvalidArgument},
		{"zero buffer", s.Handle(), with(func(g *runtime.GemmArgs) { g.B = runtime.Buffer{} }), runtime.StatusInvalidArgument},
		{"foreign stream", "stream", ok, runtime.StatusInvalidArgument},
		{"nil stream", nil, ok, runtime.StatusInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, impl.Gemm(tc.stream, tc.args), tc.want)
		})
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The host kernel computes in fp32 only: a GEMM asking for TF32 or
// bfloat16 compute is refused, says why, and leaves C as it was.
func TestGemmReducedPrecisionNotSupported(t *testing.T) {
	impl := registered(t)
	s := newStream(t, dev0)
	a, b, c := malloc(t, dev0, 16), malloc(t, dev0, 16), malloc(t, dev0, 16)
	uploadF32(t, a, []float32{1, 2, 3, 4})
	uploadF32(t, b, []float32{5, 6, 7, 8})
	before := []float32{-1, -2, -3, -4}
	uploadF32(t, c, before)
	for _, m := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
		if impl.SupportsMath(m) {
			t.Errorf("SupportsMath(%s) = true on the cpu backend", m)
		}
		g := runtime.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c, LDA: 2, LDB: 2, LDC: 2, Type: runtime.Float32, Math: m}
		for name, err := range map[string]error{"impl": impl.Gemm(s.Handle(), g), "runtime": runtime.Gemm(s, g)} {
			if !errors.Is(err, runtime.StatusNotSupported) {
				t.Errorf("%s.Gemm with %s: %v, want NotSupported", name, m, err)
				continue
			}
			for _, w := range []string{"cpu backend computes in float32", m.String()} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s.Gemm with %s: %q does not say %q", name, m, err, w)
				}
			}
		}
	}
	if !impl.SupportsMath(runtime.MathDefault) {
		t.Error("SupportsMath(MathDefault) = false on the cpu backend")
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := downloadF32(t, c, 4); !slices.Equal(got, before) {
		t.Errorf("C = %v after refused GEMMs, want it untouched: %v", got, before)
	}
	// The same GEMM in the default mode runs: 1·5+3·6 = 23 in C's first
	// element (column-major).
	g := runtime.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c, LDA: 2, LDB: 2, LDC: 2, Type: runtime.Float32}
	if err := runtime.Gemm(s, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := downloadF32(t, c, 4); !slices.Equal(got, []float32{23, 34, 31, 46}) {
		t.Errorf("float32 GEMM gave %v, want [23 34 31 46]", got)
	}
}

// BenchmarkGemm reports GFLOP/s of a 256³ GEMM through the stream, beside
// the naive triple loop run on the same stream.
func BenchmarkGemm(b *testing.B) {
	const n = 256
	s := newStream(b, dev0)
	r := rand.New(rand.NewPCG(3, 4))
	bufs := make([]runtime.Buffer, 3)
	host := make([][]float32, 3)
	for i := range bufs {
		bufs[i] = malloc(b, dev0, 4*n*n)
		host[i] = randomF32(r, n*n)
		uploadF32(b, bufs[i], host[i])
	}
	flops := 2.0 * n * n * n
	for _, tt := range []struct {
		name           string
		transA, transB bool
	}{{"NN", false, false}, {"TN", true, false}, {"NT", false, true}, {"TT", true, true}} {
		b.Run("blocked/"+tt.name, func(b *testing.B) {
			b.ReportAllocs()
			g := runtime.GemmArgs{TransA: tt.transA, TransB: tt.transB, M: n, N: n, K: n, Alpha: 1,
				A: bufs[0], B: bufs[1], C: bufs[2], LDA: n, LDB: n, LDC: n, Type: runtime.Float32}
			for b.Loop() {
				if err := runtime.Gemm(s, g); err != nil {
					b.Fatal(err)
				}
				if err := s.Synchronize(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	b.Run("naive/NN", func(b *testing.B) {
		b.ReportAllocs()
		a, bb, c := host[0], host[1], host[2]
		for b.Loop() {
			err := cpu.Enqueue(s, func() {
				for j := range n {
					for i := range n {
						var sum float32
						for p := range n {
							sum += a[i+p*n] * bb[p+j*n]
						}
						c[i+j*n] = sum
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Synchronize(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
