package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
)

// TestTrainProfiled runs on devices of the ranks' own and with the four
// ranks sharing one device, whose in-process collectives must be
// profiled the same way.
func TestTrainProfiled(t *testing.T) {
	for _, devices := range []int{0, 1} {
		t.Run(fmt.Sprintf("devices=%d", devices), func(t *testing.T) { trainProfiled(t, devices) })
	}
}

func trainProfiled(t *testing.T, devices int) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	cfg := smallConfig(2, 2, 2, Schedule1F1B)
	cfg.Steps = 2
	cfg.Profiler = p
	cfg.Devices = devices
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if st := p.Stats(); st.Dropped != 0 || st.EventDrops != 0 || st.Unbalanced != 0 || st.Errors != 0 {
		t.Errorf("profiler stats %+v", st)
	}
	byID := map[[2]uint64]*profiler.Record{}
	for i := range recs {
		byID[[2]uint64{uint64(recs[i].Rank), recs[i].ID}] = &recs[i]
	}
	parent := func(r *profiler.Record) *profiler.Record { return byID[[2]uint64{uint64(r.Rank), r.Parent}] }

	type key struct {
		name                     string
		step, rank, chunk, micro int
	}
	count := map[key]int{}
	counts := map[string]int{}
	for i := range recs {
		r := &recs[i]
		counts[r.Name]++
		if r.Step < 0 || int(r.Step) >= cfg.Steps {
			t.Errorf("%s on rank %d has step %d", r.Name, r.Rank, r.Step)
		}
		if int(r.Stage) != r.Rank%cfg.Stages {
			t.Errorf("%s on rank %d is labelled stage %d", r.Name, r.Rank, r.Stage)
		}
		switch r.Name {
		case "forward", "backward":
			if r.Kind != profiler.KindDevice || !r.HasDevice || r.Depth != 1 || parent(r) == nil || parent(r).Name != "step" {
				t.Errorf("%s range %+v: want a device range inside a step", r.Name, *r)
			}
			want := profiler.Forward
			if r.Name == "backward" {
				want = profiler.Backward
			}
			if r.Phase != want {
				t.Errorf("%s range has phase %v", r.Name, r.Phase)
			}
			count[key{r.Name, int(r.Step), r.Rank, int(r.Chunk), int(r.Microbatch)}]++
		case "recv", "recv_grad":
			// The wait for an action's input: a device range of the
			// communication phase beside the action, not inside it.
			if pa := parent(r); r.Kind != profiler.KindDevice || !r.HasDevice || r.Phase != profiler.Comm || pa == nil || pa.Name != "step" || r.Chunk < 0 || r.Microbatch < 0 {
				t.Errorf("%s range %+v (kind %v, parent %+v): want a device range of phase comm inside a step", r.Name, r.Labels, r.Kind, pa)
			}
		case "linear", "tanh", "loss", "send", "tanh_backward", "linear_grad_weight", "linear_grad_input", "send_grad":
			pa := parent(r)
			if pa == nil || (pa.Name != "forward" && pa.Name != "backward") || pa.Labels != r.Labels {
				t.Errorf("%s range %+v: want it inside a forward or backward range with the same labels (parent %+v)", r.Name, r.Labels, pa)
			}
		case "load_batch", "targets":
			// A step's data: device ranges inside the step, outside every
			// action and compute phase; the targets only where the last
			// virtual stage is.
			if pa := parent(r); r.Kind != profiler.KindDevice || !r.HasDevice || r.Phase != profiler.PhaseNone || pa == nil || pa.Name != "step" {
				t.Errorf("%s range %+v (kind %v, parent %+v): want a device range of no phase inside a step", r.Name, r.Labels, r.Kind, pa)
			}
			if r.Name == "targets" && int(r.Stage) != cfg.Stages-1 {
				t.Errorf("targets on rank %d, stage %d: want only the last stage", r.Rank, r.Stage)
			}
		case "allreduce_grads", "optimizer":
			// The gradient all-reduce (and the compute stream's wait for
			// it) is communication before the optimizer, not inside it.
			want := map[string]profiler.Phase{"allreduce_grads": profiler.Comm, "optimizer": profiler.Optimizer}[r.Name]
			if pa := parent(r); r.Kind != profiler.KindDevice || !r.HasDevice || r.Phase != want || pa == nil || pa.Name != "step" {
				t.Errorf("%s range %+v (parent %+v): want a device range of phase %v inside a step", r.Name, *r, pa, want)
			}
		case "Send", "Recv":
			if r.Kind != profiler.KindP2P || r.Collective.Group != fmt.Sprintf("pp%d", r.Rank/cfg.Stages) || r.Collective.Peer != int32(1-r.Rank%2) {
				t.Errorf("%s range %+v", r.Name, r.Collective)
			}
			if r.Microbatch < 0 || r.Chunk < 0 {
				t.Errorf("%s range without microbatch or chunk: %+v", r.Name, r.Labels)
			}
			// One microbatch's activations: 4 rows of width 16, float32.
			if r.Collective.Bytes != 4*16*4 || !r.HasDevice {
				t.Errorf("%s: %d bytes (want 256), device-timed %v", r.Name, r.Collective.Bytes, r.HasDevice)
			}
		case "AllReduce":
			pa := parent(r)
			if r.Kind != profiler.KindCollective || r.Collective.Group != fmt.Sprintf("dp%d", r.Rank%cfg.Stages) || r.Collective.GroupSize != 2 ||
				pa == nil || pa.Name != "allreduce_grads" || r.Phase != profiler.Comm || r.Chunk < 0 {
				t.Errorf("AllReduce range %+v in %+v", *r, pa)
			}
			// A chunk's gradients: 2 layers of 16×16 float32, bus factor
			// 2(n−1)/n = 1 for two ranks.
			if r.Collective.Bytes != 2*16*16*4 || r.Collective.BusFactor != 1 || !r.HasDevice {
				t.Errorf("AllReduce: %d bytes (want 2048), bus factor %v, device-timed %v", r.Collective.Bytes, r.Collective.BusFactor, r.HasDevice)
			}
		}
	}
	ranks := cfg.Stages * cfg.Replicas
	for step := range cfg.Steps {
		for rank := range ranks {
			for chunk := range cfg.Chunks {
				for mb := range cfg.Microbatches {
					for _, name := range []string{"forward", "backward"} {
						if n := count[key{name, step, rank, chunk, mb}]; n != 1 {
							t.Errorf("step %d rank %d chunk %d microbatch %d: %d %s ranges, want 1", step, rank, chunk, mb, n, name)
						}
					}
				}
			}
		}
	}
	actions := cfg.Steps * ranks * cfg.Chunks * cfg.Microbatches // per kind
	layers := cfg.layersPerChunk()
	// Sends: every forward but the last virtual stage's, every backward but
	// the first's; the receives match them.
	p2p := cfg.Steps * cfg.Replicas * cfg.Microbatches * (cfg.Stages*cfg.Chunks - 1)
	want := map[string]int{
		"step":               cfg.Steps * ranks,
		"forward":            actions,
		"backward":           actions,
		"linear":             actions * layers,
		"tanh":               actions * layers,
		"tanh_backward":      actions * layers,
		"linear_grad_weight": actions * layers,
		"linear_grad_input":  actions*layers - cfg.Steps*cfg.Replicas*cfg.Microbatches,
		"loss":               cfg.Steps * cfg.Replicas * cfg.Microbatches,
		"send":               p2p,
		"send_grad":          p2p,
		"recv":               p2p,
		"recv_grad":          p2p,
		"Send":               2 * p2p,
		"Recv":               2 * p2p,
		"load_batch":         cfg.Steps * ranks, // both stages hold the first or last virtual stage
		"targets":            cfg.Steps * cfg.Replicas,
		"optimizer":          cfg.Steps * ranks,
		"allreduce_grads":    cfg.Steps * ranks,
		"AllReduce":          cfg.Steps * ranks * cfg.Chunks,
		"sgd":                cfg.Steps * ranks,
	}
	for name, n := range want {
		if counts[name] != n {
			t.Errorf("%d %q ranges, want %d", counts[name], name, n)
		}
	}
	for name := range counts {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected range %q (%d)", name, counts[name])
		}
	}
	// An action's device time starts once its input has arrived: never
	// before the end of the wait for it.
	byAction := map[key]*profiler.Record{}
	for i := range recs {
		r := &recs[i]
		if r.Name == "forward" || r.Name == "backward" {
			byAction[key{r.Name, int(r.Step), r.Rank, int(r.Chunk), int(r.Microbatch)}] = r
		}
	}
	for i := range recs {
		w := &recs[i]
		name := map[string]string{"recv": "forward", "recv_grad": "backward"}[w.Name]
		if name == "" {
			continue
		}
		a := byAction[key{name, int(w.Step), w.Rank, int(w.Chunk), int(w.Microbatch)}]
		if a == nil || a.DeviceStart < w.DeviceEnd {
			t.Errorf("%s %+v on rank %d: its %s %+v starts on the device before the wait ends (%v)", w.Name, w.Labels, w.Rank, name, a, w.DeviceEnd)
		}
	}
}

// No rank can idle less than its schedule forces: on the host backend, for
// 1F1B on 2 and 4 stages, every rank's idle share of the step (as the text
// report and the metrics account it) is at least the schedule's ideal
// bubble, less clockNoise. The host backend's event times are host clock
// readings taken by each stream's goroutine, so an interval can be off by
// the scheduling delay of that goroutine; a point of the step is far more
// than that at these step times (tens of milliseconds).
func TestIdleIsNotBelowTheIdealBubble(t *testing.T) {
	const clockNoise = 0.01 // of a step
	for _, pp := range []int{2, 4} {
		t.Run(fmt.Sprintf("pp%d", pp), func(t *testing.T) {
			p, err := profiler.New(profiler.WithDeviceDepth(1))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			cfg := DefaultConfig()
			cfg.Stages, cfg.Chunks, cfg.Steps, cfg.Width = pp, 1, 4, 16
			cfg.Profiler = p
			if _, err := Train(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			ideal := schedule.IdealBubbleFraction(cfg.Stages, cfg.Chunks, cfg.Microbatches)
			ranks := profiler.StepBreakdown(p.Snapshot())
			if len(ranks) != pp {
				t.Fatalf("%d ranks in the breakdown, want %d", len(ranks), pp)
			}
			for _, r := range ranks {
				t.Logf("rank %d: busy %.3f idle %.3f (ideal bubble %.3f)", r.Rank, r.BusyFraction(), r.IdleFraction(), ideal)
				if r.Steps != cfg.Steps || r.Busy <= 0 {
					t.Errorf("rank %d: %d steps, busy %v; want %d steps and some busy time", r.Rank, r.Steps, r.Busy, cfg.Steps)
				}
				if r.IdleFraction() < ideal-clockNoise {
					t.Errorf("rank %d idles %.3f of its steps, below the ideal bubble %.3f by more than %.2f", r.Rank, r.IdleFraction(), ideal, clockNoise)
				}
			}
		})
	}
}
