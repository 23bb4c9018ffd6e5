package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// ErrInvalidConfig is wrapped by every error Validate returns (a
// *ConfigError).
var ErrInvalidConfig = errors.New("invalid trainer configuration")

// Schedule names accepted in Config.Schedule.
const (
	// Schedule1F1B is Megatron's interleaved 1F1B; with one chunk per
	// stage it is the plain 1F1B (PipeDream-Flush).
	Schedule1F1B = "1f1b"
	// ScheduleGPipe runs every forward, then every backward.
	ScheduleGPipe = "gpipe"
)

// DefaultCommTimeout bounds every wait of a step when Config.CommTimeout
// is 0.
const DefaultCommTimeout = 60 * time.Second

// Config describes a training run: the layout of the ranks, the model,
// the data and the schedule.
//
// The data is a synthetic dataset of D samples, drawn once when the ranks
// are set up: step s trains on the global batch of G = Replicas ×
// Microbatches × MicrobatchSize samples s·G … s·G+G−1 of the run, and
// sample i of the run is sample i mod D of the dataset, with
//
//	D = G × min(Steps, max(1, ⌊2^24 / (Width × G)⌋))
//
// that is min(Steps × G, max(G, 64 MiB of float32 inputs)) in whole
// global batches: a run of Steps steps sees fresh samples every step as
// long as its inputs fit in 64 MiB, and cycles through the dataset
// otherwise (and past Steps). D depends on these sizes only, so every
// layout, and ReferenceLosses, train on the same samples.
type Config struct {
	// Backend is the device type the run uses; its runtime and ccl
	// backends must be registered (import them with _).
	Backend runtime.DeviceType

	Stages   int // pipeline stages, pp
	Chunks   int // model chunks (virtual stages) per stage, vpp
	Replicas int // data-parallel replicas, dp

	Microbatches   int // microbatches per step and replica, m
	MicrobatchSize int // rows (samples) per microbatch

	Width  int // features per row; every weight is Width×Width
	Layers int // total depth; a multiple of Stages·Chunks

	Steps        int
	Schedule     string // Schedule1F1B or ScheduleGPipe
	LearningRate float64
	Seed         uint64

	// Precision is the compute precision of the model's GEMMs; weights,
	// activations and gradients stay float32 whatever it is. The zero
	// value, runtime.MathDefault, is full float32. A precision the
	// backend lacks is not an error: the run computes in float32, and
	// EffectivePrecision says so.
	Precision runtime.MathMode

	// Profiler records every rank's ranges when set; nil turns profiling
	// off.
	Profiler *profiler.Profiler
	// CommTimeout bounds every wait for communication or device work in a
	// step; 0 means DefaultCommTimeout. A wait it cuts short fails with a
	// *CommTimeoutError (errors.Is ErrCommTimeout). It bounds the
	// in-process collectives' own waits too (ranks on CPU devices, or
	// sharing devices), and a rank's host held up handing work to a device
	// whose queue is full: the trainer fails the step and aborts the
	// communicators after CommTimeout of that (see Trainer.Step). Once a
	// step is stopped (its context ends), the work its ranks had queued
	// gets CommTimeout from then, and Trainer.Close CommTimeout in all
	// (no longer than that), for the ranks' device work and the process
	// groups' communication.
	CommTimeout time.Duration
	// Devices is the most devices the run uses; 0 means every device the
	// backend has. With fewer devices than ranks, ranks share them (see
	// Placement).
	Devices int

	// ActionDelay, StragglerRank and StragglerDelay add known device time
	// to a run, for tests of what the profiler's analysis measures: the
	// rank's stream holds still, inside the action's range (runtime.Sleep:
	// on the CPU backend without using a core, on CUDA a one-thread kernel
	// that watches the GPU's timer). ActionDelay is added to every forward and
	// backward action of every rank, so that chunks cost the same known
	// time however the host's cores are shared; StragglerDelay is added
	// once per microbatch on rank StragglerRank (to the forward of its
	// first chunk), m·StragglerDelay per step.
	ActionDelay    time.Duration
	StragglerRank  int
	StragglerDelay time.Duration
}

// DefaultConfig returns a run of 2 stages × 2 chunks, 8 microbatches of 16
// rows, 16 layers of width 128 and 10 steps on the CPU backend; it takes
// well under a second on two host cores, profiled or not.
func DefaultConfig() Config {
	return Config{
		Backend:        runtime.CPU,
		Stages:         2,
		Chunks:         2,
		Replicas:       1,
		Microbatches:   8,
		MicrobatchSize: 16,
		Width:          128,
		Layers:         16,
		Steps:          10,
		Schedule:       Schedule1F1B,
		LearningRate:   2,
		Seed:           1,
		CommTimeout:    DefaultCommTimeout,
	}
}

// Validate reports the first problem of the configuration, in one line
// naming the fields and their values: a *ConfigError, which wraps
// ErrInvalidConfig. Besides the sizes — Stages × Replicas at most
// MaxRanks, checked first — it checks that the backend is
// available and, where the backend describes its devices' memory
// (runtime.MemoryDescriber), that what the ranks allocate (see Memory)
// fits in it, adding up the ranks that share a device (see Placement),
// and that the host can hold the schedule's plan, which every run keeps
// in host memory whatever the backend, with the host memory that ranks on
// devices of their own keep (their share of the dataset and the staging
// of their uploads).
func (c Config) Validate() error {
	if err := c.validateModel(); err != nil {
		return err
	}
	impl, err := runtime.Available(c.Backend)
	if err != nil {
		e := invalid("backend %s: %v", c.Backend, err)
		e.cause = err
		return e
	}
	if _, ok := impl.(runtime.Sleeper); !ok && (c.ActionDelay > 0 || c.StragglerDelay > 0) {
		name, v := "ActionDelay", c.ActionDelay
		if v == 0 {
			name, v = "StragglerDelay", c.StragglerDelay
		}
		return invalid("%s: the %s backend cannot hold its streams still (runtime.Sleeper), so it cannot add delays", field(name, v), c.Backend)
	}
	pl, err := c.placement(impl)
	if err != nil {
		return err
	}
	if d, ok := impl.(runtime.MemoryDescriber); ok {
		return c.checkMemory(d, pl.Devices)
	}
	return nil
}

// MaxRanks is the most ranks (Stages × Replicas) a run may have: every
// rank is a goroutine of this process, and the in-process communicators
// hold at most ccl/local.MaxRanks ranks. Validate refuses more at once,
// before counting anything per rank.
const MaxRanks = local.MaxRanks

// Placement says where a run's ranks go: rank r (replica r / Stages,
// stage r mod Stages) on device r mod Devices.
type Placement struct {
	Type    runtime.DeviceType
	Ranks   int
	Devices int // devices in use: the backend's count, or fewer
	// Shared reports that ranks share devices (Ranks > Devices). The
	// collectives and transfers then run in process through the runtime's
	// own operations (ccl/local.NewShared) instead of the registered
	// backend (NCCL for CUDA, which does not put two ranks on one device),
	// with the same profiled ranges, bytes and bus bandwidth.
	Shared bool
}

// String describes the placement for a run's first line: "2 ranks on 2
// cuda devices" or "2 ranks sharing 1 cuda device (in-process
// collectives)".
func (p Placement) String() string {
	dev := p.Type.String() + " devices"
	if p.Devices == 1 {
		dev = p.Type.String() + " device"
	}
	if p.Shared {
		return fmt.Sprintf("%d ranks sharing %d %s (in-process collectives)", p.Ranks, p.Devices, dev)
	}
	rk := "ranks"
	if p.Ranks == 1 {
		rk = "rank"
	}
	return fmt.Sprintf("%d %s on %d %s", p.Ranks, rk, p.Devices, dev)
}

// Placement returns where c's ranks go on its backend's devices; the
// backend must be available.
func (c Config) Placement() (Placement, error) {
	impl, err := runtime.Available(c.Backend)
	if err != nil {
		e := invalid("backend %s: %v", c.Backend, err)
		e.cause = err
		return Placement{}, e
	}
	return c.placement(impl)
}

func (c Config) placement(impl runtime.Impl) (Placement, error) {
	n, err := impl.DeviceCount()
	if err != nil {
		e := invalid("backend %s: device count: %v", c.Backend, err)
		e.cause = err
		return Placement{}, e
	}
	if n < 1 {
		return Placement{}, invalid("backend %s has no devices", c.Backend)
	}
	if c.Devices > 0 {
		n = min(n, c.Devices)
	}
	ranks := c.Stages * c.Replicas
	return Placement{Type: c.Backend, Ranks: ranks, Devices: min(n, ranks), Shared: ranks > n}, nil
}

// validateModel checks everything but the backend: what ReferenceLosses
// needs too.
func (c Config) validateModel() error {
	sizes := []struct {
		name string
		v    int
	}{
		{"Stages", c.Stages}, {"Chunks", c.Chunks}, {"Replicas", c.Replicas},
		{"Microbatches", c.Microbatches}, {"MicrobatchSize", c.MicrobatchSize},
		{"Width", c.Width}, {"Layers", c.Layers}, {"Steps", c.Steps},
	}
	for _, s := range sizes {
		if s.v < 1 {
			return invalid("%s: must be at least 1", field(s.name, s.v))
		}
	}
	// The ranks are goroutines of this process: refuse a count the
	// in-process communication could not hold before anything counts
	// over the ranks (in float64: Stages × Replicas may overflow int).
	if ranks := float64(c.Stages) * float64(c.Replicas); ranks > MaxRanks {
		return invalid("%s × %s = %.0f ranks: the trainer runs every rank in this process, and its in-process communication allows at most %d ranks (ccl/local.MaxRanks); lower %s or %s",
			field("Stages", c.Stages), field("Replicas", c.Replicas), ranks, MaxRanks, fieldName("Stages"), fieldName("Replicas"))
	}
	// Each chunk holds at least one layer. Said before the sizes are
	// counted, which multiply by Chunks: a huge Chunks would otherwise be
	// refused as a model too large, in the names of the other fields.
	if c.Chunks > c.Layers {
		return invalid("%s: more model chunks per stage than %s; each chunk holds at least one layer", field("Chunks", c.Chunks), field("Layers", c.Layers))
	}
	// Whether the buffers fit is Validate's question, for the backend's
	// devices; here only that their sizes can be counted.
	if err := c.checkSizesRepresentable(); err != nil {
		return err
	}
	if pv := c.Stages * c.Chunks; c.Layers%pv != 0 {
		return invalid("%s: not divisible by %s × %s = %d", field("Layers", c.Layers), field("Stages", c.Stages), field("Chunks", c.Chunks), pv)
	}
	if _, err := c.schedule(); err != nil {
		return err
	}
	if !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0) {
		return invalid("%s: must be positive and finite", field("LearningRate", c.LearningRate))
	}
	if c.Devices < 0 {
		return invalid("%s: must not be negative (0 uses every device)", field("Devices", c.Devices))
	}
	if c.CommTimeout < 0 {
		return invalid("%s: must not be negative", field("CommTimeout", c.CommTimeout))
	}
	if c.ActionDelay < 0 {
		return invalid("%s: must not be negative", field("ActionDelay", c.ActionDelay))
	}
	if c.StragglerDelay < 0 {
		return invalid("%s: must not be negative", field("StragglerDelay", c.StragglerDelay))
	}
	if ranks := c.Stages * c.Replicas; c.StragglerDelay > 0 && (c.StragglerRank < 0 || c.StragglerRank >= ranks) {
		return invalid("%s: no such rank (ranks 0 to %d)", field("StragglerRank", c.StragglerRank), ranks-1)
	}
	if c.Precision < runtime.MathDefault || c.Precision > runtime.MathBF16 {
		return invalid("%s: unknown precision (known: %s, %s, %s)", field("Precision", int(c.Precision)), runtime.MathDefault, runtime.MathTF32, runtime.MathBF16)
	}
	return nil
}

// EffectivePrecision returns the precision the trainer's GEMMs compute in:
// Precision where the backend supports it (runtime.SupportsMath), float32
// (runtime.MathDefault) where it does not. When the two differ, the string
// says why in one line, naming the Config field as Error does
// ("Precision=bf16"); it is empty otherwise.
func (c Config) EffectivePrecision() (runtime.MathMode, string) {
	return c.EffectivePrecisionExplained(fieldEqualsValue)
}

// EffectivePrecisionExplained is EffectivePrecision with the explanation
// naming the Config field by name(field, value), as ConfigError.Explain
// does, so that a command line can say it in its own names.
func (c Config) EffectivePrecisionExplained(name func(field string, value any) string) (runtime.MathMode, string) {
	if c.Precision == runtime.MathDefault {
		return runtime.MathDefault, ""
	}
	req := name("Precision", c.Precision)
	impl, err := runtime.Lookup(c.Backend)
	if err != nil {
		return runtime.MathDefault, fmt.Sprintf("backend %s: %v; %s not available, using %s", c.Backend, err, req, runtime.MathDefault)
	}
	if runtime.SupportsMath(impl, c.Precision) {
		return c.Precision, ""
	}
	has := []string{runtime.MathDefault.String()}
	for _, m := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
		if runtime.SupportsMath(impl, m) {
			has = append(has, m.String())
		}
	}
	return runtime.MathDefault, fmt.Sprintf("the %s backend computes in %s; %s not available there, using %s",
		c.Backend, strings.Join(has, " or "), req, runtime.MathDefault)
}

// IdealBubble is the share of a step each stage would idle under the
// configured schedule if communication were free and every chunk cost the
// same (schedule.Schedule.BubbleFraction); NaN for a schedule that cannot
// be built.
func (c Config) IdealBubble() float64 {
	s, err := c.schedule()
	if err != nil {
		return math.NaN()
	}
	return s.BubbleFraction()
}

// schedule builds the configured schedule; its errors wrap
// ErrInvalidConfig and the schedule package's own.
func (c Config) schedule() (*schedule.Schedule, error) {
	var (
		s   *schedule.Schedule
		err error
	)
	name := strings.ToLower(c.Schedule)
	switch name {
	case Schedule1F1B:
		s, err = schedule.Interleaved1F1B(c.Stages, c.Chunks, c.Microbatches)
	case ScheduleGPipe:
		s, err = schedule.GPipe(c.Stages, c.Chunks, c.Microbatches)
	default:
		return nil, invalid("%s: unknown schedule (known: %s, %s)", field("Schedule", c.Schedule), Schedule1F1B, ScheduleGPipe)
	}
	if err != nil {
		var e *ConfigError
		if name == Schedule1F1B && c.Chunks > 1 && c.Stages > 0 && c.Microbatches%c.Stages != 0 {
			// The one schedule rule a valid size breaks, said in the
			// fields' names rather than the schedule package's p, v, m.
			e = invalid("%s: must be a multiple of %s for the interleaved 1F1B schedule (%s)",
				field("Microbatches", c.Microbatches), field("Stages", c.Stages), field("Chunks", c.Chunks))
		} else {
			e = invalid("%s, %s, %s: %v", field("Stages", c.Stages), field("Chunks", c.Chunks), field("Microbatches", c.Microbatches), err)
		}
		e.cause = err
		return nil, e
	}
	return s, nil
}

// commTimeout is CommTimeout with its default applied.
func (c Config) commTimeout() time.Duration {
	if c.CommTimeout == 0 {
		return DefaultCommTimeout
	}
	return c.CommTimeout
}

// layersPerChunk is the depth of one virtual stage.
func (c Config) layersPerChunk() int { return c.Layers / (c.Stages * c.Chunks) }

// replicaRows is the number of rows one replica trains on per step.
func (c Config) replicaRows() int { return c.Microbatches * c.MicrobatchSize }

// globalRows is the global batch per step.
func (c Config) globalRows() int { return c.Replicas * c.replicaRows() }
