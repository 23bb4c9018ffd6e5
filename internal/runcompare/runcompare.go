package runcompare

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
)

// Run is one side of a comparison: a summary and the name the user gave
// it (a run directory or a summary.json path).
type Run struct {
	Name string
	Doc  jsonsummary.Document
}

// Kind says how a figure's change reads.
type Kind int

const (
	// Seconds and Count change by a share of the base ("+12.0 %").
	Seconds Kind = iota
	Count
	// Fraction changes by percentage points ("+4.8 pts").
	Fraction
	// Rank is a rank, or none; it changes or it does not.
	Rank
	// Stage is a pipeline stage, or none, as Rank.
	Stage
)

// Value is one side's figure. Known is false where the run did not
// measure it (no steps, no pipeline, no device-timed compute); a Rank or
// Stage figure's V is -1 for none.
type Value struct {
	V     float64
	Known bool
}

func known(v float64) Value { return Value{V: v, Known: true} }

// Figure is one figure of both runs.
type Figure struct {
	Name      string
	Kind      Kind
	Base, New Value
}

// Change is how the figure moved from base to new, as text ("+12.0 %",
// "−4.8 pts", "=", "rank 3 → none"); empty where either side did not
// measure it.
func (f Figure) Change() string {
	if !f.Base.Known || !f.New.Known {
		return ""
	}
	b, n := f.Base.V, f.New.V
	switch f.Kind {
	case Fraction:
		return signed((n-b)*100, " pts")
	case Rank, Stage:
		if b == n {
			return "="
		}
		return labelText(f.Kind, b) + " → " + labelText(f.Kind, n)
	}
	switch {
	case b == n:
		return "="
	case b == 0:
		return "from 0"
	}
	return signed((n-b)/b*100, " %")
}

// Growth is the figure's relative change (new − base) / base, and false
// where it has none (either side unmeasured, a base of 0, not a Seconds
// or Count figure).
func (f Figure) Growth() (float64, bool) {
	if !f.Base.Known || !f.New.Known || f.Base.V <= 0 || (f.Kind != Seconds && f.Kind != Count) {
		return 0, false
	}
	return (f.New.V - f.Base.V) / f.Base.V, true
}

// RangeChange is one range's time per step in both runs, summed over
// ranks: device time where either run timed it on the device, else host
// time.
type RangeChange struct {
	Tag, Name string
	Device    bool
	Base, New Value // per step; unknown where the run had no such range, or did not time it on the device
	// Untimed says, per side (base, new), that the run had the range but
	// did not time it on the device, where the other run did (a
	// different -device-depth).
	Untimed [2]bool
}

// Comparison is what Compare found.
type Comparison struct {
	Base, New Run
	// JobDiffs lists how the jobs differ ("width 128 → 1024"), empty
	// where they are the same job.
	JobDiffs []string
	// Notes say what else makes the figures less comparable: an
	// interrupted run, few steps, drops, a job without steps.
	Notes   []string
	Figures []Figure
	// Ranges are the ranges whose time per step changed most, largest
	// change first.
	Ranges []RangeChange
	// PerStep is false where a run counted no steps: Ranges are then
	// totals over each run.
	PerStep bool
}

// The figure Gate judges: its name in Figures.
const gated = GatedStepTime

// GatedStepTime is the figure Gate judges where both runs have step
// times (GatedFigure).
const GatedStepTime = "step time p50, slowest rank"

// cycled is the figure of a wrapped job that marks no steps: the median
// time of the cycle its collectives repeat (package cycle).
const cycled = "collectives' cycle p50"

// maxRanges bounds Comparison.Ranges.
const maxRanges = 10

// fewSteps: below it, a run's median step time is a handful of steps'.
const fewSteps = 5

// Compare compares new with base.
func Compare(base, new Run) Comparison {
	c := Comparison{Base: base, New: new}
	c.JobDiffs = jobDiffs(base.Doc, new.Doc)
	machine, env := environmentDiffs(base.Doc.Environment, new.Doc.Environment)
	c.JobDiffs = append(c.JobDiffs, machine...)
	c.Notes = append(c.Notes, env...)
	for _, s := range []struct {
		side string
		d    jsonsummary.Document
	}{{"base", base.Doc}, {"new", new.Doc}} {
		c.Notes = append(c.Notes, notes(s.side, s.d)...)
	}
	if a, b := asked(base.Doc), asked(new.Doc); a != b && a > 0 && b > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("base was asked for %s, new for %d: ranges are compared per step", stepCount(a), b))
	}
	c.Figures = figures(base.Doc, new.Doc, &c.Notes)
	c.Ranges, c.PerStep = ranges(base.Doc, new.Doc)
	if d := c.sameCycle(); d != "" {
		c.Notes = append(c.Notes, d+": the job communicates otherwise each step, or one run's cycle spans several steps")
	}
	return c
}

// ErrNotGated is Gate's error where a run has no step times to judge.
var ErrNotGated = errors.New("no step times")

// GatedFigure is the figure Gate judges: the slowest rank's median step
// time, or where neither run has step times and both found the same cycle
// of collectives (a wrapped job that marks no steps), that cycle's median
// time.
func (c Comparison) GatedFigure() string {
	if f := c.figure(gated); !stepTimes(f) {
		if cf := c.figure(cycled); stepTimes(cf) && !f.Base.Known && !f.New.Known && c.sameCycle() == "" {
			return cycled
		}
	}
	return gated
}

// figure returns the figure of that name; an unknown one where there is
// none.
func (c Comparison) figure(name string) Figure {
	if i := slices.IndexFunc(c.Figures, func(f Figure) bool { return f.Name == name }); i >= 0 {
		return c.Figures[i]
	}
	return Figure{Name: name, Kind: Seconds}
}

// stepTimes reports whether both sides of f are known and positive.
func stepTimes(f Figure) bool {
	return f.Base.Known && f.New.Known && f.Base.V > 0 && f.New.V > 0
}

// sameCycle says how the runs' cycles of collectives differ; "" where
// they are the same length.
func (c Comparison) sameCycle() string {
	a, b := c.Base.Doc.CollectiveCycle, c.New.Doc.CollectiveCycle
	if a != nil && b != nil && a.Found && b.Found && a.Operations != b.Operations {
		return fmt.Sprintf("their cycles of collectives differ (base %d operations, new %d)", a.Operations, b.Operations)
	}
	return ""
}

// Gate judges new against base: the slowest rank's median step time may
// grow by at most maxGrowth (0.05: 5 %) — or, where neither run marks
// steps, the median time of the cycle their collectives repeat
// (GatedFigure). It returns the growth, and whether it is within
// maxGrowth; ErrNotGated (wrapped, naming the run) where a run has
// neither.
func (c Comparison) Gate(maxGrowth float64) (float64, bool, error) {
	f := c.figure(c.GatedFigure())
	for _, s := range []struct {
		v    Value
		side string
		r    Run
	}{{f.Base, "base", c.Base}, {f.New, "new", c.New}} {
		if !s.v.Known || s.v.V <= 0 {
			why := "a job that marks no steps — a wrapped command without NVTX or profiler steps — cannot be gated on its step time, nor on a cycle of collectives where none was found in both runs"
			if d := c.sameCycle(); d != "" {
				why = "a job that marks no steps is gated on the cycle its collectives repeat, but " + d
			}
			return 0, false, fmt.Errorf("%s %s: %w (%s)", s.side, s.r.Name, ErrNotGated, why)
		}
	}
	g, _ := f.Growth()
	// The bound is inclusive; 1e-9 absorbs the binary rounding of the
	// ratio (12.5 ms over 10 ms is 0.25000000000000006 more).
	return g, g <= maxGrowth+1e-9, nil
}

// Job is the run's job in words: the built-in trainer's shape and
// placement, a wrapped command, or an import.
func Job(d jsonsummary.Document) string {
	if t := d.Trainer; t != nil {
		return fmt.Sprintf("pp %d × vpp %d × dp %d, %d microbatches of %d rows, %d layers of width %d, %s, %s; %s",
			t.Stages, t.Chunks, t.Replicas, t.Microbatches, t.MicrobatchSize, t.Layers, t.Width, t.Precision, t.Schedule, t.Placement)
	}
	if len(d.Command) > 0 && d.Command[0] == "import" {
		return "import of " + strings.Join(d.Command[1:], " ")
	}
	if i := slices.Index(d.Command, "--"); i >= 0 {
		return "wrapped: " + strings.Join(d.Command[i+1:], " ")
	}
	return "profile-run " + strings.Join(d.Command, " ")
}

// jobDiffs lists how the jobs differ; the number of steps is left to the
// notes (the figures are per step).
func jobDiffs(a, b jsonsummary.Document) []string {
	ta, tb := a.Trainer, b.Trainer
	switch {
	case ta == nil && tb == nil:
		if ja, jb := Job(a), Job(b); ja != jb {
			return []string{fmt.Sprintf("base is %s; new is %s", ja, jb)}
		}
		return nil
	case ta == nil || tb == nil:
		return []string{fmt.Sprintf("base is %s; new is %s", Job(a), Job(b))}
	}
	var d []string
	diff := func(name string, x, y any) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %v → %v", name, x, y))
		}
	}
	diff("placement", ta.Placement, tb.Placement)
	diff("pp", ta.Stages, tb.Stages)
	diff("vpp", ta.Chunks, tb.Chunks)
	diff("dp", ta.Replicas, tb.Replicas)
	diff("microbatches", ta.Microbatches, tb.Microbatches)
	diff("microbatch size", ta.MicrobatchSize, tb.MicrobatchSize)
	diff("layers", ta.Layers, tb.Layers)
	diff("width", ta.Width, tb.Width)
	diff("precision", ta.Precision, tb.Precision)
	diff("schedule", ta.Schedule, tb.Schedule)
	return d
}

// environmentDiffs says where two runs' environments differ: the devices
// (a difference of job: the same job on another GPU is not a change of
// speed), and in notes the libraries' versions, the host and the build
// of profile-run. Summaries without an environment (written before it
// was added) compare as alike.
func environmentDiffs(a, b *jsonsummary.Environment) (job, notes []string) {
	if a == nil || b == nil {
		return nil, nil
	}
	if da, db := a.DevicesText(), b.DevicesText(); da != "" && db != "" && da != db {
		job = append(job, fmt.Sprintf("devices %s → %s", da, db))
	}
	if len(a.Libraries) > 0 && len(b.Libraries) > 0 {
		va, vb := map[string]string{}, map[string]string{}
		for _, l := range a.Libraries {
			va[l.Name] = l.Version
		}
		var moved []string
		for _, l := range b.Libraries {
			vb[l.Name] = l.Version
			if v, ok := va[l.Name]; ok && v != l.Version {
				moved = append(moved, fmt.Sprintf("%s %s → %s", l.Name, v, l.Version))
			}
		}
		for _, l := range a.Libraries {
			if _, ok := vb[l.Name]; !ok {
				moved = append(moved, fmt.Sprintf("%s %s in base only", l.Name, l.Version))
			}
		}
		for _, l := range b.Libraries {
			if _, ok := va[l.Name]; !ok {
				moved = append(moved, fmt.Sprintf("%s %s in new only", l.Name, l.Version))
			}
		}
		if len(moved) > 0 {
			notes = append(notes, "the libraries differ: "+strings.Join(moved, ", "))
		}
	}
	if a.Host != nil && b.Host != nil && a.Host.Name != b.Host.Name {
		notes = append(notes, fmt.Sprintf("the runs ran on different hosts: %s → %s", a.Host.Name, b.Host.Name))
	}
	// Variables are known for runs on a host (not imports); none set is
	// a value to compare.
	if a.Host != nil && b.Host != nil {
		if d := variableDiffs(a.Variables, b.Variables); d != "" {
			notes = append(notes, "environment variables differ: "+d)
		}
	}
	if ba, bb := buildName(a.ProfileRun), buildName(b.ProfileRun); ba != "" && bb != "" && ba != bb {
		notes = append(notes, fmt.Sprintf("profile-run builds differ: %s → %s (what profiling costs may differ with them)", ba, bb))
	}
	return job, notes
}

// maxVariableDiffs bounds the variables a note names.
const maxVariableDiffs = 8

// variableDiffs lists the variables whose values differ, by name, "(unset)"
// for one a run did not have: "NCCL_ALGO (unset) → Ring"; "" where none do.
func variableDiffs(a, b map[string]string) string {
	var names []string
	for n, v := range a {
		if w, ok := b[n]; !ok || w != v {
			names = append(names, n)
		}
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	value := func(m map[string]string, n string) string {
		if v, ok := m[n]; ok {
			return v
		}
		return "(unset)"
	}
	var d []string
	for _, n := range names[:min(len(names), maxVariableDiffs)] {
		d = append(d, fmt.Sprintf("%s %s → %s", n, value(a, n), value(b, n)))
	}
	if more := len(names) - maxVariableDiffs; more > 0 {
		d = append(d, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(d, ", ")
}

// buildName names a build of profile-run by its version and commit
// (with "+changes" where it had changes not committed); "" where the
// build did not say which it was.
func buildName(b jsonsummary.Build) string {
	if b.Revision == "" {
		if b.Version == "" || b.Version == "(devel)" || b.Version == "(unknown)" {
			return ""
		}
		return b.Version
	}
	n := b.Revision[:min(len(b.Revision), 12)]
	if b.Modified {
		n += "+changes"
	}
	return n
}

// asked is the steps the built-in trainer was asked for; 0 otherwise.
func asked(d jsonsummary.Document) int {
	if d.Trainer == nil {
		return 0
	}
	return d.Trainer.Steps
}

// stepCount is n steps, "1 step" for one.
func stepCount(n int) string {
	if n == 1 {
		return "1 step"
	}
	return fmt.Sprintf("%d steps", n)
}

// notes says what makes one run's figures less comparable.
func notes(side string, d jsonsummary.Document) []string {
	var n []string
	if d.Partial != "" {
		n = append(n, fmt.Sprintf("%s is %s", side, d.Partial))
	}
	if s := steps(d); s > 0 && s < fewSteps {
		n = append(n, fmt.Sprintf("%s counted %s: its median is a handful of steps' time (more steps, -steps, give a steadier figure)", side, stepCount(s)))
	}
	if d.Records.Dropped > 0 {
		n = append(n, fmt.Sprintf("%s dropped %d records: its ranges are undercounted", side, d.Records.Dropped))
	}
	if d.Records.Unfinished > 0 {
		n = append(n, fmt.Sprintf("%s has %d device ranges whose device work never finished (a device that hung): their device times are missing", side, d.Records.Unfinished))
	}
	if p := d.Pipeline; p != nil && len(p.Problems) > 0 {
		n = append(n, fmt.Sprintf("%s's pipeline analysis names %d problems (its report lists them): %s", side, len(p.Problems), p.Problems[0]))
	}
	return n
}

// steps is the most steps a rank counted.
func steps(d jsonsummary.Document) int {
	n := 0
	for _, s := range d.Steps {
		n = max(n, s.Steps)
	}
	return n
}

// figures are the run-wide figures of both runs; a note is added where a
// side's figures are totals, not per step.
func figures(a, b jsonsummary.Document, notes *[]string) []Figure {
	var fs []Figure
	add := func(name string, k Kind, of func(jsonsummary.Document) Value) {
		fs = append(fs, Figure{Name: name, Kind: k, Base: of(a), New: of(b)})
	}
	slowest := func(of func(jsonsummary.RankStep) *float64) func(jsonsummary.Document) Value {
		return func(d jsonsummary.Document) Value {
			v := Value{}
			for _, s := range d.Steps {
				if x := of(s); s.Steps > 0 && x != nil && (!v.Known || *x > v.V) {
					v = known(*x)
				}
			}
			return v
		}
	}
	add(gated, Seconds, slowest(func(s jsonsummary.RankStep) *float64 { return s.P50 }))
	add("step time mean, slowest rank", Seconds, slowest(func(s jsonsummary.RankStep) *float64 { return s.Mean }))
	add("step time p90, slowest rank", Seconds, slowest(func(s jsonsummary.RankStep) *float64 { return s.P90 }))
	// Only where a run looked for one (a wrapped command's summary).
	if a.CollectiveCycle != nil || b.CollectiveCycle != nil {
		add(cycled, Seconds, func(d jsonsummary.Document) Value {
			if c := d.CollectiveCycle; c != nil && c.Found && c.P50 != nil {
				return known(*c.P50)
			}
			return Value{}
		})
	}
	// Every cycle of the run, where they were timed: the slowest rank's.
	if a.CollectiveCycle != nil || b.CollectiveCycle != nil {
		runSlowest := func(of func(jsonsummary.CycleRun) float64) func(jsonsummary.Document) Value {
			return func(d jsonsummary.Document) Value {
				v := Value{}
				if c := d.CollectiveCycle; c != nil {
					for _, r := range c.Run {
						if x := of(r); r.Cycles > 0 && (!v.Known || x > v.V) {
							v = known(x)
						}
					}
				}
				return v
			}
		}
		add("cycles over the run p99, slowest rank", Seconds, runSlowest(func(r jsonsummary.CycleRun) float64 { return r.P99 }))
		add("longest cycle of the run", Seconds, runSlowest(func(r jsonsummary.CycleRun) float64 { return r.Max }))
	}
	// The GPU's busy share of that cycle, where kernels were traced.
	if a.CollectiveCycle != nil || b.CollectiveCycle != nil {
		add("busy in the collectives' cycle", Fraction, func(d jsonsummary.Document) Value {
			if c := d.CollectiveCycle; c != nil && c.Found && c.Busy != nil && c.P50 != nil && *c.P50 > 0 {
				return known(*c.Busy / *c.P50)
			}
			return Value{}
		})
	}
	add("busy, mean over ranks", Fraction, func(d jsonsummary.Document) Value {
		sum, n := 0.0, 0
		for _, s := range d.Steps {
			if s.Busy != nil {
				sum += *s.Busy
				n++
			}
		}
		if n == 0 {
			return Value{}
		}
		return known(sum / float64(n))
	})
	add("bubble, mean over stages", Fraction, func(d jsonsummary.Document) Value {
		if d.Pipeline == nil {
			return Value{}
		}
		sum, w := 0.0, 0
		for _, s := range d.Pipeline.Bubbles {
			if s.Fraction != nil && s.RankSteps > 0 {
				sum += *s.Fraction * float64(s.RankSteps)
				w += s.RankSteps
			}
		}
		if w == 0 {
			return Value{}
		}
		return known(sum / float64(w))
	})
	add("ideal bubble", Fraction, func(d jsonsummary.Document) Value {
		if d.Pipeline == nil || d.Pipeline.IdealBubble == nil {
			return Value{}
		}
		return known(*d.Pipeline.IdealBubble)
	})
	// A job without steps has totals over the run, not figures per step:
	// those are not set beside another run's.
	stepless := func(d jsonsummary.Document) bool { return d.Pipeline != nil && d.Pipeline.Stepless }
	perStep := !stepless(a) && !stepless(b)
	if stepless(a) && stepless(b) {
		perStep = true // both totals: comparable as such
		*notes = append(*notes, "neither run marked steps: waiting is a total over each run, not per step")
	} else if !perStep {
		*notes = append(*notes, "one run marked no steps: its waiting is a total over the run, not per step, and is not compared")
	}
	ranks := func(of func(jsonsummary.RankWait) *float64, mean bool) func(jsonsummary.Document) Value {
		return func(d jsonsummary.Document) Value {
			if d.Pipeline == nil || len(d.Pipeline.Ranks) == 0 || !perStep {
				return Value{}
			}
			sum := 0.0
			for _, r := range d.Pipeline.Ranks {
				x := of(r)
				if x == nil {
					return Value{} // not measured (a job without steps sums no communication)
				}
				sum += *x
			}
			if mean {
				sum /= float64(len(d.Pipeline.Ranks))
			}
			return known(sum)
		}
	}
	add("communication per step, mean over ranks", Seconds, ranks(func(r jsonsummary.RankWait) *float64 { return r.Comm }, true))
	add("waiting at collectives per step, all ranks", Seconds, ranks(func(r jsonsummary.RankWait) *float64 { return &r.Waited }, false))
	add("collective arrival skew p90", Seconds, func(d jsonsummary.Document) Value {
		if d.Pipeline == nil || d.Pipeline.Collectives.SkewP90 == nil {
			return Value{}
		}
		return known(*d.Pipeline.Collectives.SkewP90)
	})
	add("straggler", Rank, func(d jsonsummary.Document) Value {
		switch {
		case d.Pipeline == nil:
			return Value{}
		case d.Pipeline.Straggler == nil:
			return known(-1)
		}
		return known(float64(*d.Pipeline.Straggler))
	})
	add("slowest stage (stage balance)", Stage, func(d jsonsummary.Document) Value {
		if d.Pipeline == nil {
			return Value{}
		}
		// A summary written before stages' computation was measured has
		// no compute_s: unknown, not "none".
		measured := false
		for _, s := range d.Pipeline.Bubbles {
			measured = measured || s.Compute != nil
		}
		switch {
		case !measured:
			return Value{}
		case d.Pipeline.SlowestStage == nil:
			return known(-1)
		}
		return known(float64(*d.Pipeline.SlowestStage))
	})
	add("records dropped", Count, func(d jsonsummary.Document) Value { return known(float64(d.Records.Dropped)) })
	return fs
}

// ranges pairs the runs' ranges by tag and name and keeps those whose
// time per step changed most; per step is false where either run
// counted no steps (the times are then totals).
func ranges(a, b jsonsummary.Document) ([]RangeChange, bool) {
	sa, sb := steps(a), steps(b)
	perStep := sa > 0 && sb > 0
	if !perStep {
		sa, sb = 1, 1
	}
	type key struct{ tag, name string }
	byKey := map[key]*[2]jsonsummary.Range{}
	var order []key
	for side, d := range []jsonsummary.Document{a, b} {
		for _, r := range d.Ranges {
			k := key{r.Tag, r.Name}
			p := byKey[k]
			if p == nil {
				p = &[2]jsonsummary.Range{}
				byKey[k] = p
				order = append(order, k)
			}
			p[side].Count += r.Count
			p[side].Host += r.Host
			p[side].Device += r.Device
		}
	}
	var out []RangeChange
	for _, k := range order {
		p := byKey[k]
		dev := p[0].Device > 0 || p[1].Device > 0
		val := func(r jsonsummary.Range, n int) Value {
			switch {
			case r.Count == 0 || dev && r.Device == 0:
				return Value{}
			case dev:
				return known(r.Device / float64(n))
			}
			return known(r.Host / float64(n))
		}
		out = append(out, RangeChange{Tag: k.tag, Name: k.name, Device: dev, Base: val(p[0], sa), New: val(p[1], sb),
			Untimed: [2]bool{dev && p[0].Count > 0 && p[0].Device == 0, dev && p[1].Count > 0 && p[1].Device == 0}})
	}
	delta := func(r RangeChange) float64 {
		b, n := 0.0, 0.0
		if r.Base.Known {
			b = r.Base.V
		}
		if r.New.Known {
			n = r.New.V
		}
		return math.Abs(n - b)
	}
	// Ranges one run did not time on the device moved by how they were
	// measured, not by what they cost: after those that moved.
	untimed := func(r RangeChange) bool { return r.Untimed[0] || r.Untimed[1] }
	slices.SortStableFunc(out, func(x, y RangeChange) int {
		if ux, uy := untimed(x), untimed(y); ux != uy {
			if ux {
				return 1
			}
			return -1
		}
		dx, dy := delta(x), delta(y)
		switch {
		case dx > dy:
			return -1
		case dx < dy:
			return 1
		}
		return 0
	})
	return out[:min(len(out), maxRanges)], perStep
}

// Write writes the comparison as text: the runs, how they differ, the
// figures side by side and the ranges that moved most.
func (c Comparison) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "base  %s  (%s)\n", c.Base.Name, Job(c.Base.Doc))
	fmt.Fprintf(ew, "new   %s  (%s)\n", c.New.Name, Job(c.New.Doc))
	if len(c.JobDiffs) > 0 {
		fmt.Fprintf(ew, "the jobs differ: %s — figures that differ may not be a change of speed\n", strings.Join(c.JobDiffs, ", "))
	} else {
		fmt.Fprintln(ew, "the same job")
	}
	for _, n := range c.Notes {
		fmt.Fprintf(ew, "note: %s\n", n)
	}
	fmt.Fprintln(ew)
	rows := [][]string{{"figure", "base", "new", "change"}}
	var neither []string
	for _, f := range c.Figures {
		if !f.Base.Known && !f.New.Known {
			neither = append(neither, f.Name)
			continue
		}
		rows = append(rows, []string{f.Name, valueText(f.Kind, f.Base), valueText(f.Kind, f.New), f.Change()})
	}
	table(ew, rows, 1)
	if len(neither) > 0 {
		fmt.Fprintf(ew, "(measured by neither run: %s)\n", strings.Join(neither, "; "))
	}
	if len(c.Ranges) > 0 {
		per := "per step"
		if !c.PerStep {
			per = "over each run (a run counted no steps)"
		}
		fmt.Fprintf(ew, "\nranges whose time %s changed most (summed over ranks; device time where timed on the device):\n", per)
		rows := [][]string{{"tag", "name", "time", "base", "new", "change"}}
		for _, r := range c.Ranges {
			t := "host"
			if r.Device {
				t = "device"
			}
			f := Figure{Kind: Seconds, Base: r.Base, New: r.New}
			ch := f.Change()
			switch {
			case r.Untimed[0]:
				ch = "device-timed in new only"
			case r.Untimed[1]:
				ch = "device-timed in base only"
			case !r.Base.Known:
				ch = "new range"
			case !r.New.Known:
				ch = "gone"
			}
			rows = append(rows, []string{r.Tag, r.Name, t, valueText(Seconds, r.Base), valueText(Seconds, r.New), ch})
		}
		table(ew, rows, 3)
	}
	return ew.err
}

// table writes rows in columns two spaces apart, the first left columns
// aligned left and the others right (numbers).
func table(w io.Writer, rows [][]string, left int) {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < left {
				b.WriteString(c)
				if i < len(r)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// valueText is one side's figure as text; "—" where not measured.
func valueText(k Kind, v Value) string {
	if !v.Known {
		return "—"
	}
	switch k {
	case Fraction:
		return strconv.FormatFloat(v.V*100, 'f', 1, 64) + " %"
	case Count:
		return strconv.FormatFloat(v.V, 'f', 0, 64)
	case Rank, Stage:
		return labelText(k, v.V)
	}
	return seconds(v.V)
}

// seconds writes a time in s, ms or µs, three significant figures.
func seconds(s float64) string {
	a := math.Abs(s)
	switch {
	case a == 0:
		return "0"
	case a >= 1:
		return strconv.FormatFloat(s, 'f', sigDecimals(a), 64) + " s"
	case a >= 1e-3:
		return strconv.FormatFloat(s*1e3, 'f', sigDecimals(a*1e3), 64) + " ms"
	}
	return strconv.FormatFloat(s*1e6, 'f', sigDecimals(a*1e6), 64) + " µs"
}

// sigDecimals is the decimals that give a (≥ 1) three significant
// figures.
func sigDecimals(a float64) int {
	switch {
	case a >= 100:
		return 0
	case a >= 10:
		return 1
	}
	return 2
}

// labelText is "rank 3" or "stage 3" as k says, or "none".
func labelText(k Kind, v float64) string {
	switch {
	case v < 0:
		return "none"
	case k == Stage:
		return "stage " + strconv.Itoa(int(v))
	}
	return "rank " + strconv.Itoa(int(v))
}

// signed writes v with its sign (a true minus) and one decimal.
func signed(v float64, unit string) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', 1, 64)
	if s == "0.0" {
		return "±0.0" + unit
	}
	if v < 0 {
		return "−" + s + unit
	}
	return "+" + s + unit
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
