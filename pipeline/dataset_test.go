package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// D follows the formula documented on Config, worked out by hand here:
// min(Steps·G, max(G, 2^24 floats / Width)) rounded down to whole global
// batches G.
func TestDatasetRows(t *testing.T) {
	cases := []struct {
		width, replicas, mb, rows, steps int
		want                             int
	}{
		{16, 1, 4, 4, 4, 64},             // G 16: the whole run fits, 4 batches
		{16, 2, 4, 4, 4, 128},            // G 32
		{1024, 1, 8, 64, 100, 16384},     // G 512, 16384 rows of 1024 floats are 64 MiB: 32 batches
		{1024, 1, 8, 64, 10, 5120},       // 10 steps need fewer
		{4096, 1, 8, 256, 10, 4096},      // G 2048, 4096 rows fit: 2 batches
		{8192, 2, 8, 256, 10, 4096},      // G 4096 > the 2048 rows that fit: one batch
		{1000, 1, 4, 25, 1000, 16700},    // G 100, ⌊16777.216⌋ = 16777 rows fit: 167 batches
		{128, 8, 8, 16, 1 << 30, 131072}, // G 1024, 131072 rows fit: 128 batches
	}
	for _, tc := range cases {
		c := DefaultConfig()
		c.Width, c.Replicas, c.Microbatches, c.MicrobatchSize, c.Steps = tc.width, tc.replicas, tc.mb, tc.rows, tc.steps
		if got := c.datasetRows(); got != tc.want {
			t.Errorf("width %d, %d×%d×%d rows, %d steps: D = %d, want %d", tc.width, tc.replicas, tc.mb, tc.rows, tc.steps, got, tc.want)
		}
	}
}

// readFloats copies a device buffer's float32s to the host.
func readFloats(t *testing.T, b runtime.Buffer) []float32 {
	t.Helper()
	raw := make([]byte, b.Size())
	if err := runtime.CopyToHost(raw, b, nil); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.NativeEndian.Uint32(raw[4*i:]))
	}
	return out
}

// After loadBatch the device holds the step's samples as the generator
// draws them — sample i of the run being sample i mod D of the dataset —
// and, on the last virtual stage, their targets tanh(x·P) within float32
// rounding of the float64 values. Steps past the run's Steps wrap around
// the dataset (here D = Steps·G).
func TestLoadBatchHoldsTheDataset(t *testing.T) {
	for _, cfg := range []Config{
		smallConfig(1, 1, 1, Schedule1F1B),
		smallConfig(2, 2, 2, Schedule1F1B),
		smallConfig(1, 2, 2, ScheduleGPipe),
	} {
		t.Run(fmt.Sprintf("pp%d_vpp%d_dp%d", cfg.Stages, cfg.Chunks, cfg.Replicas), func(t *testing.T) {
			tr, err := NewTrainer(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			w, rows, m := cfg.Width, cfg.MicrobatchSize, cfg.Microbatches
			g := cfg.Replicas * m * rows
			d := cfg.Steps * g
			proj := targetProjection(cfg.Seed, w)
			x, want := make([]float32, w), make([]float32, w)
			for _, step := range []int{0, 1, cfg.Steps - 1, cfg.Steps + 1, 3*cfg.Steps + 2} {
				for _, wk := range tr.ranks {
					r := wk.r
					if err := r.loadBatch(step); err != nil {
						t.Fatal(err)
					}
					if err := r.compute.Synchronize(context.Background()); err != nil {
						t.Fatal(err)
					}
					first, last := r.chunks[0].first, r.chunks[len(r.chunks)-1].last
					if !first && !last {
						continue
					}
					var inputs, targets []float32
					if last {
						inputs, targets = readFloats(t, r.inputs), readFloats(t, r.targets)
					}
					for mb := range m {
						var act []float32
						if first {
							act = readFloats(t, r.chunks[0].act[mb][0])
						}
						for j := range rows {
							index := (step*g + (r.replica*m+mb)*rows + j) % d
							sample(cfg.Seed, index, w, proj, x, want)
							at := (mb*rows + j) * w
							if first && !equal32(act[j*w:(j+1)*w], x) {
								t.Fatalf("step %d rank %d microbatch %d row %d: input %v, sample %d is %v", step, r.id, mb, j, act[j*w:(j+1)*w], index, x)
							}
							if !last {
								continue
							}
							if !equal32(inputs[at:at+w], x) {
								t.Fatalf("step %d rank %d microbatch %d row %d: last stage's input %v, sample %d is %v", step, r.id, mb, j, inputs[at:at+w], index, x)
							}
							for c := range w {
								// A float32 dot product of length w is within
								// w·2^-24·Σ|x_i·P_ic| of the exact one; tanh
								// does not widen that, and the float32 tanh
								// and the reference's rounding add 3 ulp of
								// a value below 1.
								var mag float64
								for i := range w {
									mag += math.Abs(float64(x[i]) * float64(proj[i*w+c]))
								}
								bound := float64(w)*0x1p-24*mag + 3*0x1p-24
								if got := targets[at+c]; math.Abs(float64(got)-float64(want[c])) > bound {
									t.Fatalf("step %d rank %d microbatch %d row %d feature %d: target %.9g, float64 %.9g, beyond %.3g", step, r.id, mb, j, c, got, want[c], bound)
								}
							}
						}
					}
				}
			}
		})
	}
}

// A step copies rows of the dataset drawn at setup: what is in the host
// dataset is what the device receives, and nothing is drawn (the
// generator allocates per sample) or allocated for it, whatever the
// width. Enqueueing the targets' GEMM and tanh may allocate what the
// backend needs to queue a GEMM (here one descriptor), also whatever the
// width; what the stream does when it runs them is the device's work and
// is kept out of the count by holding the stream meanwhile.
func TestLoadBatchOnlyCopies(t *testing.T) {
	for _, width := range []int{16, 256} {
		cfg := smallConfig(1, 1, 1, Schedule1F1B)
		cfg.Width = width
		tr, err := NewTrainer(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := tr.ranks[0].r
		ctx := context.Background()
		step := 0
		copies := testing.AllocsPerRun(20, func() {
			if err := r.copyBatch(step, true, true); err != nil {
				t.Fatal(err)
			}
			step++
			if err := r.compute.Synchronize(ctx); err != nil {
				t.Fatal(err)
			}
		})
		gate := make(chan struct{})
		if err := cpu.Enqueue(r.compute, func() { <-gate }); err != nil {
			t.Fatal(err)
		}
		targets := testing.AllocsPerRun(5, func() {
			if err := r.computeTargets(); err != nil {
				t.Fatal(err)
			}
		})
		close(gate)
		if err := r.compute.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		if copies != 0 || targets > 1 {
			t.Errorf("width %d: %v allocations per step copying the batch, %v enqueueing the targets; want 0 and at most 1", width, copies, targets)
		}

		// Mark sample 1·G + 5 (step 1's sixth row) in the host dataset.
		w, g := cfg.Width, cfg.replicaRows()
		row := r.data[4*(g+5)*w : 4*(g+6)*w]
		for i := range w {
			binary.NativeEndian.PutUint32(row[4*i:], math.Float32bits(float32(i)+0.5))
		}
		if err := r.loadBatch(1); err != nil {
			t.Fatal(err)
		}
		if err := r.compute.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		got := readFloats(t, r.chunks[0].act[5/cfg.MicrobatchSize][0])
		at := (5 % cfg.MicrobatchSize) * w
		for i := range w {
			if got[at+i] != float32(i)+0.5 {
				t.Fatalf("width %d: feature %d of the marked row is %g on the device, %g in the dataset", width, i, got[at+i], float32(i)+0.5)
			}
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
