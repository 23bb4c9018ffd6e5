package pipeline

import (
	"errors"
	"math"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func upload(t *testing.T, dev runtime.Device, v []float32) runtime.Buffer {
	t.Helper()
	b, err := runtime.Malloc(dev, int64(4*len(v)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Free(b) })
	if err := runtime.CopyToDevice(b, float32Bytes(v, nil), nil); err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t *testing.T, s *runtime.Stream, b runtime.Buffer, n int) []float32 {
	t.Helper()
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*n)
	if err := runtime.CopyToHost(raw, b, nil); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
	}
	return out
}

func near(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Errorf("%s = %v, want %v", what, got, want)
			return
		}
	}
}

// One layer of two samples and two features, worked by hand:
//
//	X = [1 2; 3 4], W = [0.5 −1; 0.25 0] ([in][out])
//	X·W = [1 −1; 2.5 −3], Y = tanh(X·W)
//	with dZ = [1 0; 0 2] and dW starting at ones:
//	dW + Xᵀ·dZ = [1 1; 1 1] + [1 6; 2 8] = [2 7; 3 9]
//	dZ·Wᵀ = [0.5 0.25; −2 0]
func TestLayerByHand(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x := upload(t, dev, []float32{1, 2, 3, 4})
	w := upload(t, dev, []float32{0.5, -1, 0.25, 0})
	y := upload(t, dev, make([]float32, 4))
	if err := linearForward(s, w, x, y, 2, 2, runtime.MathDefault); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Tanh(s, y, y, 4); err != nil {
		t.Fatal(err)
	}
	near(t, "tanh(X·W)", download(t, s, y, 4), []float64{0.7615941559557649, -0.7615941559557649, 0.9866142981514303, -0.9950547536867305})

	dz := upload(t, dev, []float32{1, 0, 0, 2})
	dw := upload(t, dev, []float32{1, 1, 1, 1})
	if err := linearGradWeight(s, x, dz, dw, 2, 2, runtime.MathDefault); err != nil {
		t.Fatal(err)
	}
	near(t, "dW", download(t, s, dw, 4), []float64{2, 7, 3, 9})

	dx := upload(t, dev, make([]float32, 4))
	if err := linearGradInput(s, w, dz, dx, 2, 2, runtime.MathDefault); err != nil {
		t.Fatal(err)
	}
	near(t, "dX", download(t, s, dx, 4), []float64{0.5, 0.25, -2, 0})
}

// Each layer GEMM carries the precision it is given to the backend: the
// cpu backend, which computes in float32 only, refuses the others.
func TestLayerPrecisionReachesBackend(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, b, c := upload(t, dev, make([]float32, 4)), upload(t, dev, make([]float32, 4)), upload(t, dev, make([]float32, 4))
	for _, m := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
		for name, err := range map[string]error{
			"forward":     linearForward(s, a, b, c, 2, 2, m),
			"grad weight": linearGradWeight(s, a, b, c, 2, 2, m),
			"grad input":  linearGradInput(s, a, b, c, 2, 2, m),
		} {
			if !errors.Is(err, runtime.StatusNotSupported) {
				t.Errorf("%s in %s on cpu: %v, want NotSupported", name, m, err)
			}
		}
	}
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A GEMM over more rows than maxGemmRows (2^30 in use: see model.go),
// and a loss over more elements than maxDotLen, run in pieces. With the
// bounds lowered to 3, every layer GEMM (4 rows a microbatch), the
// targets' GEMM (16 rows) and the loss's dot product (64 elements) is
// split, and training still agrees with the float64 reference.
func TestGemmInPieces(t *testing.T) {
	defer func(rows, dot int) { maxGemmRows, maxDotLen = rows, dot }(maxGemmRows, maxDotLen)
	maxGemmRows, maxDotLen = 3, 3
	for _, cfg := range []Config{
		smallConfig(2, 2, 1, Schedule1F1B),
		smallConfig(1, 1, 2, ScheduleGPipe),
	} {
		want, err := ReferenceLosses(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Train(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range res.Losses {
			if rel := math.Abs(got-want[i]) / want[i]; !(rel <= 1e-4) {
				t.Errorf("pp%d vpp%d dp%d step %d: loss %.9g, reference %.9g", cfg.Stages, cfg.Chunks, cfg.Replicas, i, got, want[i])
			}
		}
	}
}
