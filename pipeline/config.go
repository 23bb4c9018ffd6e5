package pipeline

import (
	"errors"
	"math"
	"strings"
	"time"

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

	// Profiler records every rank's ranges when set; nil turns profiling
	// off.
	Profiler *profiler.Profiler
	// CommTimeout bounds every wait for communication or device work in a
	// step; 0 means DefaultCommTimeout.
	CommTimeout time.Duration
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
// ErrInvalidConfig. Besides the sizes it checks that the backend is
// available and has Stages·Replicas devices and, where the backend
// describes their memory (runtime.MemoryDescriber), that what the ranks
// allocate (see Memory) fits in it.
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
	n, err := impl.DeviceCount()
	if err != nil {
		e := invalid("backend %s: device count: %v", c.Backend, err)
		e.cause = err
		return e
	}
	if ranks := c.Stages * c.Replicas; ranks > n {
		return invalid("%s × %s = %d ranks, but backend %s has %d devices",
			field("Stages", c.Stages), field("Replicas", c.Replicas), ranks, c.Backend, n)
	}
	if d, ok := impl.(runtime.MemoryDescriber); ok {
		return c.checkMemory(d)
	}
	return nil
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
	if c.CommTimeout < 0 {
		return invalid("%s: must not be negative", field("CommTimeout", c.CommTimeout))
	}
	return nil
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
