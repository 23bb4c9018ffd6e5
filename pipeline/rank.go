package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// rank is one pipeline stage of one replica on its device (its own, or
// one it shares with other ranks: see Placement), driven by its own
// goroutine. Everything here belongs to that goroutine.
type rank struct {
	cfg             Config
	id              int // replica·Stages + stage
	replica, stage  int
	dev             runtime.Device
	layers, rows, n int // layers per chunk, rows per microbatch, rows·Width
	rounds          []round
	pp, dp          *ccl.ProcessGroup // nil when the group would have one rank
	groups          bool              // bracket each batch with GroupStart/GroupEnd
	prof            *profiler.Profiler
	rec             *profiler.Recorder
	compute         *runtime.Stream
	chunks          []chunk
	scratch         [2]runtime.Buffer // dZ and dX of the layer being differentiated
	allocs          []runtime.Buffer
	data            []byte           // the replica's share of the dataset, host (first and last stages)
	proj            runtime.Buffer   // the target projection P (last stage)
	inputs, targets runtime.Buffer   // a step's inputs and their targets (last stage)
	inputViews      []runtime.Buffer // inputs, per microbatch
	sse             runtime.Buffer   // per microbatch, Σ(output − target)², device (last stage)
	hostSSE         []byte           // sse copied back at the end of a step
	// syncing, when set, delivers the result of a wait for compute that
	// idle gave up on and that has not returned yet (rank.idle).
	syncing          chan error
	hostFree         []func() error // releases host memory from runtime.HostAlloc
	works            []*ccl.Work
	batchOpen        bool
	fault            faultFunc // tests only
	lossScale, negLR float32
	// busy is when (busyNow) the rank's host began the calls that hand
	// work to its device that it is in, 0 outside them (see enter); the
	// trainer's goroutine reads it.
	busy atomic.Int64
}

// faultFunc, set by tests, runs before each round of a step (and with
// round queuedRound once the whole step is enqueued) and fails the rank
// with the error it returns.
type faultFunc func(ctx context.Context, rank, step, round int) error

// queuedRound is the round faultFunc is given after the last one.
const queuedRound = -1

// chunk is one model chunk (virtual stage) of a rank, with its weights,
// gradients and per-microbatch buffers.
type chunk struct {
	virtual     int
	first, last bool // the model's first or last virtual stage
	w, dw       []runtime.Buffer
	weights     runtime.Buffer     // all of w, for the optimizer
	grads       runtime.Buffer     // all of dw
	act         [][]runtime.Buffer // [mb][j]: the chunk's input (j 0) and the output of its layer j
	gradIn      []runtime.Buffer   // [mb]: gradient of the loss with respect to the chunk's output
	gradOut     []runtime.Buffer   // [mb]: gradient with respect to its input, sent back
	target      []runtime.Buffer   // [mb]: targets (last virtual stage only)
	inWork      []*ccl.Work        // [mb]: the Recv that fills act[mb][0]
	gradWork    []*ccl.Work        // [mb]: the Recv that fills gradIn[mb]
}

func newRank(cfg Config, id int, dev runtime.Device, rounds [][]round, pp, dp *ccl.ProcessGroup) *rank {
	stage := id % cfg.Stages
	r := &rank{
		cfg:     cfg,
		id:      id,
		replica: id / cfg.Stages,
		stage:   stage,
		dev:     dev,
		layers:  cfg.layersPerChunk(),
		rows:    cfg.MicrobatchSize,
		n:       cfg.MicrobatchSize * cfg.Width,
		rounds:  rounds[stage],
		pp:      pp,
		dp:      dp,
		prof:    cfg.Profiler,
		// Replica d's loss gradient is scaled by its own row count: the
		// Avg all-reduce over the replicas then gives the gradient of the
		// mean over the global batch.
		lossScale: float32(2 / float64(cfg.replicaRows()*cfg.Width)),
		negLR:     float32(-cfg.LearningRate),
	}
	// Every batch is grouped. A rendezvous backend (NCCL) needs it even
	// with all ranks in one process: without a group, two stages that send
	// to each other in one round each wait in their Send for the other's
	// Recv. Each rank has a ProcessGroup endpoint of its own (see
	// createGroups), so its open group holds back only its operations.
	r.groups = pp != nil
	return r
}

// String names the rank in errors: "rank 3 (replica 1, stage 1) on cpu:3".
func (r *rank) String() string {
	return fmt.Sprintf("rank %d (replica %d, stage %d) on %s", r.id, r.replica, r.stage, r.dev)
}

// setup creates the rank's stream, recorder and buffers and uploads the
// initial weights. On error, teardown releases what was made.
func (r *rank) setup() error {
	var err error
	if r.compute, err = runtime.NewStream(r.dev); err != nil {
		return err
	}
	if r.prof != nil {
		if r.rec, err = r.prof.NewRecorder(r.id, r.dev); err != nil {
			return err
		}
	}
	cfg := r.cfg
	m, l, w := cfg.Microbatches, r.layers, cfg.Width
	for i := range r.scratch {
		if r.scratch[i], err = r.malloc(r.n); err != nil {
			return err
		}
	}
	last := cfg.Stages*cfg.Chunks - 1
	host, hostBytes := make([]float32, w*w), make([]byte, 4*w*w)
	r.chunks = make([]chunk, cfg.Chunks)
	for ci := range r.chunks {
		c := &r.chunks[ci]
		c.virtual = ci*cfg.Stages + r.stage
		c.first, c.last = c.virtual == 0, c.virtual == last
		if c.weights, err = r.malloc(l * w * w); err != nil {
			return err
		}
		if c.grads, err = r.malloc(l * w * w); err != nil {
			return err
		}
		if err = runtime.Memset(c.grads, 0, nil); err != nil {
			return err
		}
		if c.w, err = views(c.weights, l, w*w); err != nil {
			return err
		}
		if c.dw, err = views(c.grads, l, w*w); err != nil {
			return err
		}
		for j := range l {
			layerWeights(cfg.Seed, c.virtual*l+j, w, host)
			if err = runtime.CopyToDevice(c.w[j], float32Bytes(host, hostBytes), nil); err != nil {
				return err
			}
		}
		acts, err := r.malloc(m * (l + 1) * r.n)
		if err != nil {
			return err
		}
		all, err := views(acts, m*(l+1), r.n)
		if err != nil {
			return err
		}
		c.act = make([][]runtime.Buffer, m)
		for mb := range m {
			c.act[mb] = all[mb*(l+1) : (mb+1)*(l+1)]
		}
		if c.gradIn, err = r.mallocViews(m, r.n); err != nil {
			return err
		}
		if !c.first {
			if c.gradOut, err = r.mallocViews(m, r.n); err != nil {
				return err
			}
		}
		c.inWork = make([]*ccl.Work, m)
		c.gradWork = make([]*ccl.Work, m)
	}
	if err = r.setupData(host, hostBytes); err != nil {
		return err
	}
	// One GEMM (into scratch, whose contents nothing reads before writing)
	// before the first step, so that a backend's one-time setup is not
	// timed inside step 0: cuBLAS loads its kernels at its first call on a
	// device, about 2.5 s with eager module loading. So does one tanh
	// (into the same scratch): the CUDA backend loads its own kernels at
	// the first launch of one, which on a machine whose JIT cache was
	// cold compiled them inside step 0 (the last stage's "targets" took
	// about 80 ms of a 93 ms step 0 there, in the first run on a fresh
	// H100; 0.5 ms in the next).
	if err = linearForward(r.compute, r.chunks[0].w[0], r.scratch[0], r.scratch[1], r.rows, w, cfg.Precision); err != nil {
		return err
	}
	if err = runtime.Tanh(r.compute, r.scratch[1], r.scratch[1], r.rows*w); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.commTimeout())
	defer cancel()
	return timedOut(r.idle(ctx), context.Background(), ctx, cfg.commTimeout())
}

// idle waits until the compute stream's work has completed, or ctx ends.
// The wait itself is the backend's blocking one (CUDA's
// cudaStreamSynchronize), which wakes as soon as the work is done and,
// unlike a copy into pageable memory or a cudaFree, holds back no other
// thread's calls while it waits (docs/gpu.md); it runs on a goroutine of
// its own, so that ctx bounds this call. One that ctx cut short goes on
// waiting, and the next call waits for it rather than start another:
// the stream is destroyed only once nothing waits on it.
func (r *rank) idle(ctx context.Context) error {
	if r.syncing == nil {
		ch := make(chan error, 1)
		s := r.compute
		go func() { ch <- s.Synchronize(context.Background()) }()
		r.syncing = ch
	}
	select {
	case err := <-r.syncing:
		r.syncing = nil
		return err
	case <-ctx.Done():
		return &runtime.Error{Op: "StreamSynchronize", Status: runtime.StatusTimeout, Detail: "gave up waiting", Err: ctx.Err()}
	}
}

// teardown waits until deadline for the rank's device work, then
// destroys its stream and frees its buffers. It runs on the rank's
// goroutine.
func (r *rank) teardown(deadline time.Time) error {
	if r.compute == nil {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var errs []error
	if err := timedOut(r.idle(ctx), context.Background(), ctx, r.cfg.commTimeout()); err != nil {
		// Freeing memory the device may still use is not safe on every
		// backend: keep it and say so.
		return fmt.Errorf("pipeline: rank %d: teardown: device work did not finish, %d buffers not freed: %w", r.id, len(r.allocs), err)
	}
	errs = append(errs, r.compute.Destroy())
	for _, b := range r.allocs {
		errs = append(errs, runtime.Free(b))
	}
	for _, free := range r.hostFree {
		errs = append(errs, free())
	}
	r.allocs, r.compute, r.hostFree, r.data = nil, nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pipeline: rank %d: teardown: %w", r.id, err)
	}
	return nil
}

// malloc allocates n float32s on the rank's device and keeps the buffer for
// teardown.
func (r *rank) malloc(n int) (runtime.Buffer, error) {
	b, err := runtime.Malloc(r.dev, int64(n)*4)
	if err != nil {
		return runtime.Buffer{}, err
	}
	r.allocs = append(r.allocs, b)
	return b, nil
}

// mallocViews allocates count consecutive blocks of n float32s.
func (r *rank) mallocViews(count, n int) ([]runtime.Buffer, error) {
	b, err := r.malloc(count * n)
	if err != nil {
		return nil, err
	}
	return views(b, count, n)
}

// views splits b into count consecutive blocks of n float32s.
func views(b runtime.Buffer, count, n int) ([]runtime.Buffer, error) {
	out := make([]runtime.Buffer, count)
	for i := range out {
		v, err := b.Elems(runtime.Float32, i*n, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func hostBuffers(count, n int) [][]byte {
	out := make([][]byte, count)
	for i := range out {
		out[i] = make([]byte, 4*n)
	}
	return out
}

// float32Bytes writes v into dst (allocated when nil) in the host's byte
// order, which is the devices' order too.
func float32Bytes(v []float32, dst []byte) []byte {
	if dst == nil {
		dst = make([]byte, 4*len(v))
	}
	for i, x := range v {
		binary.NativeEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
	return dst
}
