package jsonsummary

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// Schema names the document's layout.
const Schema = "trainscope.summary/v1"

// Input is what a summary is made of: the sinks' figures at the end of a
// run.
type Input struct {
	RunID string
	// Partial, when set, says why the run is incomplete ("partial run:
	// interrupted by SIGINT at step 46"); the figures cover what ran.
	Partial string
	// Command is the profile-run command line after "profile-run".
	Command []string
	// Trainer is the built-in trainer's job; nil for a wrapped command
	// or an import.
	Trainer *Trainer
	// Environment is what the run ran on; nil leaves it out.
	Environment *Environment
	// Stats are the profiler's counts (Profiler.Stats).
	Stats profiler.Stats
	// Steps are the step times per rank (StepSummary.Ranks).
	Steps []profiler.StepStats
	// Groups are the range tables per rank and tag (Summary.Groups);
	// the document sums them over ranks (profiler.MergeRanks).
	Groups []profiler.Group
	// Pipeline is the pipeline analysis (analysis.Sink.Summary); nil
	// leaves it out.
	Pipeline *analysis.Summary
	// Cycle is the cycle a wrapped command's or an import's collectives
	// repeat (cycle.Sink.Result); nil leaves it out.
	Cycle *cycle.Result
}

// Document is the JSON summary.
type Document struct {
	Schema  string   `json:"schema"`
	RunID   string   `json:"run_id,omitempty"`
	Partial string   `json:"partial,omitempty"`
	Command []string `json:"command"`
	Trainer *Trainer `json:"trainer,omitempty"`
	// Environment is what the run ran on; summaries written before it
	// was added have none.
	Environment *Environment `json:"environment,omitempty"`
	Records     Records      `json:"records"`
	Steps       []RankStep   `json:"steps"`
	Pipeline    *Pipeline    `json:"pipeline,omitempty"`
	// CollectiveCycle is, for a wrapped command or an import, the cycle
	// its collectives repeat: the step, most likely, of a job that marks
	// none. Absent for the built-in trainer's runs, where no rank issued
	// a collective, and in summaries written before it.
	CollectiveCycle *CollectiveCycle `json:"collective_cycle,omitempty"`
	Ranges          []Range          `json:"ranges"`
}

// CollectiveCycle is what package cycle found in a wrapped command's
// collectives: the cycle most ranks repeat, or why none was found.
type CollectiveCycle struct {
	Found bool `json:"found"`
	// Why says why no cycle was found (the lowest rank's reason); empty
	// where one was.
	Why string `json:"why,omitempty"`
	// Ranks counts the ranks that issued collectives, AgreeingRanks
	// those whose cycle takes the step's time (within cycle.SameStep
	// of the median over the ranks with one).
	Ranks         int `json:"ranks"`
	AgreeingRanks int `json:"agreeing_ranks"`
	// Operations per cycle (the most common among the agreeing ranks:
	// a pipeline's middle stages have more than its ends; the range in
	// MinOperations and MaxOperations), by kind, and their bytes, as
	// the lowest agreeing rank of that many has them.
	Operations    int       `json:"operations"`
	MinOperations int       `json:"min_operations"`
	MaxOperations int       `json:"max_operations"`
	Ops           []CycleOp `json:"ops"`
	Bytes         int64     `json:"bytes"`
	Cycles        int       `json:"cycles"` // the fewest whole cycles an agreeing rank's stretch held
	P50           *float64  `json:"p50_s"`  // median over the agreeing ranks of their median cycle time; null without a cycle
	P90           *float64  `json:"p90_s"`  // the largest 90th percentile among them; null without a cycle
	// Device is the time within a cycle its collectives ran on the
	// device (the union of their intervals; cycle.Job.Device); null
	// where none was timed there.
	Device *float64 `json:"device_s"`
	// Busy is the time within a cycle the GPU was busy, by the one
	// definition of busy time (cycle.Job.Busy); null where no kernel was
	// traced.
	Busy *float64 `json:"busy_s"`
	// Note says why the cycle may be a part of the step (cycle.Job.Note:
	// its repetitions fill less than half the operations kept); empty
	// otherwise.
	Note string `json:"note,omitempty"`
	// Run is, per rank whose cycles were timed, every cycle over the
	// whole run (cycle.Run), ranks in order; Stalls the job's longest
	// cycles of cycle.StallFactor times their rank's median or more
	// (cycle.Job.Stalls), longest first.
	Run    []CycleRun   `json:"run"`
	Stalls []CycleStall `json:"stalls"`
}

// CycleRun is one rank's cycles over the whole run.
type CycleRun struct {
	Rank   int     `json:"rank"`
	Cycles int     `json:"cycles"`
	From   float64 `json:"from_s"` // when the first began, seconds into the run
	To     float64 `json:"to_s"`   // when the last ended
	Min    float64 `json:"min_s"`
	P50    float64 `json:"p50_s"` // quantiles within 1 % (cycle.QuantileAccuracy)
	P90    float64 `json:"p90_s"`
	P99    float64 `json:"p99_s"`
	Max    float64 `json:"max_s"`
	Sum    float64 `json:"sum_s"`
	// Breaks counts where the sequence did not go on into another cycle,
	// Missed the times operations left the window uncounted.
	Breaks int `json:"breaks"`
	Missed int `json:"missed"`
}

// CycleStall is one long cycle.
type CycleStall struct {
	Rank    int     `json:"rank"`
	At      float64 `json:"at_s"` // when it began, seconds into the run
	Seconds float64 `json:"s"`
}

// CycleOp is one kind of operation in a cycle.
type CycleOp struct {
	Op    string `json:"op"`
	Count int    `json:"count"`
	Bytes int64  `json:"bytes"`
}

// Trainer is the built-in trainer's job, as its first line says it.
type Trainer struct {
	Placement      string `json:"placement"` // "2 ranks on 2 cuda devices", "2 ranks sharing 1 cuda device (in-process collectives)"
	Stages         int    `json:"pp"`
	Chunks         int    `json:"vpp"`
	Replicas       int    `json:"dp"`
	Microbatches   int    `json:"microbatches"`
	MicrobatchSize int    `json:"microbatch_size"`
	Layers         int    `json:"layers"`
	Width          int    `json:"width"`
	Precision      string `json:"precision"` // the one it computed in
	Schedule       string `json:"schedule"`
	Steps          int    `json:"steps"` // asked for; steps[].steps says how many ran
}

// Environment is what a run ran on: profile-run's build, the host, and
// the devices and vendor libraries the built-in trainer used.
type Environment struct {
	ProfileRun Build `json:"profile_run"`
	// Host is where profile-run ran; nil for an import, whose records
	// come from elsewhere.
	Host *Host `json:"host,omitempty"`
	// Backend, Devices and Libraries are the built-in trainer's: the
	// device type, the devices in use, and the libraries loaded for them
	// (the collective library only where the ranks used it).
	Backend   string    `json:"backend,omitempty"`
	Devices   []Device  `json:"devices,omitempty"`
	Libraries []Library `json:"libraries,omitempty"`
	// Variables are the environment variables that steer the libraries
	// (NCCL_*, CUDA_*, TORCH_NCCL_*, …) as profile-run saw them: what a
	// wrapped command inherits unless its launcher changes them. None
	// for an import.
	Variables map[string]string `json:"variables,omitempty"`
}

// DevicesText names the devices in use, "2 × NVIDIA H100 80GB HBM3"
// (consecutive devices of one name together); the host backend's by the
// host's processor, "AMD EPYC (16 CPUs)"; "" where nothing names them.
func (e *Environment) DevicesText() string {
	var names []string
	for _, d := range e.Devices {
		if d.Name != "" {
			names = append(names, d.Name)
		}
	}
	if len(names) == 0 || len(names) < len(e.Devices) {
		if e.Backend == "cpu" && e.Host != nil && e.Host.CPUModel != "" {
			return fmt.Sprintf("%s (%d CPUs)", e.Host.CPUModel, e.Host.CPUs)
		}
		return ""
	}
	var parts []string
	for i := 0; i < len(names); {
		j := i + 1
		for j < len(names) && names[j] == names[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d × %s", j-i, names[i]))
		i = j
	}
	return strings.Join(parts, " + ")
}

// Text is the environment in a line, for a page or a report's header:
// "1 × NVIDIA H100 80GB HBM3; CUDA runtime 13.0, cuBLAS 13.1.0, NCCL
// 2.28.9; host node7; profile-run v0.3.1"; the parts it has.
func (e *Environment) Text() string {
	var parts []string
	if d := e.DevicesText(); d != "" {
		parts = append(parts, d)
	}
	var libs []string
	for _, l := range e.Libraries {
		if l.Version != "" {
			libs = append(libs, l.Name+" "+l.Version)
		}
	}
	if len(libs) > 0 {
		parts = append(parts, strings.Join(libs, ", "))
	}
	if e.Host != nil && e.Host.Name != "" {
		parts = append(parts, "host "+e.Host.Name)
	}
	if v := e.ProfileRun.Version; v != "" {
		b := "profile-run " + v
		if r := e.ProfileRun.Revision; r != "" && !strings.Contains(v, r[:min(len(r), 12)]) {
			b += " (" + r[:min(len(r), 12)] + ")"
		}
		parts = append(parts, b)
	}
	return strings.Join(parts, "; ")
}

// Build is the build of profile-run that wrote the summary.
type Build struct {
	Version  string `json:"version"`            // the module's version; "(devel)" when built from a checkout
	Revision string `json:"revision,omitempty"` // the commit built, where the build recorded it
	Time     string `json:"time,omitempty"`     // that commit's time, RFC 3339
	Modified bool   `json:"modified,omitempty"` // built with changes not committed
	Go       string `json:"go"`                 // the Go toolchain, "go1.26.8"
}

// Host is the machine profile-run ran on.
type Host struct {
	Name     string `json:"name"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUs     int    `json:"cpus"`                // logical CPUs the process may use
	CPUModel string `json:"cpu_model,omitempty"` // where the system says it
}

// Device is a device the run used.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name,omitempty"` // "NVIDIA H100 80GB HBM3"; none for the host backend's
	// UUID is the GPU's ("GPU-6bd80cf2-…"), for a wrapped command's
	// GPUs: its processes reported them by UUID, and Index is the
	// ordinal profile-run saw them at, −1 where it did not see them.
	UUID        string `json:"uuid,omitempty"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"` // total
	// HostMemory: the memory is the host's, shared by the backend's
	// devices and the host (the host backend's devices).
	HostMemory bool `json:"host_memory,omitempty"`
}

// Library is a vendor library the run loaded.
type Library struct {
	Name    string `json:"name"`    // "CUDA runtime", "CUDA driver", "NVIDIA driver", "cuBLAS", "NCCL"
	Version string `json:"version"` // "13.0", "2.28.3"; "" where the library does not say
	Path    string `json:"path,omitempty"`
}

// Records counts what the profiler collected and lost.
type Records struct {
	Collected uint64 `json:"collected"`
	// Dropped: ranges lost while recording (full buffers) or to the
	// record bound; HostOnly: device ranges timed on the host only.
	Dropped  uint64 `json:"dropped"`
	HostOnly uint64 `json:"host_only"`
	// Unfinished: device ranges written with host times only because
	// their device work had not finished when the run gave up on it (a
	// kernel that hangs; profiler.Stats.Abandoned).
	Unfinished uint64 `json:"device_unfinished"`
	Errors     uint64 `json:"backend_errors"`
}

// RankStep is one rank's step times over the run.
type RankStep struct {
	Rank  int  `json:"rank"`
	Stage *int `json:"stage"` // null: its step ranges carried no stage, or several
	Steps int  `json:"steps"`
	// Mean, Min, Max and the quantiles (nearest rank, within 1%) of its
	// steps' host wall time, in seconds; null where it ended no step.
	Mean *float64 `json:"mean_s"`
	Min  *float64 `json:"min_s"`
	P50  *float64 `json:"p50_s"`
	P90  *float64 `json:"p90_s"`
	P99  *float64 `json:"p99_s"`
	Max  *float64 `json:"max_s"`
	// Busy is the share of its steps' wall time a stream computed (the
	// report's Busy %); null without device-timed compute.
	Busy     *float64 `json:"busy_fraction"`
	CutShort int      `json:"cut_short_steps"`
}

// Pipeline is the pipeline analysis over the complete steps.
type Pipeline struct {
	// Stepless: the job marked no steps (a wrapped command without NVTX
	// steps): collectives were matched as they came, and each rank's
	// figures are totals over the run, not per step.
	Stepless      bool `json:"stepless"`
	Steps         int  `json:"steps"`
	CompleteSteps int  `json:"complete_steps"`
	Stages        int  `json:"stages"`
	Chunks        int  `json:"chunks"`
	Microbatches  int  `json:"microbatches"`
	// IdealBubble is (p−1)/(v·m+p−1); null where the shape is unknown.
	IdealBubble *float64      `json:"ideal_bubble_fraction"`
	Bubbles     []StageBubble `json:"bubbles"`
	Ranks       []RankWait    `json:"ranks"`
	Collectives Collectives   `json:"collectives"`
	// Straggler is the rank that caused most of the waiting at
	// collectives, when one stands out; null otherwise.
	Straggler *int `json:"straggler"`
	// SlowestStage is the stage whose forward and backward computation
	// per step leads the next stage's by analysis.MinStageLead or more
	// (the report's "stage balance"): the one the others wait for; null
	// when none does or there are fewer than two stages.
	SlowestStage *int     `json:"slowest_stage"`
	Problems     []string `json:"problems"`
}

// StageBubble is one stage's bubble per rank and step.
type StageBubble struct {
	Stage     *int      `json:"stage"` // null: work of no stage
	RankSteps int       `json:"rank_steps"`
	Bubble    float64   `json:"bubble_s"`        // per rank and step
	Compute   *float64  `json:"compute_s"`       // forward and backward computation per rank and step; null without a span
	Fraction  *float64  `json:"bubble_fraction"` // of the span; null without one
	Chunks    []float64 `json:"chunk_bubble_s"`  // per chunk, per rank and step
	Drain     float64   `json:"drain_s"`         // per rank and step
}

// RankWait is one rank's communication and waiting per step.
type RankWait struct {
	Rank  int  `json:"rank"`
	Stage *int `json:"stage"`
	Steps int  `json:"steps"`
	// Calls counts the complete collectives it took part in.
	Calls int `json:"collectives"`
	// Comm is its communication time per step (null for a job without
	// steps: its collectives were matched as they came, and their time
	// is not summed); Overlap the share of it that computation
	// overlapped (null without device-timed compute, or without Comm).
	Comm    *float64 `json:"comm_s"`
	Overlap *float64 `json:"overlap_fraction"`
	// Waited and Caused are, per step, its waiting at collectives for
	// the last rank and the others' waiting for it; Score its share of
	// all the waiting caused.
	Waited float64 `json:"waited_s"`
	Caused float64 `json:"caused_s"`
	Score  float64 `json:"straggler_score"`
}

// Collectives sums the complete steps' collectives matched across ranks.
type Collectives struct {
	Matched   int `json:"matched"`
	Transfers int `json:"p2p_matched"`
	// Skew quantiles of the members' arrival times (within 1%) and the
	// largest, in seconds; null where no collective was matched.
	SkewP50 *float64 `json:"skew_p50_s"`
	SkewP90 *float64 `json:"skew_p90_s"`
	SkewP99 *float64 `json:"skew_p99_s"`
	SkewMax *float64 `json:"skew_max_s"`
}

// Range is one range name's totals over every rank, in one tag.
type Range struct {
	Tag   string `json:"tag"`
	Name  string `json:"name"`
	Count int    `json:"count"`
	// Host and Device are the report's Host Total and Device Total, in
	// seconds.
	Host   float64 `json:"host_s"`
	Device float64 `json:"device_s"`
}

// Make builds the document from in.
func Make(in Input) Document {
	d := Document{Schema: Schema, RunID: in.RunID, Partial: in.Partial, Command: append([]string{}, in.Command...), Trainer: in.Trainer,
		Environment: in.Environment,
		Steps:       []RankStep{}, Ranges: []Range{}}
	d.Records = Records{Collected: in.Stats.Collected, Dropped: in.Stats.Dropped + in.Stats.Overflow, HostOnly: in.Stats.EventDrops, Unfinished: in.Stats.Abandoned, Errors: in.Stats.Errors}
	for _, st := range in.Steps {
		n := time.Duration(max(st.Steps, 1))
		rs := RankStep{Rank: st.Rank, Stage: stage(st.Stage), Steps: st.Steps, CutShort: st.CutShort}
		if st.Steps > 0 {
			rs.Mean, rs.Min, rs.P50, rs.P90, rs.P99, rs.Max = ptr(sec(st.Wall/n)), ptr(sec(st.Min)), ptr(sec(st.P50)), ptr(sec(st.P90)), ptr(sec(st.P99)), ptr(sec(st.Max))
		}
		if st.Computed && st.Wall > 0 {
			rs.Busy = ptr(float64(st.Busy) / float64(st.Wall))
		}
		d.Steps = append(d.Steps, rs)
	}
	for _, g := range profiler.MergeRanks(in.Groups) {
		for _, n := range g.Names {
			d.Ranges = append(d.Ranges, Range{Tag: g.Tag, Name: n.Name, Count: n.Count, Host: sec(n.HostTotal), Device: sec(n.DeviceTotal)})
		}
	}
	if in.Pipeline != nil {
		d.Pipeline = pipeline(*in.Pipeline)
	}
	if in.Cycle != nil && len(in.Cycle.Ranks) > 0 {
		d.CollectiveCycle = collectiveCycle(*in.Cycle)
	}
	return d
}

func collectiveCycle(r cycle.Result) *CollectiveCycle {
	c := &CollectiveCycle{Ranks: len(r.Ranks), Ops: []CycleOp{}, Run: []CycleRun{}, Stalls: []CycleStall{}}
	for _, rk := range r.Ranks {
		if run := rk.Run; run.Cycles > 0 {
			c.Run = append(c.Run, CycleRun{Rank: rk.Rank, Cycles: run.Cycles, From: sec(run.From), To: sec(run.To),
				Min: sec(run.Min), P50: sec(run.P50), P90: sec(run.P90), P99: sec(run.P99), Max: sec(run.Max), Sum: sec(run.Sum),
				Breaks: run.Breaks, Missed: run.Missed})
		}
	}
	j, ok := r.Job()
	if !ok {
		c.Why = r.Ranks[0].Why
		return c
	}
	c.Found, c.AgreeingRanks, c.Operations, c.Bytes, c.Cycles = true, j.Agreeing, j.Length, j.Bytes, j.Cycles
	c.MinOperations, c.MaxOperations = j.MinLength, j.MaxLength
	c.Note = j.Note()
	if j.DeviceKnown {
		c.Device = ptr(sec(j.Device))
	}
	if j.BusyKnown {
		c.Busy = ptr(sec(j.Busy))
	}
	for _, o := range j.Ops {
		c.Ops = append(c.Ops, CycleOp{Op: o.Op, Count: o.Count, Bytes: o.Bytes})
	}
	c.P50, c.P90 = ptr(sec(j.Median)), ptr(sec(j.P90))
	for _, s := range j.Stalls() {
		c.Stalls = append(c.Stalls, CycleStall{Rank: s.Rank, At: sec(s.Start), Seconds: sec(s.Duration)})
	}
	return c
}

func pipeline(s analysis.Summary) *Pipeline {
	p := &Pipeline{Stepless: s.Stepless, Steps: s.Steps, CompleteSteps: s.Complete, Stages: s.Pipeline.Stages, Chunks: s.Pipeline.Chunks,
		Microbatches: s.Pipeline.Microbatches, Bubbles: []StageBubble{}, Ranks: []RankWait{}, Problems: []string{}}
	if !math.IsNaN(s.Pipeline.Ideal) {
		p.IdealBubble = ptr(s.Pipeline.Ideal)
	}
	for _, st := range s.Stages {
		n := time.Duration(max(st.RankSteps, 1))
		b := StageBubble{Stage: stage(st.Stage), RankSteps: st.RankSteps, Bubble: sec(st.Bubble / n), Chunks: []float64{}, Drain: sec(st.Drain / n)}
		if st.Span > 0 {
			b.Fraction = ptr(st.Fraction())
			b.Compute = ptr(sec(st.Compute()))
		}
		for _, c := range st.Chunks {
			b.Chunks = append(b.Chunks, sec(c/n))
		}
		p.Bubbles = append(p.Bubbles, b)
	}
	for _, r := range s.Ranks {
		n := time.Duration(max(r.Steps, 1))
		rw := RankWait{Rank: r.Rank, Stage: stage(r.Stage), Steps: r.Steps, Calls: r.Calls,
			Waited: sec(r.Waited / n), Caused: sec(r.Caused / n), Score: r.Score}
		if !s.Stepless {
			rw.Comm = ptr(sec(r.Comm / n))
			if r.Computed && r.Comm > 0 {
				rw.Overlap = ptr(float64(r.Overlap) / float64(r.Comm))
			}
		}
		p.Ranks = append(p.Ranks, rw)
	}
	c := s.Collectives
	p.Collectives = Collectives{Matched: c.Matched, Transfers: c.Transfers}
	if c.Matched > 0 {
		p.Collectives.SkewP50, p.Collectives.SkewP90, p.Collectives.SkewP99, p.Collectives.SkewMax = ptr(sec(c.P50Skew)), ptr(sec(c.P90Skew)), ptr(sec(c.P99Skew)), ptr(sec(c.MaxSkew))
	}
	if s.Straggler != profiler.None {
		p.Straggler = ptr(s.Straggler)
	}
	if b, ok := s.Balance(); ok && b.StandsOut() {
		p.SlowestStage = ptr(b.Slowest.Stage)
	}
	p.Problems = append(p.Problems, s.Problems...)
	return p
}

// Write writes the document made from in as indented JSON.
func Write(w io.Writer, in Input) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Make(in))
}

func sec(d time.Duration) float64 { return d.Seconds() }

func ptr[T any](v T) *T { return &v }

// stage is a stage label as JSON: null for none.
func stage(s int) *int {
	if s == profiler.None {
		return nil
	}
	return ptr(s)
}

// Read reads a document Write wrote. A document of another schema is
// refused, naming it: one of another trainscope.summary version says it
// was written by another profile-run version. Fields this version does not know
// are ignored (a schema may add fields).
func Read(r io.Reader) (Document, error) {
	var d Document
	dec := json.NewDecoder(r)
	if err := dec.Decode(&d); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return Document{}, fmt.Errorf("not JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			field := "the document"
			if te.Field != "" {
				field = "field " + te.Field
			}
			return Document{}, fmt.Errorf("%s at byte %d: a JSON %s where %s belongs", field, te.Offset, te.Value, jsonKind(te.Type))
		case errors.Is(err, io.EOF):
			return Document{}, errors.New("empty: no JSON document")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return Document{}, errors.New("truncated: the JSON document ends early")
		}
		return Document{}, err
	}
	switch {
	case d.Schema == Schema:
	case d.Schema == "":
		return Document{}, fmt.Errorf("no \"schema\" field: not a summary.json trainscope wrote (want %q)", Schema)
	case strings.HasPrefix(d.Schema, "trainscope.summary/"):
		return Document{}, fmt.Errorf("schema %q: written by another profile-run version; this one reads %q", d.Schema, Schema)
	default:
		return Document{}, fmt.Errorf("schema %q: not a summary.json trainscope wrote (want %q)", d.Schema, Schema)
	}
	return d, nil
}

// jsonKind names what JSON a Go type is read from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}
