package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

// The estimate is what the trainer really allocates: the CPU backend
// counts every byte allocated on each device, and each rank has a device of
// its own. It is measured after setup and again, as the peak, after a
// step, which allocates nothing more.
func TestMemoryEstimateMatchesAllocations(t *testing.T) {
	impl, err := runtime.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{
		smallConfig(2, 2, 1, Schedule1F1B),
		smallConfig(1, 1, 2, Schedule1F1B),
		smallConfig(1, 2, 1, ScheduleGPipe),
		smallConfig(4, 2, 2, Schedule1F1B),
		func() Config {
			c := smallConfig(2, 1, 2, ScheduleGPipe)
			c.Layers, c.Width, c.Microbatches = 6, 24, 3
			return c
		}(),
	} {
		t.Run(fmt.Sprintf("pp%d_vpp%d_dp%d_%s", cfg.Stages, cfg.Chunks, cfg.Replicas, cfg.Schedule), func(t *testing.T) {
			ranks := cfg.Stages * cfg.Replicas
			before := make([]int64, ranks)
			for id := range ranks {
				st, err := impl.MemoryStats(id)
				if err != nil {
					t.Fatal(err)
				}
				before[id] = st.InUse
				if err := impl.ResetPeakMemory(id); err != nil {
					t.Fatal(err)
				}
			}
			tr, err := NewTrainer(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			allocated := make([]int64, ranks)
			for id := range ranks {
				st, _ := impl.MemoryStats(id)
				allocated[id] = st.InUse - before[id]
			}
			if _, err := tr.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			var peaks []int64
			for id := range ranks {
				st, _ := impl.MemoryStats(id)
				peaks = append(peaks, st.Peak-before[id])
			}
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
			var most int64
			for id := range ranks {
				want := cfg.rankMemory(id % cfg.Stages).Device
				if allocated[id] != want || peaks[id] != want {
					t.Errorf("rank %d: allocated %d bytes after setup, peak %d after a step; estimated %d", id, allocated[id], peaks[id], want)
				}
				most = max(most, allocated[id])
			}
			if got := cfg.Memory().Device; got != most {
				t.Errorf("Memory().Device = %d, want the largest rank's %d", got, most)
			}
		})
	}
}

// fakeMemory describes every device the same way, or fails.
type fakeMemory struct {
	mem runtime.DeviceMemory
	err error
}

func (f fakeMemory) DeviceMemory(int) (runtime.DeviceMemory, error) { return f.mem, f.err }

// gcDefaults runs the test with GOGC=100 and no memory limit, whatever the
// environment says.
func gcDefaults(t *testing.T) {
	pct := debug.SetGCPercent(100)
	lim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(lim)
	})
}

// The issue's example, -width 8192 -layers 4 -dp 8 with the other sizes at
// their defaults, is refused on a host with less memory than it needs, and
// the message says how much it needs and what there is. Per rank (4-byte
// floats, 131072 per microbatch, 67108864 per weight, a global batch of
// 8·8·16 = 1024 rows of which 2^24/8192 = 2048 fit the dataset's 64 MiB:
// 2 batches, each rank holding its replica's 2·128 rows, 2097152 floats):
// stage 0 allocates 4·(2·131072 + 4·67108864 + 7·8·131072) = 1104150528
// bytes on its device and keeps 4·(2·67108864 + 2097152) = 545259520 on
// the host; stage 1, with the projection, a step's inputs and targets
// and the 8 microbatches' losses with a spare, 4·(2·131072 + 5·67108864 +
// 10·8·131072 + 9) = 1385168932 and 4·(2·67108864 + 2097152 + 8) = 545259552: 1.79
// GB a rank on average, 28.6 GB for 16 ranks, twice that with the
// garbage collector's headroom.
func TestMemoryCheckRefusesTheIssueExample(t *testing.T) {
	gcDefaults(t)
	c := DefaultConfig()
	c.Width, c.Layers, c.Replicas = 8192, 4, 8
	if err := c.validateModel(); err != nil {
		t.Fatalf("the example's sizes should be valid: %v", err)
	}
	for _, s := range []struct {
		stage     int
		dev, host int64
	}{{0, 1104150528, 545259520}, {1, 1385168932, 545259552}} {
		if got := c.rankMemory(s.stage); got.Device != s.dev || got.Host != s.host {
			t.Errorf("stage %d: %+v, want device %d, host %d", s.stage, got, s.dev, s.host)
		}
	}
	const gb = 1_000_000_000
	for _, avail := range []int64{16 * gb, 57 * gb} {
		err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 2 * avail, Available: avail, Host: true}}, 64)
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%d bytes available: %v, want a *ConfigError", avail, err)
		}
		for _, w := range []string{"about 1.8 GB per rank × 16 ranks on this host × 2 for the garbage collector's headroom (GOGC=100) = 57.3 GB", fmt.Sprintf("but %d.0 GB is available", avail/gb)} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q does not say %q", err, w)
			}
		}
		if want := []string{"Width", "Layers", "Microbatches", "MicrobatchSize", "Replicas"}; !slices.Equal(ce.Fields(), want) {
			t.Errorf("Fields() = %q, want %q", ce.Fields(), want)
		}
	}
	// 57.3 GB needed: 58 GB is enough; Available, not Total, counts.
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 58 * gb, Available: 58 * gb, Host: true}}, 64); err != nil {
		t.Errorf("58 GB available: %v", err)
	}
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 1000 * gb, Available: 40 * gb, Host: true}}, 64); err == nil {
		t.Error("40 GB available of 1000: accepted")
	}
	// Under a memory limit the collector keeps the heap below it: no
	// headroom, and the limit caps what is available.
	debug.SetMemoryLimit(40 * gb)
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Available: 100 * gb, Host: true}}, 64); err != nil {
		t.Errorf("40 GB limit, 100 GB available: %v", err)
	}
	debug.SetMemoryLimit(20 * gb)
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Available: 100 * gb, Host: true}}, 64); err == nil || !strings.Contains(err.Error(), "× 16 ranks on this host = 28.6 GB, but 20.0 GB is available") {
		t.Errorf("20 GB limit, 100 GB available: %v", err)
	}
}

// On devices of their own (GPUs) each rank is compared with its device:
// the message names the device and the rank.
func TestMemoryCheckPerDevice(t *testing.T) {
	gcDefaults(t)
	c := DefaultConfig()
	c.Backend = runtime.CUDA
	c.Width, c.Layers = 8192, 4 // stage 0 needs 1104150528 bytes, stage 1 1385168928
	err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 2e9, Available: 1.2e9}}, 2)
	if err == nil || !strings.Contains(err.Error(), "about 1.4 GB on cuda:1 (rank 1), but 1.2 GB is available there") {
		t.Errorf("1.2 GB per GPU: %v", err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || !slices.Equal(ce.Fields(), []string{"Width", "Layers", "Microbatches", "MicrobatchSize", "Stages"}) {
		t.Errorf("fields: %v", err)
	}
	// The host memory the ranks keep is not the GPU's, nor does the
	// collector's headroom apply there.
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 2e9, Available: 1.39e9}}, 2); err != nil {
		t.Errorf("1.39 GB per GPU: %v", err)
	}
	// Two ranks sharing one GPU add up: 1104150528 + 1385168928 =
	// 2489319456 bytes.
	err = c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 4e9, Available: 2.48e9}}, 1)
	if err == nil || !strings.Contains(err.Error(), "about 2.5 GB on cuda:0 (ranks [0 1] sharing it), but 2.5 GB is available there") {
		t.Errorf("2.48 GB on one shared GPU: %v", err)
	}
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 4e9, Available: 2.49e9}}, 1); err != nil {
		t.Errorf("2.49 GB on one shared GPU: %v", err)
	}
	// With data parallelism each rank sharing the GPU may also hold the
	// in-process all-reduce's scratch for a chunk's gradients: one layer
	// (4 layers over 2 stages × 2 chunks) of 8192² floats in each of the 4
	// ranks (-pp 2 -dp 2), 268435456 bytes each, on top of 2·2489319456:
	// 6052380736 bytes.
	c.Replicas = 2
	err = c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 20e9, Available: 6.04e9}}, 1)
	if err == nil || !strings.Contains(err.Error(), "about 6.1 GB on cuda:0 (ranks [0 1 2 3] sharing it), but 6.0 GB is available there: lower Width, Layers, Microbatches or MicrobatchSize, or raise Devices") {
		t.Errorf("6.04 GB for 4 ranks with dp on one GPU: %v", err)
	}
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 20e9, Available: 6.06e9}}, 1); err != nil {
		t.Errorf("6.06 GB for 4 ranks with dp on one GPU: %v", err)
	}
	// A GPU another job has filled: nothing available is not unknown
	// (which Total would stand in for).
	err = c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 20e9, AvailableKnown: true}}, 1)
	if err == nil || !strings.Contains(err.Error(), "on cuda:0 (rank 0), but nothing is available there") {
		t.Errorf("a full GPU: %v", err)
	}
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Total: 20e9}}, 1); err != nil {
		t.Errorf("20 GB, available unknown: %v", err)
	}
}

// countedMemory describes every device as the host's memory and counts
// the calls by device.
type countedMemory struct {
	mem   runtime.DeviceMemory
	calls map[int]int
}

func (f *countedMemory) DeviceMemory(i int) (runtime.DeviceMemory, error) {
	f.calls[i]++
	return f.mem, nil
}

// The check asks each device once, however many ranks share it: the cpu
// backend reads /proc/meminfo at every call.
func TestMemoryCheckAsksEachDeviceOnce(t *testing.T) {
	gcDefaults(t)
	c := smallConfig(2, 1, 1, Schedule1F1B)
	c.Replicas = 2048 // 4096 ranks on 64 devices
	f := &countedMemory{mem: runtime.DeviceMemory{Total: 1 << 50, Available: 1 << 50, Host: true}, calls: make(map[int]int)}
	if err := c.checkMemory(f, 64); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 64 {
		t.Errorf("asked %d devices, want 64", len(f.calls))
	}
	for i, n := range f.calls {
		if n != 1 {
			t.Errorf("device %d asked %d times, want once", i, n)
		}
	}
}

// A device whose memory cannot be told is not checked.
func TestMemoryCheckUnknown(t *testing.T) {
	c := DefaultConfig()
	c.Width, c.Layers, c.Replicas = 8192, 4, 8
	for _, f := range []fakeMemory{
		{err: runtime.StatusUnavailable},
		{mem: runtime.DeviceMemory{Host: true}},
		{mem: runtime.DeviceMemory{}},
	} {
		if err := c.checkMemory(f, 64); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

// The host figure is what setup really allocates too. On the CPU backend
// device memory is Go heap as well, so everything the ranks' setup makes
// shows in the heap's allocation count: at sizes where the buffers, the
// dataset above all (4 MiB on each of the 4 ranks of the first and last
// stages, none on the 2 of the middle one), dwarf the bookkeeping (streams,
// process groups: about half a MiB), what NewTrainer allocates is the sum
// of every rank's Device and Host, plus a little.
func TestMemoryEstimateHost(t *testing.T) {
	cfg := smallConfig(3, 1, 2, Schedule1F1B)
	cfg.Width, cfg.Layers, cfg.Microbatches, cfg.MicrobatchSize, cfg.Steps = 128, 6, 4, 16, 128
	var want int64
	for id := range cfg.Stages * cfg.Replicas {
		e := cfg.rankMemory(id % cfg.Stages)
		want += e.Device + e.Host
	}
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	tr, err := NewTrainer(context.Background(), cfg)
	goruntime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	got := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("estimated %d bytes, NewTrainer allocated %d", want, got)
	if got < want || got > want+1<<20 {
		t.Errorf("NewTrainer allocated %d bytes; the ranks' estimates add up to %d (allowed: up to 1 MiB more)", got, want)
	}
}

// Ranks on devices of their own (GPUs) keep host memory too: each of the
// two stages holds its replica's share of the dataset and stages its
// weight uploads on the host. At width 1024 with the default 8 × 16 rows
// and 10 steps, the dataset holds the 10 global batches (2^24/(1024·128)
// = 128 would fit): 10·128·1024 floats, 5242880 bytes, and the staging
// is two 1024² blocks of floats, 8388608 bytes, 13631488 bytes a rank,
// plus 8 losses on the last: 27263008 bytes for both. The schedule's
// plan of 64 actions in 68 rounds (planBytes) adds 49152 bytes, twice
// that with the collector's headroom: 27361312 bytes in all. Device
// memory is plentiful; the host's decides.
func TestMemoryCheckCountsHostMemoryOfDeviceRanks(t *testing.T) {
	gcDefaults(t)
	c := DefaultConfig()
	c.Backend = runtime.CUDA
	c.Width = 1024
	gpu := fakeMemory{mem: runtime.DeviceMemory{Total: 80e9, Available: 80e9}}
	withHostMemory(t, 27_000_000)
	err := c.checkMemory(gpu, 2)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("27 MB of host memory for 27.4 MB: %v, want a *ConfigError", err)
	}
	for _, w := range []string{
		"the ranks on cuda devices keep about 13.6 MB of host memory per rank",
		"× 2 ranks + 49.2 kB for the schedule's plan × 2 for the garbage collector's headroom (GOGC=100) = 27.4 MB, but 27.0 MB is available on the host",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if want := []string{"Width", "Microbatches", "MicrobatchSize", "Replicas"}; !slices.Equal(ce.Fields(), want) {
		t.Errorf("Fields() = %q, want %q", ce.Fields(), want)
	}
	withHostMemory(t, 27_400_000)
	if err := c.checkMemory(gpu, 2); err != nil {
		t.Errorf("27.4 MB of host memory for 27361312 bytes: %v", err)
	}
}
