package pprof

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/profiler"
)

// Sample types, in the order of each sample's values.
const (
	HostTime   = "host_time"   // nanoseconds of host wall time, self
	DeviceTime = "device_time" // nanoseconds of device time, self
	Ranges     = "ranges"      // count of ranges
	// StepTime is each rank's step wall time split by what used it
	// (analysis.Rank.Time): computation by phase and chunk, transfers by
	// operation, and the idle time as "[idle: bubble]" and "[idle:
	// other]" frames, under "step". Only an Aggregate given steps
	// (AddStep) has it; it is then the default sample type.
	StepTime = "step_time"
)

// Label keys set on samples where the record has a value.
const (
	LabelRank  = "rank"  // numeric
	LabelStage = "stage" // numeric
	LabelChunk = "chunk" // numeric, the VPP chunk
	// LabelMicrobatch is numeric: the microbatch of a forward or
	// backward range and of what runs inside it.
	LabelMicrobatch = "microbatch"
	LabelStep       = "step"  // numeric
	LabelPhase      = "phase" // string: forward, backward, optimizer, comm
	LabelTag        = "tag"   // string: the profiler's tag, where one was set
)

// Option configures Build, Write and WriteFile.
type Option interface{ apply(*config) }

type config struct {
	epoch    time.Time
	comments []string
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithEpoch gives the wall-clock time that record times count from
// (profiler.Profiler.Epoch), so the profile's start time is absolute.
// Without it the profile carries no start time.
func WithEpoch(t time.Time) Option { return optionFunc(func(c *config) { c.epoch = t }) }

// WithComment adds a line to the profile's comments, which `go tool pprof`
// prints with -comments (a partial run says so there, for one).
func WithComment(s string) Option {
	return optionFunc(func(c *config) { c.comments = append(c.comments, s) })
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// ErrNoRecords is returned when there is nothing to profile.
var ErrNoRecords = errors.New("pprof: no records")

// Build returns the profile of records: one sample per record, its stack
// the record's nesting path, its values its self host time, its self
// device time and 1. records is not modified. A record whose parent is
// not among records (it was dropped, or was still open when the records
// were taken) starts a stack of its own; the totals that Write lists hold
// only when every parent is present.
func Build(records []profiler.Record, opts ...Option) (*profile.Profile, error) {
	if len(records) == 0 {
		return nil, ErrNoRecords
	}
	t := newTree(records)
	p := header(t.mapping, t.functions, t.locations, t.start, t.end, newConfig(opts))
	type labels struct {
		str  map[string][]string
		num  map[string][]int64
		unit map[string][]string
	}
	sets := make([]labels, len(t.labelKeys))
	for i, k := range t.labelKeys {
		sets[i] = labels{k.strLabels(), k.numLabels(), k.numUnits()}
	}
	n := len(records)
	samples := make([]profile.Sample, n)
	values := make([]int64, 3*n)
	p.Sample = make([]*profile.Sample, n)
	for i := range n {
		s := &samples[i]
		s.Location = t.stacks[t.stackOf[i]]
		v := values[3*i : 3*i+3 : 3*i+3]
		v[0], v[1], v[2] = t.hostSelf[i], t.deviceSelf[i], 1
		s.Value = v
		ls := &sets[t.labelOf[i]]
		s.Label, s.NumLabel, s.NumUnit = ls.str, ls.num, ls.unit
		p.Sample[i] = s
	}
	return p, nil
}

// header returns a profile's header and tables, without samples, for
// records spanning [start, end] of host time.
func header(m *profile.Mapping, fns []*profile.Function, locs []*profile.Location, start, end time.Duration, cfg config) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: HostTime, Unit: "nanoseconds"},
			{Type: DeviceTime, Unit: "nanoseconds"},
			{Type: Ranges, Unit: "count"},
		},
		DefaultSampleType: HostTime,
		PeriodType:        &profile.ValueType{Type: HostTime, Unit: "nanoseconds"},
		Period:            1,
		Comments: []string{
			"trainscope: one sample per profiled range, its stack the range nesting path",
			"host_time and device_time are self times, so cum is a range's own total",
		},
		Mapping:  []*profile.Mapping{m},
		Function: fns,
		Location: locs,
	}
	p.Comments = append(p.Comments, cfg.comments...)
	p.DurationNanos = int64(end - start)
	if !cfg.epoch.IsZero() {
		p.TimeNanos = cfg.epoch.Add(start).UnixNano()
	}
	return p
}

// Stats says what Write and WriteFile wrote.
type Stats struct {
	Samples int // one per record; for an Aggregate, one per distinct stack and label set
	Ranges  int // the ranges the samples account for
}

// Write writes the gzip-compressed profile of records to w, after checking
// it with CheckValid, and says how many samples it holds.
//
// What agrees with profiler.Summarize, summing its groups over ranks and
// tags, when every record's parent is among records (a Snapshot taken
// after Flush at the end of a run):
//
//   - for every range name, the ranges/count flat value equals its Count
//     (cum counts the ranges beneath too);
//   - for every range name that never nests inside a range of the same
//     name, host_time cum equals its HostTotal, and, when its ranges are
//     device-timed, device_time cum equals its DeviceTotal (for a name that
//     does nest in itself pprof counts only the outermost occurrence, as
//     it does for recursion);
//   - the sum of all host_time values equals the sum of the groups'
//     HostTotal (top-level host time), and of all device_time values the
//     sum of their DeviceTotal (outermost device time).
//
// flat is self time, which the report does not show. A device-timed
// range whose children ran past it on another stream (a collective on the
// communication stream under a compute-stream range) has a negative
// device_time self value: that is what keeps every cum exact. (pprof's
// "Total samples" line adds absolute values, so for device_time it then
// exceeds the sum of the flat column.)
func Write(w io.Writer, records []profiler.Record, opts ...Option) (Stats, error) {
	if len(records) == 0 {
		return Stats{}, ErrNoRecords
	}
	t := newTree(records)
	p := header(t.mapping, t.functions, t.locations, t.start, t.end, newConfig(opts))
	// The samples are written from the tree, not from p; a sample per
	// distinct stack lets CheckValid see every stack and table entry that
	// the written samples refer to.
	for _, st := range t.stacks {
		p.Sample = append(p.Sample, &profile.Sample{Location: st, Value: make([]int64, len(p.SampleType))})
	}
	if err := p.CheckValid(); err != nil {
		return Stats{}, fmt.Errorf("pprof: invalid profile: %w", err)
	}
	// BestSpeed: about 1.4 bytes a range against 0.6 at the default
	// level, which would take most of the time. The buffer turns deflate's
	// small writes into large ones, so w may be a bare file.
	bw := bufio.NewWriterSize(w, 1<<16)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err == nil {
		err = writeProfile(zw, p, t)
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return Stats{}, fmt.Errorf("pprof: %w", err)
	}
	return Stats{Samples: len(records), Ranges: len(records)}, nil
}

// WriteFile writes the profile of records to path (created or truncated).
func WriteFile(path string, records []profiler.Record, opts ...Option) (Stats, error) {
	f, err := os.Create(path)
	if err != nil {
		return Stats{}, fmt.Errorf("pprof: %w", err)
	}
	st, err := Write(f, records, opts...)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pprof: %w", cerr)
	}
	if err != nil {
		return Stats{}, err
	}
	return st, nil
}
