package pipeline

import "github.com/trainscope/trainscope/runtime"

// setupData prepares the rank's data, on the ranks that hold the first or
// the last virtual stage: its share of the synthetic dataset in host
// memory and, on the last, the projection P on the device (uploaded
// through staging, Width² floats, and stagingBytes, their bytes) with
// buffers for a step's inputs and targets. After setup a step only copies
// rows of the dataset to the device (loadBatch).
func (r *rank) setupData(staging []float32, stagingBytes []byte) error {
	cfg := r.cfg
	first, last := r.chunks[0].first, r.chunks[len(r.chunks)-1].last
	if !first && !last {
		return nil
	}
	if err := r.drawDataset(); err != nil {
		return err
	}
	if !last {
		return nil
	}
	m, w := cfg.Microbatches, cfg.Width
	var err error
	if r.proj, err = r.malloc(w * w); err != nil {
		return err
	}
	projection(cfg.Seed, w, staging)
	if err = runtime.CopyToDevice(r.proj, float32Bytes(staging[:w*w], stagingBytes), nil); err != nil {
		return err
	}
	if r.inputs, err = r.malloc(m * r.n); err != nil {
		return err
	}
	if r.inputViews, err = views(r.inputs, m, r.n); err != nil {
		return err
	}
	if r.targets, err = r.malloc(m * r.n); err != nil {
		return err
	}
	lc := &r.chunks[len(r.chunks)-1]
	if lc.target, err = views(r.targets, m, r.n); err != nil {
		return err
	}
	if r.sse, err = r.malloc(m + 1); err != nil { // and a spare slot: lossGrad
		return err
	}
	r.hostSSE = make([]byte, 4*m)
	return nil
}

// drawDataset draws the rank's replica's share of the dataset: for each
// of the D/G global batches, the replica's replicaRows consecutive
// samples, as float32 bytes ready to copy. The bytes are page-locked
// where the backend offers it (runtime.HostAlloc), so that a step's
// copies run asynchronously at the bus's speed, as a data loader's from
// pinned memory do.
func (r *rank) drawDataset() error {
	cfg := r.cfg
	w, rows, batches := cfg.Width, cfg.replicaRows(), cfg.datasetBatches()
	data, free, err := runtime.HostAlloc(cfg.Backend, int64(4*batches*rows*w))
	if err != nil {
		return err
	}
	r.data, r.hostFree = data, append(r.hostFree, free)
	x, smp := make([]float32, w), newSampler()
	for k := range batches {
		first := cfg.firstSample(k, r.replica, 0)
		for j := range rows {
			smp.draw(cfg.Seed, first+j, x)
			off := 4 * (k*rows + j) * w
			float32Bytes(x, r.data[off:off+4*w])
		}
	}
	return nil
}

// batchBytes returns the rank's rows of step's global batch: the
// microbatches of its replica, consecutive, as the dataset holds them.
func (r *rank) batchBytes(step int) []byte {
	cfg := r.cfg
	size := 4 * cfg.replicaRows() * cfg.Width
	off := (step % cfg.datasetBatches()) * size
	return r.data[off : off+size]
}

// loadBatch copies the step's rows from the host dataset to the device:
// every microbatch's input on the first virtual stage, the whole step's
// inputs on the last, which then computes their targets on the device.
// It neither draws nor allocates anything.
func (r *rank) loadBatch(step int) error {
	first, last := &r.chunks[0], &r.chunks[len(r.chunks)-1]
	if !first.first && !last.last {
		return nil
	}
	rec, s := r.rec, r.compute
	rec.StartDevice("load_batch", s)
	err := r.copyBatch(step, first.first, last.last)
	rec.End()
	if err != nil || !last.last {
		return err
	}
	rec.StartDevice("targets", s)
	err = r.computeTargets()
	rec.End()
	return err
}

// copyBatch enqueues the copies of loadBatch.
func (r *rank) copyBatch(step int, first, last bool) error {
	s, batch := r.compute, r.batchBytes(step)
	if last {
		if err := runtime.CopyToDevice(r.inputs, batch, s); err != nil {
			return err
		}
	}
	if !first {
		return nil
	}
	size := 4 * r.n
	for mb, act := range r.chunks[0].act {
		var err error
		if last {
			// Already on the device: a copy there is cheaper than a
			// second upload.
			err = runtime.Copy(act[0], r.inputViews[mb], s)
		} else {
			err = runtime.CopyToDevice(act[0], batch[mb*size:(mb+1)*size], s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// computeTargets enqueues targets = tanh(inputs·P) for the step's
// microbatches at once: they lie consecutive in both buffers, so one GEMM
// of Microbatches·MicrobatchSize rows (in pieces past maxGemmRows) does it.
// It computes in float32 whatever Config.Precision says, so the data do
// not depend on it.
func (r *rank) computeTargets() error {
	s, rows, w := r.compute, r.cfg.replicaRows(), r.cfg.Width
	if err := linearForward(s, r.proj, r.inputs, r.targets, rows, w, runtime.MathDefault); err != nil {
		return err
	}
	return runtime.Tanh(s, r.targets, r.targets, rows*w)
}
