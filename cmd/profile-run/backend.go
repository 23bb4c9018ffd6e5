package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/nccl"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/runtime"
)

// backends is what chooseBackend asks of the machine: a device type's
// devices (the runtime backend loaded, and its device count) and whether
// its collective backend loads.
type backends struct {
	devices     func(runtime.DeviceType) (int, error)
	collectives func(runtime.DeviceType) error
}

// systemBackends asks the registered backends.
var systemBackends = backends{
	devices: func(t runtime.DeviceType) (int, error) {
		impl, err := runtime.Available(t)
		if err != nil {
			return 0, err
		}
		return impl.DeviceCount()
	},
	collectives: func(t runtime.DeviceType) error {
		_, err := ccl.Available(t)
		return err
	},
}

// backendChoice is the backend a run trains on, and those -backend auto
// preferred to it but could not use, in order.
type backendChoice struct {
	backend    runtime.DeviceType
	passedOver []passedOver
}

// passedOver is a backend -backend auto could not use, and why.
type passedOver struct {
	backend runtime.DeviceType
	// found: its devices are there, and something else was missing (the
	// collective library its placement needs): a user who has the
	// devices expects them to be used, so this is a warning.
	found bool
	why   string
	// brief is why in a few words where the whole is long (the library
	// paths tried); "" where why is short.
	brief string
	// chosen is the backend trained on instead.
	chosen runtime.DeviceType
}

func (p passedOver) String() string {
	return fmt.Sprintf("-backend auto: not %s: %s; training on the %s backend", p.backend, p.why, p.chosen)
}

// Reason is why, in a few words where they say it.
func (p passedOver) Reason() string {
	if p.brief != "" {
		return p.brief
	}
	return p.why
}

// Brief is String in a line, naming the detail logged at debug level.
func (p passedOver) Brief() string {
	if p.brief == "" {
		return p.String()
	}
	return fmt.Sprintf("-backend auto: not %s: %s (-log-level debug says more); training on the %s backend", p.backend, p.brief, p.chosen)
}

// chooseBackend resolves -backend for the job c: auto picks the first
// device type, in order of preference, that can run the job. A backend
// needs its runtime, and its collective library only where the job's
// ranks each get a device of their own: ranks that share devices
// communicate in process (pipeline.Placement), so one GPU trains the
// default job without NCCL.
func chooseBackend(name string, c pipeline.Config, m backends) (backendChoice, error) {
	order := []runtime.DeviceType{runtime.CUDA, runtime.CPU}
	if name != "auto" {
		t, err := runtime.ParseDeviceType(name)
		if err != nil {
			return backendChoice{}, usagef("-backend: unknown backend %q (one of: auto, cpu, cuda)", name)
		}
		if err := m.usable(t, c); err != nil {
			return backendChoice{}, fmt.Errorf("backend %s is not usable here: %w", t, err)
		}
		return backendChoice{backend: t}, nil
	}
	var (
		passed  []passedOver
		reasons []error
	)
	for _, t := range order {
		err := m.usable(t, c)
		if err == nil {
			for i := range passed {
				passed[i].chosen = t
			}
			return backendChoice{backend: t, passedOver: passed}, nil
		}
		var ne *needsCollectives
		p := passedOver{backend: t, found: errors.As(err, &ne), why: err.Error()}
		var re *runtime.Error
		if !p.found && errors.As(err, &re) && re.Detail != "" && re.Err != nil {
			p.brief = re.Detail
		}
		passed = append(passed, p)
		reasons = append(reasons, fmt.Errorf("%s: %w", t, err))
	}
	return backendChoice{}, fmt.Errorf("no usable backend: %w", errors.Join(reasons...))
}

// usable says whether the job c can train on t, and if not, why.
func (m backends) usable(t runtime.DeviceType, c pipeline.Config) error {
	n, err := m.devices(t)
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("no %s devices", t)
	}
	inUse := n
	if c.Devices > 0 {
		inUse = min(n, c.Devices)
	}
	// In float64: Stages × Replicas may overflow int (Validate refuses
	// such a job afterwards).
	ranks := float64(c.Stages) * float64(c.Replicas)
	if ranks > float64(inUse) || ranks <= 1 {
		return nil // shared devices, or one rank: in-process collectives
	}
	if err := m.collectives(t); err != nil {
		return &needsCollectives{backend: t, ranks: int(ranks), devices: inUse, available: n, err: err}
	}
	return nil
}

// needsCollectives: the runtime backend works, and the job's ranks, a
// device each, need the collective library, which does not load.
type needsCollectives struct {
	backend   runtime.DeviceType
	ranks     int
	devices   int // in use
	available int // the backend's
	err       error
}

func (e *needsCollectives) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s on %d %s devices communicate through its collective library, which is not usable: %v",
		e.ranks, "ranks", e.devices, e.backend, e.err)
	hints := []string{fmt.Sprintf("-devices 1 puts the ranks on one %s device, where they communicate in process", e.backend)}
	if e.backend == runtime.CUDA {
		hints = append(hints, fmt.Sprintf("%s=/path/to/libnccl.so.2 names the library (PyTorch's wheels carry one under site-packages/nvidia/nccl/lib)", nccl.EnvLibrary))
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(hints, "; "))
	return b.String()
}

func (e *needsCollectives) Unwrap() error { return e.err }
