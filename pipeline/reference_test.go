package pipeline

import (
	"math"
	"testing"
)

// The reference's gradient agrees with central finite differences of its
// loss, for a few weights of every layer.
func TestReferenceGradient(t *testing.T) {
	cfg := smallConfig(1, 1, 1, Schedule1F1B)
	cfg.Width, cfg.Layers, cfg.Microbatches, cfg.MicrobatchSize = 5, 3, 1, 3
	m := newRefModel(cfg)
	rows, w := cfg.globalRows(), cfg.Width
	proj := targetProjection(cfg.Seed, w)
	x := make([]float32, rows*w)
	y := make([]float32, rows*w)
	batchRows(cfg.Seed, 0, rows, w, proj, x, y)
	m.lossGrad(x, y)
	grads := make([][]float64, len(m.grads))
	for l, g := range m.grads {
		grads[l] = append([]float64(nil), g...)
	}
	loss := func() float64 {
		for _, g := range m.grads {
			clear(g)
		}
		return m.lossGrad(x, y)
	}
	const h = 1e-6
	for l := range m.weights {
		for _, i := range []int{0, 7, w*w - 1} {
			orig := m.weights[l][i]
			m.weights[l][i] = orig + h
			up := loss()
			m.weights[l][i] = orig - h
			down := loss()
			m.weights[l][i] = orig
			fd := (up - down) / (2 * h)
			if d := math.Abs(fd - grads[l][i]); d > 1e-7+1e-5*math.Abs(fd) {
				t.Errorf("layer %d weight %d: gradient %.10g, finite difference %.10g", l, i, grads[l][i], fd)
			}
		}
	}
}

// Training lowers the loss, and the layout does not change the reference.
func TestReferenceLosses(t *testing.T) {
	cfg := smallConfig(2, 2, 1, Schedule1F1B)
	cfg.Steps = 8
	losses, err := ReferenceLosses(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(losses) != cfg.Steps {
		t.Fatalf("%d losses for %d steps", len(losses), cfg.Steps)
	}
	if last, first := losses[len(losses)-1], losses[0]; !(last < 0.8*first) {
		t.Errorf("loss went from %g to %g: %v", first, last, losses)
	}
	other := cfg
	other.Stages, other.Chunks, other.Schedule = 4, 1, ScheduleGPipe
	again, err := ReferenceLosses(other)
	if err != nil {
		t.Fatal(err)
	}
	for i := range losses {
		if again[i] != losses[i] {
			t.Fatalf("step %d: loss %g with pp=4, %g with pp=2 vpp=2", i, again[i], losses[i])
		}
	}
	bad := cfg
	bad.Layers = 7
	if _, err := ReferenceLosses(bad); err == nil {
		t.Error("ReferenceLosses accepted 7 layers over 2×2 virtual stages")
	}
}

// Weights depend on (seed, layer) only and samples on (seed, index) only.
func TestGeneratorIsPositional(t *testing.T) {
	a, b := make([]float32, 64), make([]float32, 64)
	layerWeights(3, 5, 8, a)
	layerWeights(3, 5, 8, b)
	if !equal32(a, b) {
		t.Error("layer 5's weights differ between two calls")
	}
	layerWeights(3, 6, 8, b)
	if equal32(a, b) {
		t.Error("layers 5 and 6 have the same weights")
	}
	layerWeights(4, 5, 8, b)
	if equal32(a, b) {
		t.Error("seeds 3 and 4 give layer 5 the same weights")
	}
	proj := targetProjection(3, 8)
	x1, t1 := make([]float32, 8*4), make([]float32, 8*4)
	batchRows(3, 10, 4, 8, proj, x1, t1)
	x2, t2 := make([]float32, 8), make([]float32, 8)
	sample(3, 12, 8, proj, x2, t2)
	if !equal32(x1[16:24], x2) || !equal32(t1[16:24], t2) {
		t.Error("sample 12 differs between a batch starting at 10 and on its own")
	}
}

func equal32(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
