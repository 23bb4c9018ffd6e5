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

// datasetCapFloats bounds the inputs of the synthetic dataset: 2^24
// float32s, 64 MiB. The dataset holds a whole number of global batches, so
// the bound is rounded down to one (and raised to one global batch where a
// single batch is larger).
const datasetCapFloats = 1 << 24

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

// projection fills p (width² values) with the fixed random projection P,
// row-major, that defines the targets: t = tanh(x·P).
func projection(seed uint64, width int, p []float32) {
	uniform(newRand(seed, streamProjection), 1.5*math.Sqrt(3/float64(width)), p[:width*width])
}

// targetProjection returns P in a new slice.
func targetProjection(seed uint64, width int) []float32 {
	p := make([]float32, width*width)
	projection(seed, width, p)
	return p
}

// sampler draws samples' inputs with one generator, reseeded for each
// sample, so that drawing a dataset allocates nothing per sample.
type sampler struct {
	src *rand.PCG
	rng *rand.Rand
}

func newSampler() sampler {
	src := rand.NewPCG(0, 0)
	return sampler{src: src, rng: rand.New(src)}
}

// draw fills x with sample index's input: uniform in ±1, from the
// generator stream of (seed, index) alone.
func (s sampler) draw(seed uint64, index int, x []float32) {
	s.src.Seed(seed, streamSamples|uint64(index))
	uniform(s.rng, 1, x)
}

// sample fills x with sample index's input and, unless t is nil, t with
// its target tanh(x·P) computed in float64 (the reference's way; the
// trainer computes targets on the device); both are width long.
func sample(seed uint64, index, width int, proj, x, t []float32) {
	newSampler().draw(seed, index, x[:width])
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

// datasetRows is D, the number of samples in the run's synthetic dataset:
// sample i of the run is sample i mod D of the dataset. With G the global
// batch (globalRows) it is
//
//	D = G · min(Steps, max(1, ⌊2^24 / (Width·G)⌋))
//
// that is min(Steps·G, max(G, 64 MiB of float32 inputs)), the 64 MiB
// rounded down to whole global batches: a short run sees fresh samples
// every step, a long one cycles through at most 64 MiB of inputs (or one
// global batch, where that is larger). It depends on the Config's sizes
// only, so every layout, and the reference, see the same samples.
func (c Config) datasetRows() int {
	return c.globalRows() * c.datasetBatches()
}

// datasetBatches is D/G: how many steps pass before the samples repeat.
func (c Config) datasetBatches() int {
	g := c.globalRows()
	fit := datasetCapFloats / c.Width / g // ⌊⌊2^24/Width⌋/G⌋ = ⌊2^24/(Width·G)⌋
	return min(c.Steps, max(1, fit))
}

// firstSample is the dataset index of the first sample of microbatch mb of
// replica d in step: the global batch of a step is G consecutive samples
// of the dataset, replica-major, then microbatch-major, starting at
// (step mod D/G)·G.
func (c Config) firstSample(step, replica, mb int) int {
	return (step%c.datasetBatches())*c.globalRows() + (replica*c.Microbatches+mb)*c.MicrobatchSize
}
