package cpu_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func TestElementwise(t *testing.T) {
	s := newStream(t, dev0)
	r := rand.New(rand.NewPCG(5, 6))
	const n = 37
	x := randomF32(r, n)
	for i := range x {
		x[i] *= 4 // reach tanh's flat tails
	}
	y := randomF32(r, n)
	dy := randomF32(r, n)
	cases := []struct {
		name string
		run  func(bx, by, bz runtime.Buffer) error
		out  int // which buffer holds the result: 0 x, 1 y, 2 z
		want func(i int) float64
	}{
		{"Tanh", func(bx, by, _ runtime.Buffer) error { return runtime.Tanh(s, bx, by, n) }, 1,
			func(i int) float64 { return math.Tanh(float64(x[i])) }},
		{"TanhBackward", func(bx, by, bz runtime.Buffer) error { return runtime.TanhBackward(s, bx, by, bz, n) }, 2,
			func(i int) float64 { return float64(y[i]) * (1 - float64(x[i])*float64(x[i])) }},
		{"Axpy", func(bx, by, _ runtime.Buffer) error { return runtime.Axpy(s, -0.5, bx, by, n) }, 1,
			func(i int) float64 { return float64(y[i]) - 0.5*float64(x[i]) }},
		{"Scale", func(bx, _, _ runtime.Buffer) error { return runtime.Scale(s, 3, bx, n) }, 0,
			func(i int) float64 { return 3 * float64(x[i]) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Views at an offset, inside larger allocations.
			bufs := make([]runtime.Buffer, 3)
			for i, host := range [][]float32{x, y, dy} {
				whole := malloc(t, dev0, 4*(n+3))
				v, err := whole.Elems(runtime.Float32, 2, n)
				if err != nil {
					t.Fatal(err)
				}
				uploadF32(t, v, host)
				bufs[i] = v
			}
			if err := tc.run(bufs[0], bufs[1], bufs[2]); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := downloadF32(t, bufs[tc.out], n)
			for i := range n {
				if want := tc.want(i); math.Abs(float64(got[i])-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("element %d = %v, want %v", i, got[i], want)
				}
			}
		})
	}
}

func TestElementwiseErrors(t *testing.T) {
	impl := registered(t)
	s := newStream(t, dev0)
	buf := malloc(t, dev0, 16)
	odd, err := buf.Slice(1, 8)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"too long", func() error { return impl.Tanh(s.Handle(), buf, buf, 5) }},
		{"n·4 overflows", func() error { return impl.Axpy(s.Handle(), 1, buf, buf, 1<<62) }},
		{"negative n", func() error { return impl.Scale(s.Handle(), 1, buf, -1) }},
		{"unaligned", func() error { return impl.Axpy(s.Handle(), 1, odd, buf, 1) }},
		{"zero buffer", func() error { return impl.TanhBackward(s.Handle(), buf, runtime.Buffer{}, buf, 1) }},
		{"not a stream", func() error { return impl.Scale(buf, 1, buf, 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), runtime.StatusInvalidArgument) })
	}
}
