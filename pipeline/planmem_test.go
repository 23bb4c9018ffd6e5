package pipeline

import (
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"

	"github.com/trainscope/trainscope/pipeline/schedule"
)

// BenchmarkPlanRounds measures what planRounds allocates per action of a
// step (2·p·v·m actions) and per stage-round (p × rounds), the two terms
// planBytes counts.
func BenchmarkPlanRounds(b *testing.B) {
	for _, sz := range []struct{ p, v, m int }{{64, 1, 64}, {8, 4, 512}, {256, 1, 256}, {16, 16, 256}, {512, 1, 512}} {
		b.Run(fmt.Sprintf("p%d_v%d_m%d", sz.p, sz.v, sz.m), func(b *testing.B) {
			s, err := schedule.Interleaved1F1B(sz.p, sz.v, sz.m)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var rounds int
			for b.Loop() {
				out, err := planRounds(s)
				if err != nil {
					b.Fatal(err)
				}
				rounds = len(out[0])
			}
			b.ReportMetric(float64(rounds), "rounds")
			b.ReportMetric(float64(planBytes(sz.p, sz.v, sz.m)), "estB")
		})
	}
}

// planBytes is honest: at least what planRounds allocates (all of it,
// garbage included, which bounds what is live at its peak), and not more
// than half as much again beyond small plans (whose fixed costs it rounds up).
func TestPlanBytesCoversAllocations(t *testing.T) {
	for _, sz := range []struct{ p, v, m int }{{64, 1, 64}, {8, 4, 512}, {16, 16, 256}, {4, 1, 7}, {128, 2, 256}} {
		s, err := schedule.Interleaved1F1B(sz.p, sz.v, sz.m)
		if err != nil {
			t.Fatal(err)
		}
		measured := uint64(math.MaxUint64)
		for range 3 { // the least of three: other goroutines may allocate meanwhile
			var before, after goruntime.MemStats
			goruntime.ReadMemStats(&before)
			if _, err := planRounds(s); err != nil {
				t.Fatal(err)
			}
			goruntime.ReadMemStats(&after)
			measured = min(measured, after.TotalAlloc-before.TotalAlloc)
		}
		est := planBytes(sz.p, sz.v, sz.m)
		if float64(est) < float64(measured) || (measured > 1<<20 && float64(est) > 1.5*float64(measured)) {
			t.Errorf("p=%d v=%d m=%d: planBytes %d, planRounds allocated %d", sz.p, sz.v, sz.m, est, measured)
		}
	}
}

// withHostMemory makes hostMemory report avail bytes available (0: unknown).
var defaultHostMemory = hostMemory

func withHostMemory(t *testing.T, avail int64) {
	old := hostMemory
	hostMemory = func() (runtime.DeviceMemory, bool) {
		return runtime.DeviceMemory{Total: avail, Available: avail, Host: true}, avail > 0
	}
	t.Cleanup(func() { hostMemory = old })
}

// planConfig is a model of almost nothing but its schedule: one row of
// width 1 per microbatch, one layer per chunk.
func planConfig(p, v, m int) Config {
	c := DefaultConfig()
	c.Stages, c.Chunks, c.Microbatches = p, v, m
	c.Replicas, c.MicrobatchSize, c.Width, c.Layers, c.Steps = 1, 1, 1, p*v, 1
	return c
}

// Sizes of pp = m = 4096: valid sizes whose plan alone is
// some 28 GB, refused (in the names of Stages, Chunks and Microbatches)
// on a host with less, whether the ranks are on host memory (cpu) or on
// devices of their own (the plan is on the host either way). Nothing the
// size of the plan is allocated.
func TestValidateCountsThePlan(t *testing.T) {
	gcDefaults(t)
	const gb = 1_000_000_000
	c := planConfig(4096, 1, 4096)
	if err := c.validateModel(); err != nil {
		t.Fatalf("the sizes should be valid: %v", err)
	}
	if est := planBytes(4096, 1, 4096); est < 23*gb {
		t.Fatalf("planBytes(4096, 1, 4096) = %d, want at least the 23 GB measured", est)
	}
	withHostMemory(t, 16*gb)
	for name, d := range map[string]fakeMemory{
		"host":   {mem: runtime.DeviceMemory{Total: 32 * gb, Available: 16 * gb, Host: true}},
		"device": {mem: runtime.DeviceMemory{Total: 80 * gb, Available: 80 * gb}},
	} {
		err := c.checkMemory(d, 64)
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%s: %v, want a *ConfigError", name, err)
		}
		if want := []string{"Stages", "Chunks", "Microbatches"}; !slices.Equal(ce.Fields()[:3], want) {
			t.Errorf("%s: Fields() = %q, want %q first", name, ce.Fields(), want)
		}
		for _, w := range []string{"Stages=4096 × Chunks=1 × Microbatches=4096 = 33554432 actions a step needs about 27.8 GB of host memory", "but 16.0 GB is available: lower Stages, Chunks or Microbatches"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}
	// pp = m = 512 (about 0.43 GB of plan) on a host with 0.5 GB.
	withHostMemory(t, gb/2)
	if err := planConfig(512, 1, 512).checkMemory(fakeMemory{mem: runtime.DeviceMemory{Available: 80 * gb}}, 8); err == nil {
		t.Error("pp = m = 512 with 0.5 GB of host memory: accepted")
	}
	// Real jobs' sizes pass where the memory is there: pp 256 × vpp 16 ×
	// m 4096 (23.5 GB of plan) with 1 TB, and unknown host memory is not
	// checked.
	withHostMemory(t, 1000*gb)
	for _, c := range []Config{planConfig(256, 16, 4096), planConfig(512, 1, 8192), planConfig(4096, 1, 4096)} {
		if err := c.validateModel(); err != nil {
			t.Errorf("%d×%d×%d: %v", c.Stages, c.Chunks, c.Microbatches, err)
		}
		if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Available: 80 * gb}}, 8); err != nil {
			t.Errorf("%d×%d×%d with 1 TB: %v", c.Stages, c.Chunks, c.Microbatches, err)
		}
	}
	withHostMemory(t, 0)
	if err := c.checkMemory(fakeMemory{mem: runtime.DeviceMemory{Available: 80 * gb}}, 8); err != nil {
		t.Errorf("unknown host memory: %v", err)
	}
}

// Sizes beyond the schedule's bound are refused by validateModel (so by
// Validate and ReferenceLosses too) naming the fields, without a panic.
func TestValidateRefusesSchedulesBeyondTheBound(t *testing.T) {
	c := planConfig(4096, 16, 4096) // 2^29 actions a step
	err := c.validateModel()
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, schedule.ErrInvalidArgument) || !strings.Contains(err.Error(), "MaxActions") {
		t.Fatalf("%v, want a *ConfigError wrapping schedule.ErrInvalidArgument", err)
	}
	if want := []string{"Stages", "Chunks", "Microbatches"}; !slices.Equal(ce.Fields(), want) {
		t.Errorf("Fields() = %q, want %q", ce.Fields(), want)
	}
}

// ReferenceLosses refuses a model whose float64 copy does not fit in the
// host's memory, before allocating it, instead of dying of it.
func TestReferenceLossesChecksHostMemory(t *testing.T) {
	gcDefaults(t)
	const gb = 1_000_000_000
	c := DefaultConfig()
	c.Width, c.Layers, c.Steps = 8192, 16, 1 // 16 layers of 2·8192² float64: 17.2 GB
	if b := c.referenceBytes(); b < 17*gb || b > 18*gb {
		t.Fatalf("referenceBytes = %.0f, want about 17.2 GB", b)
	}
	withHostMemory(t, 8*gb)
	_, err := ReferenceLosses(c)
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("%v, want a *ConfigError", err)
	}
	if ce.Fields()[0] != "Width" || !strings.Contains(err.Error(), "needs about 17.9 GB on the host × 2 for the garbage collector's headroom (GOGC=100) = 35.8 GB, but 8.0 GB is available: lower Width, Layers, Microbatches, MicrobatchSize or Replicas") {
		t.Errorf("%v (fields %q)", err, ce.Fields())
	}
	// The host's real memory, where the cpu backend says it: 4.4 TB of
	// weights is refused on any machine this runs on.
	hostMemory = func() (runtime.DeviceMemory, bool) { return defaultHostMemory() }
	c.Width, c.Layers = 1<<16, 64
	if _, err := ReferenceLosses(c); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Width=65536, Layers=64 on this host: %v", err)
	}
	// What fits runs.
	withHostMemory(t, 1000*gb)
	if _, err := ReferenceLosses(smallConfig(2, 2, 1, Schedule1F1B)); err != nil {
		t.Error(err)
	}
}

// referenceBytes is what ReferenceLosses allocates, within 10%.
func TestReferenceBytesMatchesAllocations(t *testing.T) {
	withHostMemory(t, 0)
	c := DefaultConfig()
	c.Width, c.Layers, c.Steps, c.Microbatches = 256, 8, 1, 16
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	if _, err := ReferenceLosses(c); err != nil {
		t.Fatal(err)
	}
	goruntime.ReadMemStats(&after)
	got, est := float64(after.TotalAlloc-before.TotalAlloc), c.referenceBytes()
	if est < 0.9*got || est > 1.1*got {
		t.Errorf("referenceBytes %.0f, ReferenceLosses allocated %.0f", est, got)
	}
}
