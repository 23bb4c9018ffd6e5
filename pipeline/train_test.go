package pipeline

import (
	"context"
	"math"
	"testing"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// smallConfig is a run small enough for -race: 8 layers of width 16.
func smallConfig(pp, vpp, dp int, sched string) Config {
	c := DefaultConfig()
	c.Stages, c.Chunks, c.Replicas = pp, vpp, dp
	c.Microbatches, c.MicrobatchSize = 4, 4
	c.Width, c.Layers = 16, 8
	c.Steps = 4
	c.Schedule = sched
	c.LearningRate = 2
	c.Seed = 7
	c.CommTimeout = 20 * time.Second
	return c
}

func TestTrainMatchesReference(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"pp2_vpp2_dp1_1f1b", smallConfig(2, 2, 1, Schedule1F1B)},
		{"pp2_vpp2_dp2_1f1b", smallConfig(2, 2, 2, Schedule1F1B)},
		{"pp4_vpp1_1f1b", smallConfig(4, 1, 1, Schedule1F1B)},
		{"pp2_vpp2_gpipe", smallConfig(2, 2, 1, ScheduleGPipe)},
		{"pp1_vpp1", smallConfig(1, 1, 1, Schedule1F1B)},
		{"pp1_vpp2_gpipe_dp2", smallConfig(1, 2, 2, ScheduleGPipe)},
		{"pp4_vpp2_dp2_1f1b", smallConfig(4, 2, 2, Schedule1F1B)},
		{"pp2_vpp2_dp2_1f1b_one_device", withDevices(smallConfig(2, 2, 2, Schedule1F1B), 1)},
		{"pp4_vpp2_dp2_1f1b_three_devices", withDevices(smallConfig(4, 2, 2, Schedule1F1B), 3)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, err := ReferenceLosses(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Train(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Losses) != tc.cfg.Steps || len(res.StepTimes) != tc.cfg.Steps {
				t.Fatalf("got %d losses and %d step times for %d steps", len(res.Losses), len(res.StepTimes), tc.cfg.Steps)
			}
			// The trainer computes in float32, the reference in float64,
			// targets included: a float32 target of width 16 is within
			// 16·2^-24·Σ|x_i·P_ij| + 3 ulp ≈ 2.5e-6 of the float64 one
			// (Σ|x_i·P_ij| ≈ 16·0.5·0.32), which moves a loss near 0.4 by
			// at most 2·2.5e-6/√0.4 ≈ 1e-5 relative; with the float32
			// forward and backward the losses have agreed to 2e-8 in
			// practice, and the bound leaves room for summation orders.
			for i, got := range res.Losses {
				if rel := math.Abs(got-want[i]) / want[i]; !(rel <= 1e-4) {
					t.Errorf("step %d: loss %.9g, reference %.9g (relative difference %.2g)", i, got, want[i], rel)
				}
			}
			if last := res.Losses[len(res.Losses)-1]; !(last < res.Losses[0]) {
				t.Errorf("loss did not decrease: %v", res.Losses)
			}
		})
	}
}

func withDevices(c Config, n int) Config {
	c.Devices = n
	return c
}

// Ranks sharing devices train the same model as ranks on devices of their
// own: the in-process collectives move the same data. The all-reduce sums
// in another order than the registered backend's, so the losses agree to
// float32 rounding, not bit for bit.
func TestSharedDevicesTrainLikeOwnDevices(t *testing.T) {
	base := smallConfig(2, 2, 2, Schedule1F1B)
	own, err := Train(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	for _, devs := range []int{1, 2, 3} {
		cfg := withDevices(base, devs)
		pl, err := cfg.Placement()
		if err != nil {
			t.Fatal(err)
		}
		if want := (Placement{Type: runtime.CPU, Ranks: 4, Devices: devs, Shared: true}); pl != want {
			t.Fatalf("Devices=%d: placement %+v, want %+v", devs, pl, want)
		}
		res, err := Train(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Devices=%d: %v", devs, err)
		}
		for i, got := range res.Losses {
			if rel := math.Abs(got-own.Losses[i]) / own.Losses[i]; !(rel <= 1e-6) {
				t.Errorf("Devices=%d step %d: loss %.9g, on own devices %.9g", devs, i, got, own.Losses[i])
			}
		}
	}
	pl, err := base.Placement()
	if err != nil {
		t.Fatal(err)
	}
	if pl.Shared || pl.Devices != 4 || pl.String() != "4 ranks on 4 cpu devices" {
		t.Errorf("own devices: %+v %q", pl, pl)
	}
	if p, _ := withDevices(base, 1).Placement(); p.String() != "4 ranks sharing 1 cpu device (in-process collectives)" {
		t.Errorf("shared: %q", p)
	}
}
