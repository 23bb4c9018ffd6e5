package pipeline

import (
	"math"
	"math/rand/v2"
)

// The generator streams of one seed. Every layer's weights depend only on
// (seed, layer) and every sample only on (seed, sample index), so that
// every layout of a run, and the unpipelined reference, train the same
// model on the same data.
const (
	streamWeights    = 1 << 62
	streamSamples    = 2 << 62
	streamProjection = 3 << 62
)

// weightGain scales the initial weights: uniform in ±gain·√(3/width), so
// that a layer's pre-activations start with variance gain²·E[x²] and a
// deep tanh network neither saturates nor fades.
const weightGain = 1.0

func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// uniform fills v with values uniform in [−a, a).
func uniform(r *rand.Rand, a float64, v []float32) {
	for i := range v {
		v[i] = float32(a * (2*r.Float64() - 1))
	}
}

// layerWeights fills w (width² values) with layer's initial weights,
// row-major [in][out]: a row of activations times w is the layer's
// pre-activation.
func layerWeights(seed uint64, layer, width int, w []float32) {
	uniform(newRand(seed, streamWeights|uint64(layer)), weightGain*math.Sqrt(3/float64(width)), w[:width*width])
}

// targetProjection returns the fixed random width×width projection P,
// row-major, that defines the targets: t = tanh(x·P).
func targetProjection(seed uint64, width int) []float32 {
	p := make([]float32, width*width)
	uniform(newRand(seed, streamProjection), 1.5*math.Sqrt(3/float64(width)), p)
	return p
}

// sample fills x with sample index's input (uniform in ±1) and, unless t
// is nil, t with its target tanh(x·P); both are width long.
func sample(seed uint64, index, width int, proj, x, t []float32) {
	uniform(newRand(seed, streamSamples|uint64(index)), 1, x[:width])
	if t == nil {
		return
	}
	for j := range width {
		var z float64
		for i, xi := range x[:width] {
			z += float64(xi) * float64(proj[i*width+j])
		}
		t[j] = float32(math.Tanh(z))
	}
}

// batchRows fills x (rows·width, row-major) with the inputs of samples
// first … first+rows−1 and, unless t is nil, t with their targets.
func batchRows(seed uint64, first, rows, width int, proj, x, t []float32) {
	for r := range rows {
		var tr []float32
		if t != nil {
			tr = t[r*width : (r+1)*width]
		}
		sample(seed, first+r, width, proj, x[r*width:(r+1)*width], tr)
	}
}

// firstSample is the index of the first sample of microbatch mb of
// replica d in step: the global batch of a step is the samples
// [step·B, (step+1)·B), replica-major, then microbatch-major.
func (c Config) firstSample(step, replica, mb int) int {
	return step*c.globalRows() + (replica*c.Microbatches+mb)*c.MicrobatchSize
}
