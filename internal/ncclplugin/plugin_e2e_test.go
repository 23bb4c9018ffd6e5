package ncclplugin

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/naming"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// TestPluginEndToEnd builds the C plugin and its test driver with make,
// has the driver call the plugin as NCCL would (an AllReduce with two
// kernel channels reported from another thread, a Broadcast, two Sends
// and a Recv), and checks what this collector makes of the stream.
func TestPluginEndToEnd(t *testing.T) {
	c, sink := drive(t, "--drive")
	recs := sink.wait(t, 5)
	n := map[string]int{}
	for _, r := range recs {
		n[r.Name]++
		if r.Collective.Group != "pg-data-parallel" || r.Collective.GroupSize != 4 || r.Rank != 3 || r.Collective.GroupRank != 1 {
			t.Errorf("%s: group %q size %d rank %d group rank %d", r.Name, r.Collective.Group, r.Collective.GroupSize, r.Rank, r.Collective.GroupRank)
		}
		switch r.Name {
		case "AllReduce":
			// Channels ran 1 000 000–1 005 000 and 1 000 100–1 006 000 ns.
			if !r.HasDevice || r.DeviceDuration() != 6*time.Microsecond {
				t.Errorf("allreduce device %v %v", r.HasDevice, r.DeviceDuration())
			}
			if r.Collective.Bytes != 4000 || r.Collective.Seq != 7<<4|1 || r.Collective.BusFactor != 1.5 || r.HostDuration() < time.Millisecond {
				t.Errorf("allreduce %+v host %v", r.Collective, r.HostDuration())
			}
		case "Broadcast":
			if r.HasDevice || r.Collective.Root != 3 || r.Collective.Bytes != 10 || r.Collective.DType != "bfloat16" {
				t.Errorf("broadcast %+v", r)
			}
		case "Send", "Recv":
			if r.Kind != profiler.KindP2P || r.Collective.Bytes != 80 {
				t.Errorf("%s %+v", r.Name, r)
			}
		}
	}
	if n["AllReduce"] != 1 || n["Broadcast"] != 1 || n["Send"] != 2 || n["Recv"] != 1 {
		t.Errorf("records by name %v", n)
	}
	st := c.Stats()
	if st.Processes != 1 || st.Records != 5 || st.HostOnly != 4 || st.KernelChannels != 2 || st.PluginRefused != 2 ||
		st.PluginRingFull != 0 || st.DecodeErrors != 0 {
		t.Errorf("stats %+v", st)
	}
	// The driver's ncclGetVersion stands in for NCCL 2.28.9's.
	if !slices.Equal(st.NCCLVersions, []int32{22809}) {
		t.Errorf("NCCL versions %v, want [22809]: the plugin asks the process's ncclGetVersion", st.NCCLVersions)
	}
}

// TestPluginEndToEndNVTX: the driver acts as NVTX's loader and the
// application: it pushes "step", a nested "forward" of about 1 ms, makes
// the main case's NCCL calls, pops; then a second "step" of about 2 ms.
// The collector makes two steps of rank 3 (the launcher's), the forward
// and every NCCL operation inside step 0.
func TestPluginEndToEndNVTX(t *testing.T) {
	c, sink := drive(t, "--drive-nvtx")
	recs := sink.wait(t, 8)
	var steps []profiler.Record
	ops := 0
	for _, r := range recs {
		if r.Rank != 3 {
			t.Errorf("%s: rank %d, want 3", r.Name, r.Rank)
		}
		switch {
		case r.Name == profiler.StepName:
			steps = append(steps, r)
		case r.Name == "forward":
			if r.Step != 0 || r.Depth != 1 || r.Kind != profiler.KindHost || r.HostDuration() < time.Millisecond {
				t.Errorf("forward: step %d depth %d kind %v host %v; want step 0, depth 1, host, ≥ 1 ms", r.Step, r.Depth, r.Kind, r.HostDuration())
			}
		case r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P:
			ops++
			if r.Step != 0 {
				t.Errorf("%s: step %d, want 0 (enqueued inside the first step range)", r.Name, r.Step)
			}
		default:
			t.Errorf("unexpected record %s (%v)", r.Name, r.Kind)
		}
	}
	slices.SortFunc(steps, func(a, b profiler.Record) int { return cmp.Compare(a.Step, b.Step) })
	if len(steps) != 2 || steps[0].Step != 0 || steps[1].Step != 1 || steps[1].HostDuration() < 2*time.Millisecond ||
		steps[0].HostEnd > steps[1].HostStart || steps[0].CutShort || steps[1].CutShort {
		t.Errorf("steps %+v; want steps 0 and 1 in order, the second ≥ 2 ms", steps)
	}
	if st := c.Stats(); st.Ranges != 3 || st.Steps != 2 || st.Records != 5 || ops != 5 {
		t.Errorf("stats %+v, %d operations; want 3 ranges, 2 steps, 5 operations", st, ops)
	}
}

// drive builds the C plugin and its test driver with make, runs the
// driver in mode against a new collector as rank 3 of its launcher (the
// process's rank in the communicator stays the group rank), and closes
// the collector once the driver has exited.
func drive(t *testing.T, mode string, extra ...string) (*Collector, *capture) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds C code")
	}
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine (%v): the C plugin cannot be built here", tool, err)
		}
	}
	dir := filepath.Join("..", "..", "plugins", "nccl")
	build := exec.Command("make", "-C", dir, "libtrainscope-nccl.so", "test_plugin", "libfakecupti.so")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	c, sink, _ := newTestCollector(t)
	args := []string{mode, filepath.Join(dir, "libtrainscope-nccl.so")}
	for _, e := range extra {
		args = append(args, filepath.Join(dir, e))
	}
	cmd := exec.Command(filepath.Join(dir, "test_plugin"), args...)
	cmd.Env = append(os.Environ(), c.Env(), "RANK=3", "OMPI_COMM_WORLD_RANK=", "SLURM_PROCID=", "PMI_RANK=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("driver %s: %v\n%s", mode, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return c, sink
}

// TestPluginEndToEndCUPTI: the driver acts as the CUDA driver, loading the
// plugin as its injection library with a stand-in CUPTI
// (plugins/nccl/fake_cupti.c: the real one needs a GPU, and runs in
// scripts/gpu-wrap.sh kernels). Kernels and a copy "run"; the plugin
// reads them at CUPTI's offsets, names each kernel once, leaves NCCL's
// kernel out, and sends the rest when CUPTI hands it over and at exit.
func TestPluginEndToEndCUPTI(t *testing.T) {
	c, sink := drive(t, "--drive-cupti", "libfakecupti.so")
	recs := sink.wait(t, 8)
	var got []string
	var held []int64
	for _, r := range recs {
		if r.Name == MemAllocatedName || r.Name == MemReleasedName {
			// The driver's device memory: 1, 3, 2, then 6 MiB held; the
			// pinned host memory between is not the device's.
			held = append(held, r.PeakMemory>>20)
			if r.Kind != profiler.KindHost || r.HasDevice || r.Rank != 3 || r.Device != (runtime.Device{Type: runtime.CUDA, Index: 1}) {
				t.Errorf("%s: kind %v, device-timed %v, rank %d, device %v; want a host instant of rank 3 on cuda:1", r.Name, r.Kind, r.HasDevice, r.Rank, r.Device)
			}
			continue
		}
		got = append(got, fmt.Sprintf("%s %v %v %d", r.Name, r.Kind, r.DeviceDuration(), r.Stream))
		if r.Rank != 3 || r.Device.Type != runtime.CUDA || r.Device.Index != 1 || !r.HasDevice || r.HostDuration() != 0 {
			t.Errorf("%s: rank %d device %v, device-timed %v, host %v", r.Name, r.Rank, r.Device, r.HasDevice, r.HostDuration())
		}
	}
	slices.Sort(got)
	want := []string{
		"Memcpy HtoD device 3µs 13",
		"at::native::vectorized_elementwise_kernel kernel 5µs 13",
		"cutlass::Kernel2 kernel 40µs 13",
		"cutlass::Kernel2 kernel 50µs 13",
	}
	if !slices.Equal(got, want) {
		t.Errorf("records\n got %q\nwant %q", got, want)
	}
	// Allocations carry what their process then held; a release none.
	if !slices.Equal(held, []int64{1, 3, 0, 6}) {
		t.Errorf("device memory held at each allocation (MiB, 0 for the release) %v, want [1 3 0 6]", held)
	}
	sum := profiler.NewSummary()
	sum.Consume(recs)
	if peak := sum.Peaks()[3]; peak != 6<<20 {
		t.Errorf("rank 3's peak %d, want 6 MiB", peak)
	}
	st := c.Stats()
	if st.Kernels != 3 || st.Copies != 1 || st.MemoryOps != 4 || st.Traced != 1 || st.PluginActivityDropped != 3 || st.PluginBuffersUnreturned != 0 || st.DecodeErrors != 0 {
		t.Errorf("stats %+v; want 3 kernels, 1 copy, 4 memory operations, 1 process traced, 3 lost by CUPTI (2 dropped, 1 it could not time), every buffer handed back at exit", st)
	}
}

// TestPluginEndToEndLabels: kernels launched inside NVTX ranges named as
// forward or backward work carry the range's phase, chunk and
// microbatch, noted by CUPTI's callback as each launch begins (the
// stand-in CUPTI calls it back at cudaLaunchKernel). The driver names each
// kernel "k:" and the innermost range it was launched in.
func TestPluginEndToEndLabels(t *testing.T) {
	c, sink := drive(t, "--drive-cupti-labels", "libfakecupti.so")
	type label struct {
		phase             profiler.Phase
		chunk, microbatch int
	}
	none := label{profiler.PhaseNone, profiler.None, profiler.None}
	want := map[string]label{
		"k:before any labelled range":    none,
		"k:forward chunk 1 microbatch 3": {profiler.Forward, 1, 3},
		"k:bwd_mb3_chunk1":               {profiler.Backward, 1, 3},
		"k:Forward 7":                    {profiler.Forward, 0, 7}, // no chunk: a stage's only one
		"k:backward":                     {profiler.Backward, 0, profiler.None},
		"k:forward_step":                 {profiler.Forward, 0, profiler.None},
		"k:forward_backward_func":        none, // both phases: a whole step
		"k:forwarding":                   none,
		"k:fwd vpp=2 mb=5":               {profiler.Forward, 2, 5},
		"k:optimizer":                    none,
		"k:attention":                    {profiler.Forward, 0, 1}, // the enclosing labelled range's
		"k:no callback":                  none,                     // a launch CUPTI did not call back: sent as it is
		"k:after":                        none,
		// Launched on another thread while this one waits inside its
		// range, and after it.
		"k:autograd thread":        {profiler.Backward, 0, 2},
		"k:autograd thread, after": none,
	}
	recs := sink.wait(t, len(want)+1+12) // the kernels, the copy, the ranges
	got := map[string]label{}
	copies := 0
	for _, r := range recs {
		switch r.Kind {
		case profiler.KindKernel:
			got[r.Name] = label{r.Phase, int(r.Chunk), int(r.Microbatch)}
		case profiler.KindDevice:
			copies++
			if r.Phase != profiler.PhaseNone || r.Chunk != profiler.None {
				t.Errorf("copy %q labelled %v chunk %d: copies stay outside any phase", r.Name, r.Phase, r.Chunk)
			}
		}
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("kernel %q missing", name)
		} else if g != w {
			t.Errorf("kernel %q: labels %+v, want %+v", name, g, w)
		}
	}
	if len(got) != len(want) || copies != 1 {
		t.Errorf("%d kernels, %d copies; want %d and 1", len(got), copies, len(want))
	}
	// The plugin's C rule and the Go one (naming.WorkOf, which the Kineto
	// import applies) agree on every name launched in a range of its own.
	for _, name := range []string{"forward chunk 1 microbatch 3", "bwd_mb3_chunk1", "Forward 7", "backward",
		"forward_step", "forward_backward_func", "forwarding", "fwd vpp=2 mb=5", "optimizer"} {
		g, ok := got["k:"+name]
		if !ok {
			continue // missing: said above
		}
		w, labelled := naming.WorkOf(name)
		rule := none
		if labelled {
			rule = label{w.Phase, int(max(w.Chunk, 0)), int(w.Microbatch)}
		}
		if g != rule {
			t.Errorf("%q: the plugin labelled it %+v, naming.WorkOf %+v", name, g, rule)
		}
	}
	if st := c.Stats(); st.KernelsLabelled != 8 || st.DecodeErrors != 0 {
		t.Errorf("%d kernels labelled, %d decode errors; want 8 and 0", st.KernelsLabelled, st.DecodeErrors)
	}
}
