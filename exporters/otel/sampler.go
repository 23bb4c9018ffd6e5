package otel

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Sampler names accepted in Config.Sampler and OTEL_TRACES_SAMPLER, as the
// OpenTelemetry SDK configuration defines them. Every span of trainscope's
// is a root span of its step's trace (there is no remote parent), so each
// parentbased_ sampler decides as its root sampler does.
const (
	SamplerAlwaysOn                = "always_on"
	SamplerAlwaysOff               = "always_off"
	SamplerTraceIDRatio            = "traceidratio"
	SamplerParentBasedAlwaysOn     = "parentbased_always_on"
	SamplerParentBasedAlwaysOff    = "parentbased_always_off"
	SamplerParentBasedTraceIDRatio = "parentbased_traceidratio"
)

// stepSampler decides whether a step's trace is exported, from its trace
// id alone, as the SDK's TraceIDRatioBased sampler does: every rank
// derives the same trace id for a step from the run id, so every rank
// keeps or leaves out the same steps without talking to the others.
type stepSampler struct {
	name  string  // as configured, for messages
	ratio float64 // share of traces kept: 0 to 1
	bound uint64  // trace ids whose low 63 bits are below it are kept
}

func newStepSampler(name, arg string) (stepSampler, error) {
	src, argSrc := "Config.Sampler", "Config.SamplerArg"
	if name == "" {
		name, src = os.Getenv("OTEL_TRACES_SAMPLER"), "OTEL_TRACES_SAMPLER"
	}
	if arg == "" {
		arg, argSrc = os.Getenv("OTEL_TRACES_SAMPLER_ARG"), "OTEL_TRACES_SAMPLER_ARG"
	}
	name = strings.TrimSpace(strings.ToLower(name))
	if name == "" {
		name = SamplerParentBasedAlwaysOn // the SDK's default
	}
	s := stepSampler{name: name}
	switch name {
	case SamplerAlwaysOn, SamplerParentBasedAlwaysOn:
		s.ratio = 1
	case SamplerAlwaysOff, SamplerParentBasedAlwaysOff:
		s.ratio = 0
	case SamplerTraceIDRatio, SamplerParentBasedTraceIDRatio:
		s.ratio = 1 // the specification's default argument
		if a := strings.TrimSpace(arg); a != "" {
			f, err := strconv.ParseFloat(a, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return s, invalid("%s=%q: want a ratio from 0 to 1 for %s", argSrc, arg, name)
			}
			s.ratio = f
		}
	default:
		return s, invalid("%s=%q: unknown sampler (want %s, %s, %s or their parentbased_ forms)",
			src, name, SamplerAlwaysOn, SamplerAlwaysOff, SamplerTraceIDRatio)
	}
	switch {
	case s.ratio >= 1:
		s.bound = 1 << 63
	case s.ratio > 0:
		s.bound = uint64(s.ratio * (1 << 63))
	}
	return s, nil
}

// sampled is the decision for a trace: the SDK's TraceIDRatioBased rule on
// the trace id's low 8 bytes.
func (s stepSampler) sampled(t trace.TraceID) bool {
	if s.bound == 1<<63 {
		return true
	}
	return binary.BigEndian.Uint64(t[8:16])>>1 < s.bound
}
