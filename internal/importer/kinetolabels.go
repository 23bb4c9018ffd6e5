package importer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/trainscope/trainscope/internal/naming"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// span is an interval of a Kineto trace's clock, and the step it is of.
type span struct {
	start, end int64
	step       int32
}

// workRange is a host range named as forward or backward work.
type workRange struct {
	span
	thread string
	work   naming.Work
}

// pendingRecord is a record the labeller may give a step or labels.
type pendingRecord struct {
	rec  int // index in the records
	work int // its thread's innermost work range (index in works); −1: none
}

// labeller gives a trace's records what their own thread's nesting does
// not: the step of a record on a thread with no step range (PyTorch's
// autograd thread, which launches the backward kernels while the main
// thread waits inside its step), and the labels of a kernel launched
// inside a range named as forward or backward work, on its own thread or,
// failing that, on another of the process's threads at the launch (the
// main thread waiting inside "PP:1B3" while the autograd thread launches
// its kernels).
type labeller struct {
	steps   []span
	works   []workRange
	pending []pendingRecord
}

// add notes out[i], on its thread inside work range work (−1: none), if
// it may need a step or labels.
func (l *labeller) add(out []profiler.Record, i int, work int) {
	if out[i].Step == profiler.None || out[i].Kind == profiler.KindKernel {
		l.pending = append(l.pending, pendingRecord{i, work})
	}
}

// label gives the pending records their steps and labels. It returns the
// first stage the trace's torch.distributed.pipelining actions name,
// profiler.None where none does.
func (l *labeller) label(p *Profile, out []profiler.Record) int32 {
	slices.SortFunc(l.steps, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	// A multi-stage schedule's actions name virtual stages: the chunk is
	// a stage's place among those the rank holds.
	var stages []int32
	for _, w := range l.works {
		if w.work.Stage != profiler.None && !slices.Contains(stages, w.work.Stage) {
			stages = append(stages, w.work.Stage)
		}
	}
	slices.Sort(stages)
	// Kernels with no work range on their own thread, in launch order,
	// against the process's work ranges in start order: those open at
	// the launch are a stack whose top is the innermost.
	byStart := make([]int, len(l.works))
	for i := range byStart {
		byStart[i] = i
	}
	slices.SortStableFunc(byStart, func(a, b int) int { return cmp.Compare(l.works[a].start, l.works[b].start) })
	var orphans []int // indices into pending
	for k, pr := range l.pending {
		r := &out[pr.rec]
		if r.Step == profiler.None {
			r.Step = l.stepAt(int64(r.HostStart))
		}
		if r.Kind == profiler.KindKernel && pr.work < 0 && len(l.works) > 0 {
			orphans = append(orphans, k)
		}
	}
	slices.SortStableFunc(orphans, func(a, b int) int {
		return cmp.Compare(out[l.pending[a].rec].HostStart, out[l.pending[b].rec].HostStart)
	})
	var open []int
	next := 0
	for _, k := range orphans {
		t := int64(out[l.pending[k].rec].HostStart)
		for next < len(byStart) && l.works[byStart[next]].start <= t {
			open = append(open, byStart[next])
			next++
		}
		// A range ended before t has ended for every later launch too.
		for len(open) > 0 && l.works[open[len(open)-1]].end < t {
			open = open[:len(open)-1]
		}
		if len(open) > 0 {
			l.pending[k].work = open[len(open)-1]
		}
	}
	labelled := 0
	for _, pr := range l.pending {
		r := &out[pr.rec]
		if r.Kind != profiler.KindKernel || pr.work < 0 {
			continue
		}
		w := l.works[pr.work].work
		r.Phase, r.Microbatch, r.Chunk = w.Phase, w.Microbatch, 0
		switch {
		case w.Stage != profiler.None:
			r.Chunk = int16(slices.Index(stages, w.Stage))
		case w.Chunk != profiler.None:
			r.Chunk = int16(w.Chunk)
		}
		labelled++
	}
	p.KernelsLabelled = labelled
	stepsOnDevice(out)
	if len(stages) > 0 {
		return stages[0]
	}
	return profiler.None
}

// stepsOnDevice puts the step ranges on the device most of the trace's
// GPU activities ran on (a rank's device): busy time is accounted per
// device, rank and step, over the step range's interval, as for a
// wrapped process's step ranges.
func stepsOnDevice(out []profiler.Record) {
	count := map[runtime.Device]int{}
	var dev runtime.Device
	for i := range out {
		if r := &out[i]; r.HasDevice {
			count[r.Device]++
			if n := count[r.Device]; n > count[dev] || n == count[dev] && r.Device.Index < dev.Index {
				dev = r.Device
			}
		}
	}
	if len(count) == 0 {
		return
	}
	for i := range out {
		if r := &out[i]; r.Depth == 0 && r.Name == profiler.StepName {
			r.Device = dev
		}
	}
}

// stepAt is the step whose range holds t, profiler.None where none does.
func (l *labeller) stepAt(t int64) int32 {
	i, _ := slices.BinarySearchFunc(l.steps, t, func(s span, t int64) int {
		if s.start <= t {
			return -1
		}
		return 1
	})
	// l.steps[i-1] is the last to start at or before t.
	if i > 0 && t <= l.steps[i-1].end {
		return l.steps[i-1].step
	}
	return profiler.None
}

// processGroup is one of distributedInfo.pg_config's process groups.
type processGroup struct {
	name, desc string
	// list holds the group's ranks as a "Process Group Ranks" value,
	// "[3, 5]", shortened past the first ranks ("[0, 1, 2, ..., 15]")
	// where PyTorch wrote it so; size is pg_size, or the list's length.
	list string
	size int32
}

// index is rank's place in the group, −1 where the list does not hold it.
func (g *processGroup) index(rank int) int32 { return listIndex(g.list, g.size, int64(rank)) }

// shortened reports whether the list leaves some of the group's ranks out.
func (g *processGroup) shortened() bool { return strings.Contains(g.list, "...") }

// label names the group in a warning: its name and description.
func (g *processGroup) label() string {
	if g.desc == "" || g.desc == g.name {
		return strconv.Quote(g.name)
	}
	return fmt.Sprintf("%q (%s)", g.name, g.desc)
}

// processGroups reads distributedInfo.pg_config, as PyTorch writes it
// (pg_name, pg_desc, pg_size, ranks: a list, or the string the
// collectives' "Process Group Ranks" hold). A group whose ranks it cannot
// read is left out with a warning naming it; a pg_config it cannot read
// at all, with one warning.
func processGroups(p *Profile, raw json.RawMessage) []processGroup {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var cfg []struct {
		Name  flexString      `json:"pg_name"`
		Desc  flexString      `json:"pg_desc"`
		Size  flexInt         `json:"pg_size"`
		Ranks json.RawMessage `json:"ranks"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		p.warnf("%s: distributedInfo.pg_config not read (%v): no rank is staged by its process groups", p.Path, err)
		return nil
	}
	var out []processGroup
	for _, c := range cfg {
		g := processGroup{name: string(c.Name), desc: string(c.Desc)}
		var ranks []int64
		var text string
		switch {
		case json.Unmarshal(c.Ranks, &ranks) == nil && ranks != nil:
			parts := make([]string, len(ranks))
			for i, r := range ranks {
				parts[i] = strconv.FormatInt(r, 10)
			}
			g.list, g.size = "["+strings.Join(parts, ", ")+"]", int32(min(len(ranks), math.MaxInt32))
		case json.Unmarshal(c.Ranks, &text) == nil && rankList(text):
			g.list = text
			if !g.shortened() {
				g.size = int32(min(strings.Count(text, ",")+1, math.MaxInt32))
			}
		default:
			p.warnf("%s: distributedInfo.pg_config: process group %s: its ranks %s are not a list of ranks: it stages no rank", p.Path, g.label(), excerpt(strings.Join(strings.Fields(string(c.Ranks)), " "), 60))
			continue
		}
		if c.Size.Set && c.Size.V > 0 && c.Size.V <= math.MaxInt32 {
			g.size = int32(c.Size.V)
		}
		out = append(out, g)
	}
	return out
}

// excerpt is s cut to at most n bytes at a rune boundary, with "…" where
// it was cut, for a warning that quotes input.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// rankList reports whether s reads as a list of ranks, "[0, 1]", perhaps
// shortened with "...".
func rankList(s string) bool {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return false
	}
	for f := range strings.SplitSeq(s[1:len(s)-1], ",") {
		if f = strings.TrimSpace(f); f == "..." {
			continue
		}
		if _, err := strconv.ParseInt(f, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// stageRecords gives every record of the trace its rank's pipeline
// stage: the rank's place in the largest process group whose description
// or name says it joins a pipeline's stages (naming.PipelineGroup:
// Megatron-LM's PIPELINE_MODEL_PARALLEL_GROUP, a device mesh's "pp"),
// where the trace says its rank; else the first stage the rank's
// torch.distributed.pipelining actions name (a multi-stage schedule's
// rank holds stages s, s+p, … or s and 2p−1−s: s is its stage).
func stageRecords(p *Profile, groups []processGroup, rank int, rankKnown bool, actionStage int32) {
	stage, size := int32(profiler.None), 0
	if rankKnown {
		for _, g := range groups {
			if !naming.PipelineGroup(g.desc) && !naming.PipelineGroup(g.name) {
				continue
			}
			i := g.index(rank)
			if i < 0 && g.shortened() {
				of := "its ranks"
				if g.size > 0 {
					of = fmt.Sprintf("its %d ranks", g.size)
				}
				p.warnf("%s: process group %s lists only some of %s (%s): rank %d's place in it is not known", p.Path, g.label(), of, g.list, rank)
			}
			if i >= 0 && int(g.size) > size {
				stage, size = i, int(g.size)
			}
		}
	}
	p.StagedBy = ""
	switch {
	case size > 0:
		p.StagedBy = "process group"
	case actionStage != profiler.None:
		stage, p.StagedBy = actionStage, "pipelining actions"
	default:
		return
	}
	for i := range p.Records {
		p.Records[i].Stage = int16(stage)
	}
}
