package pipeline

import (
	"fmt"
	"math"
)

// ReferenceLosses trains the model of cfg unpipelined, in float64 loops on
// the host (no runtime, no ccl): the same initial weights, the same data,
// the loss over the same global batch and the same SGD update. It returns
// the loss of each step, computed before that step's update, for
// comparison with Train. Only the model and data fields of cfg matter;
// Backend, Profiler and CommTimeout are ignored. Where the host's memory
// is known (the cpu backend is registered: see Validate), a model whose
// float64 copy does not fit in it (referenceBytes, with the garbage
// collector's headroom) is refused with a *ConfigError before anything is
// allocated.
func ReferenceLosses(cfg Config) ([]float64, error) {
	if err := cfg.validateModel(); err != nil {
		return nil, err
	}
	if err := cfg.checkReferenceMemory(); err != nil {
		return nil, err
	}
	m := newRefModel(cfg)
	rows, w := cfg.globalRows(), cfg.Width
	proj := targetProjection(cfg.Seed, w)
	x := make([]float32, rows*w)
	t := make([]float32, rows*w)
	losses := make([]float64, 0, min(cfg.Steps, maxPrealloc))
	for step := range cfg.Steps {
		batchRows(cfg.Seed, cfg.firstSample(step, 0, 0), rows, w, proj, x, t)
		losses = append(losses, m.lossGrad(x, t))
		m.update(cfg.LearningRate)
	}
	return losses, nil
}

// referenceBytes is what ReferenceLosses allocates: per layer its weights
// and gradients in float64 (2·Width² each 8 bytes), the activations of
// the global batch G = Replicas × Microbatches × MicrobatchSize rows at
// each layer's input and the output, and two gradient blocks (Layers + 3
// blocks of G·Width float64), the batch's inputs and targets in float32,
// the target projection and one layer's float32 weights while they are
// widened (Width² float32 each), and the losses.
func (c Config) referenceBytes() float64 {
	w, l := float64(c.Width), float64(c.Layers)
	block := float64(c.globalRows()) * w
	return 8*(2*l*w*w+(l+3)*block) + 4*(2*block+2*w*w) + 8*float64(min(c.Steps, maxPrealloc))
}

// checkReferenceMemory compares referenceBytes with the host's memory as
// Validate reads it for the cpu backend (hostMemory), with the garbage
// collector's headroom; unknown memory is not checked.
func (c Config) checkReferenceMemory() error {
	mem, ok := hostMemory()
	if !ok {
		return nil
	}
	capacity, growth := hostCapacity(mem)
	need := c.referenceBytes() * growth
	if capacity == 0 || need <= float64(capacity) {
		return nil
	}
	headroom := ""
	if growth > 1 {
		headroom = fmt.Sprintf(" × %.3g for the garbage collector's headroom (GOGC=%.0f)", growth, 100*(growth-1))
	}
	return invalid("the float64 reference of the model (%s, %s, a global batch of %s × %s × %s rows) needs about %s on the host%s = %s, but %s is available: lower %s, %s, %s, %s or %s",
		field("Width", c.Width), field("Layers", c.Layers), field("Replicas", c.Replicas), field("Microbatches", c.Microbatches), field("MicrobatchSize", c.MicrobatchSize),
		bytesString(c.referenceBytes()), headroom, bytesString(need), bytesString(float64(capacity)),
		fieldName("Width"), fieldName("Layers"), fieldName("Microbatches"), fieldName("MicrobatchSize"), fieldName("Replicas"))
}

// refModel is the unpipelined model in float64.
type refModel struct {
	w, rows        int
	weights, grads [][]float64 // per layer, w×w row-major [in][out]
	acts           [][]float64 // acts[l] is the input of layer l, acts[depth] the output
	dy, dz         []float64
}

func newRefModel(cfg Config) *refModel {
	w, depth, rows := cfg.Width, cfg.Layers, cfg.globalRows()
	m := &refModel{w: w, rows: rows, dy: make([]float64, rows*w), dz: make([]float64, rows*w)}
	w32 := make([]float32, w*w)
	for l := range depth {
		layerWeights(cfg.Seed, l, w, w32)
		m.weights = append(m.weights, widen(w32))
		m.grads = append(m.grads, make([]float64, w*w))
	}
	for range depth + 1 {
		m.acts = append(m.acts, make([]float64, rows*w))
	}
	return m
}

// lossGrad runs the batch x with targets t (rows×w each) forward and
// backward, adds the gradient of the loss to grads and returns the loss:
// the mean over all rows and features of (output − target)².
func (m *refModel) lossGrad(x, t []float32) float64 {
	depth, rows, w := len(m.weights), m.rows, m.w
	for i, v := range x {
		m.acts[0][i] = float64(v)
	}
	for l := range depth {
		matmul(m.acts[l], m.weights[l], m.acts[l+1], rows, w, false)
		for i, v := range m.acts[l+1] {
			m.acts[l+1][i] = math.Tanh(v)
		}
	}
	var sse float64
	scale := 2 / float64(rows*w)
	for i, y := range m.acts[depth] {
		d := y - float64(t[i])
		sse += d * d
		m.dy[i] = scale * d
	}
	for l := depth - 1; l >= 0; l-- {
		for i, y := range m.acts[l+1] {
			m.dz[i] = m.dy[i] * (1 - y*y)
		}
		weightGrad(m.acts[l], m.dz, m.grads[l], rows, w)
		if l > 0 {
			matmul(m.dz, m.weights[l], m.dy, rows, w, true)
		}
	}
	return sse / float64(rows*w)
}

// update applies SGD with learning rate lr and zeroes the gradients.
func (m *refModel) update(lr float64) {
	for l, g := range m.grads {
		for i, v := range g {
			m.weights[l][i] -= lr * v
			g[i] = 0
		}
	}
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// matmul sets c = a·b (or a·bᵀ with transB) for a rows×w, b w×w, all
// row-major.
func matmul(a, b, c []float64, rows, w int, transB bool) {
	for r := range rows {
		ar, cr := a[r*w:(r+1)*w], c[r*w:(r+1)*w]
		for j := range w {
			var s float64
			if transB {
				bj := b[j*w : (j+1)*w]
				for k, v := range ar {
					s += v * bj[k]
				}
			} else {
				for k, v := range ar {
					s += v * b[k*w+j]
				}
			}
			cr[j] = s
		}
	}
}

// weightGrad adds xᵀ·dz to g (x, dz rows×w; g w×w; row-major).
func weightGrad(x, dz, g []float64, rows, w int) {
	for r := range rows {
		xr, dr := x[r*w:(r+1)*w], dz[r*w:(r+1)*w]
		for i, xv := range xr {
			gi := g[i*w : (i+1)*w]
			for j, dv := range dr {
				gi[j] += xv * dv
			}
		}
	}
}
