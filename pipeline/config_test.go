package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/runtime"
)

func TestValidate(t *testing.T) {
	ok := smallConfig(2, 2, 1, Schedule1F1B)
	cases := []struct {
		name   string
		change func(*Config)
		want   []string // substrings of the error; nil means valid
		sched  bool     // the error also wraps the schedule package's
	}{
		{"default", func(c *Config) { *c = DefaultConfig() }, nil, false},
		{"small", func(c *Config) {}, nil, false},
		{"one stage", func(c *Config) { c.Stages, c.Chunks = 1, 1 }, nil, false},
		{"gpipe any m", func(c *Config) { c.Schedule, c.Microbatches = ScheduleGPipe, 3 }, nil, false},
		{"plain 1f1b any m", func(c *Config) { c.Chunks, c.Microbatches = 1, 3 }, nil, false},
		{"upper-case schedule", func(c *Config) { c.Schedule = "GPipe" }, nil, false},
		{"layers", func(c *Config) { c.Layers = 10 }, []string{"Layers=10", "Stages=2 × Chunks=2 = 4"}, false},
		{"devices", func(c *Config) { c.Devices = -1 }, []string{"Devices=-1: must not be negative"}, false},
		{"interleaved m", func(c *Config) { c.Microbatches = 3 }, []string{"Microbatches=3", "multiple of Stages=2", "Chunks=2"}, true},
		{"stages", func(c *Config) { c.Stages = 0 }, []string{"Stages=0"}, false},
		{"chunks", func(c *Config) { c.Chunks = -1 }, []string{"Chunks=-1"}, false},
		// A huge Chunks alone is named, not refused as a model too large
		// to count in the names of the (valid) other sizes.
		{"chunks beyond layers", func(c *Config) { c.Chunks = 1 << 50 }, []string{"Chunks=1125899906842624", "Layers=8", "at least one layer"}, false},
		{"more chunks than layers", func(c *Config) { c.Chunks = 9 }, []string{"Chunks=9", "Layers=8"}, false},
		{"replicas", func(c *Config) { c.Replicas = 0 }, []string{"Replicas=0"}, false},
		{"microbatches", func(c *Config) { c.Microbatches = 0 }, []string{"Microbatches=0"}, false},
		{"microbatch size", func(c *Config) { c.MicrobatchSize = -4 }, []string{"MicrobatchSize=-4"}, false},
		{"width", func(c *Config) { c.Width = 0 }, []string{"Width=0"}, false},
		{"layers zero", func(c *Config) { c.Layers = 0 }, []string{"Layers=0"}, false},
		{"steps", func(c *Config) { c.Steps = 0 }, []string{"Steps=0"}, false},
		{"too large to count", func(c *Config) { c.Width = 1 << 31 }, []string{"Width=2147483648", "too large"}, false},
		// Small buffers, but more actions than can be counted: the
		// sizes named are those that multiply into them.
		{"too many actions to count", func(c *Config) { c.Stages, c.Chunks, c.Layers, c.Microbatches = 4096, 1, 1, 1<<49 }, []string{"Stages=4096 × Chunks=1 × Microbatches=562949953421312", "too many pipeline actions"}, false},
		{"global batch too large to count", func(c *Config) {
			c.Stages, c.Chunks, c.Layers, c.Replicas, c.Width, c.MicrobatchSize = 1, 1, 1, 4096, 1, 1<<50
		}, []string{"Replicas=4096", "global batch too large"}, false},
		// Every rank is a goroutine of this process: a rank count beyond
		// the in-process communicators' bound is refused at once, before
		// anything is counted per rank (-dp 10000000 took minutes).
		{"most ranks", func(c *Config) { c.Replicas = 2048 }, nil, false},
		{"too many ranks", func(c *Config) { c.Replicas = 2049 }, []string{"Stages=2 × Replicas=2049 = 4098 ranks", "at most 4096 ranks"}, false},
		{"ten million replicas", func(c *Config) { c.Replicas = 10_000_000 }, []string{"Replicas=10000000 = 20000000 ranks", "at most 4096 ranks"}, false},
		{"ranks overflowing int", func(c *Config) { c.Stages, c.Chunks, c.Layers, c.Replicas = 1<<40, 1, 1<<40, 1<<40 }, []string{"Stages=1099511627776 × Replicas=1099511627776", "at most 4096 ranks"}, false},
		{"schedule", func(c *Config) { c.Schedule = "zero-bubble" }, []string{`Schedule="zero-bubble": unknown`, "1f1b", "gpipe"}, false},
		{"empty schedule", func(c *Config) { c.Schedule = "" }, []string{`Schedule="": unknown`}, false},
		{"learning rate", func(c *Config) { c.LearningRate = 0 }, []string{"LearningRate=0"}, false},
		{"learning rate NaN", func(c *Config) { c.LearningRate = math.NaN() }, []string{"LearningRate=NaN"}, false},
		{"timeout", func(c *Config) { c.CommTimeout = -1 }, []string{"CommTimeout=-1ns"}, false},
		{"backend", func(c *Config) { c.Backend = runtime.CUDA }, []string{"backend cuda"}, false},
		// A precision the backend lacks is not an error (see
		// EffectivePrecision); one that does not exist is.
		{"bf16 on cpu", func(c *Config) { c.Precision = runtime.MathBF16 }, nil, false},
		{"tf32 on cpu", func(c *Config) { c.Precision = runtime.MathTF32 }, nil, false},
		{"unknown precision", func(c *Config) { c.Precision = 7 }, []string{"Precision=7: unknown precision", "float32", "tf32", "bf16"}, false},
		{"negative precision", func(c *Config) { c.Precision = -1 }, []string{"Precision=-1"}, false},
		{"delays", func(c *Config) { c.ActionDelay, c.StragglerRank, c.StragglerDelay = 1e6, 1, 2e6 }, nil, false},
		{"negative action delay", func(c *Config) { c.ActionDelay = -1 }, []string{"ActionDelay=-1ns: must not be negative"}, false},
		{"negative straggler delay", func(c *Config) { c.StragglerDelay = -1 }, []string{"StragglerDelay=-1ns: must not be negative"}, false},
		{"straggler rank", func(c *Config) { c.StragglerRank, c.StragglerDelay = 2, 1 }, []string{"StragglerRank=2: no such rank (ranks 0 to 1)"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("message spans lines: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not mention %q", msg, w)
				}
			}
			if got := errors.Is(err, schedule.ErrInvalidArgument); got != tc.sched {
				t.Errorf("errors.Is(err, schedule.ErrInvalidArgument) = %v, want %v", got, tc.sched)
			}
		})
	}
}

// A caller that sets the fields from elsewhere can say the problem in its
// own names.
func TestConfigErrorExplain(t *testing.T) {
	upper := func(field string, value any) string {
		if value == nil {
			return strings.ToUpper(field)
		}
		return fmt.Sprintf("<%s %v>", strings.ToUpper(field), value)
	}
	ok := smallConfig(2, 2, 1, Schedule1F1B)
	cases := []struct {
		name    string
		change  func(*Config)
		fields  []string
		explain string
	}{
		{"size", func(c *Config) { c.Replicas = 0 }, []string{"Replicas"}, "<REPLICAS 0>: must be at least 1"},
		{"layers", func(c *Config) { c.Layers = 6 }, []string{"Layers", "Stages", "Chunks"}, "<LAYERS 6>: not divisible by <STAGES 2> × <CHUNKS 2> = 4"},
		{"interleaved m", func(c *Config) { c.Microbatches = 3 }, []string{"Microbatches", "Stages", "Chunks"},
			"<MICROBATCHES 3>: must be a multiple of <STAGES 2> for the interleaved 1F1B schedule (<CHUNKS 2>)"},
		{"schedule", func(c *Config) { c.Schedule = "zigzag" }, []string{"Schedule"}, "<SCHEDULE zigzag>: unknown schedule (known: 1f1b, gpipe)"},
		{"learning rate", func(c *Config) { c.LearningRate = -1 }, []string{"LearningRate"}, "<LEARNINGRATE -1>: must be positive and finite"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			var ce *ConfigError
			if err := c.Validate(); !errors.As(err, &ce) {
				t.Fatalf("Validate() = %v, want a *ConfigError", err)
			}
			if got := ce.Fields(); !slices.Equal(got, tc.fields) {
				t.Errorf("Fields() = %q, want %q", got, tc.fields)
			}
			if got := ce.Explain(upper); got != tc.explain {
				t.Errorf("Explain = %q, want %q", got, tc.explain)
			}
		})
	}
}
