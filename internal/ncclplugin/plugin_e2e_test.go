package ncclplugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestPluginEndToEnd builds the C plugin and its test driver with make,
// has the driver call the plugin as NCCL would (an AllReduce with two
// kernel channels reported from another thread, a Broadcast, two Sends
// and a Recv), and checks what this collector makes of the stream.
func TestPluginEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds C code")
	}
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine (%v): the C plugin cannot be built here", tool, err)
		}
	}
	dir := filepath.Join("..", "..", "plugins", "nccl")
	build := exec.Command("make", "-C", dir, "libtrainscope-nccl.so", "test_plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	c, sink, _ := newTestCollector(t)
	drive := exec.Command(filepath.Join(dir, "test_plugin"), "--drive", filepath.Join(dir, "libtrainscope-nccl.so"))
	// The launcher's rank (torchrun's RANK) names the process; its rank in
	// the communicator stays the group rank.
	drive.Env = append(os.Environ(), c.Env(), "RANK=3", "OMPI_COMM_WORLD_RANK=", "SLURM_PROCID=", "PMI_RANK=")
	if out, err := drive.CombinedOutput(); err != nil {
		t.Fatalf("driver: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
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
			if r.Collective.Bytes != 4000 || r.Collective.Seq != 7 || r.Collective.BusFactor != 1.5 || r.HostDuration() < time.Millisecond {
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
}
