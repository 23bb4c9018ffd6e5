package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/runtime"
)

// fakeMachine is a fake of what chooseBackend asks: how many GPUs load (an
// error where the CUDA runtime does not) and whether NCCL loads; the host
// backend always has 4 devices and its in-process collectives.
func fakeMachine(gpus int, cudaErr, ncclErr error) backends {
	return backends{
		devices: func(t runtime.DeviceType) (int, error) {
			if t == runtime.CUDA {
				return gpus, cudaErr
			}
			return 4, nil
		},
		collectives: func(t runtime.DeviceType) error {
			if t == runtime.CUDA {
				return ncclErr
			}
			return nil
		},
	}
}

func job(pp, dp, devices int) pipeline.Config {
	c := pipeline.DefaultConfig()
	c.Stages, c.Replicas, c.Devices = pp, dp, devices
	return c
}

// TestChooseBackend: a job whose ranks share a GPU, or that has one rank,
// trains on CUDA without NCCL; one that gives each rank a GPU needs it,
// and -backend auto then says why it trains on the host instead.
func TestChooseBackend(t *testing.T) {
	noNCCL := errors.New("NCCL library (libnccl) not found")
	noCUDA := errors.New("CUDA runtime library (libcudart) not found")
	for _, tc := range []struct {
		name    string
		m       backends
		c       pipeline.Config
		want    runtime.DeviceType
		found   []bool   // passedOver's found, in order
		mention []string // in the passed-over lines
	}{
		{"one GPU, no NCCL, the default job", fakeMachine(1, nil, noNCCL), job(2, 1, 0), runtime.CUDA, nil, nil},
		{"two GPUs, NCCL", fakeMachine(2, nil, nil), job(2, 1, 0), runtime.CUDA, nil, nil},
		{"two GPUs, no NCCL, -devices 1", fakeMachine(2, nil, noNCCL), job(2, 1, 1), runtime.CUDA, nil, nil},
		{"two GPUs, no NCCL, one rank", fakeMachine(2, nil, noNCCL), job(1, 1, 0), runtime.CUDA, nil, nil},
		{"eight GPUs, no NCCL, pp 2 × dp 8 share them", fakeMachine(8, nil, noNCCL), job(2, 8, 0), runtime.CUDA, nil, nil},
		{"two GPUs, no NCCL, two ranks", fakeMachine(2, nil, noNCCL), job(2, 1, 0), runtime.CPU, []bool{true},
			[]string{"not cuda: 2 ranks on 2 cuda devices", "NCCL library (libnccl) not found", "-devices 1", "TRAINSCOPE_NCCL_LIB=", "training on the cpu backend"}},
		{"no CUDA runtime", fakeMachine(0, noCUDA, noNCCL), job(2, 1, 0), runtime.CPU, []bool{false},
			[]string{"-backend auto: not cuda: CUDA runtime library (libcudart) not found; training on the cpu backend"}},
		{"no CUDA runtime, as the backend says it", fakeMachine(0, &runtime.Error{Op: "Init", Status: runtime.StatusUnavailable,
			Detail: "CUDA runtime library (libcudart) not found", Err: errors.New("tried libcudart.so.13 (No such file or directory)")}, noNCCL),
			job(2, 1, 0), runtime.CPU, []bool{false}, []string{"libcudart.so.13 (No such file"}},
		{"a driver with no GPU", fakeMachine(0, nil, nil), job(2, 1, 0), runtime.CPU, []bool{false},
			[]string{"not cuda: no cuda devices"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseBackend("auto", tc.c, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if got.backend != tc.want {
				t.Errorf("backend %s, want %s", got.backend, tc.want)
			}
			var found []bool
			var lines []string
			for _, p := range got.passedOver {
				found = append(found, p.found)
				lines = append(lines, p.String())
			}
			if len(found) != len(tc.found) || (len(found) > 0 && found[0] != tc.found[0]) {
				t.Errorf("passed over %q (found %v), want found %v", lines, found, tc.found)
			}
			all := strings.Join(lines, "\n")
			for _, p := range got.passedOver {
				if b := p.Brief(); strings.Contains(b, "tried") || !strings.Contains(b, "training on the cpu backend") {
					t.Errorf("brief line %q: the paths tried are for debug, the backend chosen is said", b)
				}
			}
			for _, m := range tc.mention {
				if !strings.Contains(all, m) {
					t.Errorf("passed over %q: no %q", all, m)
				}
			}
		})
	}
}

// TestChooseBackendNamed: a backend named with -backend is the one used,
// or the run fails saying what it lacks.
func TestChooseBackendNamed(t *testing.T) {
	noNCCL := errors.New("NCCL library (libnccl) not found")
	if got, err := chooseBackend("cuda", job(2, 1, 0), fakeMachine(1, nil, noNCCL)); err != nil || got.backend != runtime.CUDA || len(got.passedOver) != 0 {
		t.Errorf("cuda on one GPU without NCCL: %+v, %v", got, err)
	}
	_, err := chooseBackend("cuda", job(2, 1, 0), fakeMachine(2, nil, noNCCL))
	if err == nil || !errors.Is(err, noNCCL) {
		t.Fatalf("cuda, 2 ranks on 2 GPUs without NCCL: %v", err)
	}
	for _, m := range []string{"backend cuda is not usable here", "2 ranks on 2 cuda devices", "-devices 1"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%q: no %q", err, m)
		}
	}
	var ue *usageError
	if _, err := chooseBackend("gpu", job(2, 1, 0), fakeMachine(1, nil, nil)); !errors.As(err, &ue) || !strings.Contains(err.Error(), `"gpu"`) {
		t.Errorf("-backend gpu: %v, want a usage error naming it", err)
	}
	broken := fakeMachine(1, nil, nil)
	broken.devices = func(t runtime.DeviceType) (int, error) { return 0, errors.New(t.String() + " broken") }
	if _, err := chooseBackend("auto", job(2, 1, 0), broken); err == nil || !strings.Contains(err.Error(), "no usable backend") ||
		!strings.Contains(err.Error(), "cuda broken") || !strings.Contains(err.Error(), "cpu broken") {
		t.Errorf("nothing usable: %v", err)
	}
}
