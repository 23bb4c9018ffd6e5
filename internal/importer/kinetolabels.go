package importer

import (
	"cmp"
	"encoding/json"
	"slices"

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
	ranks      []int64
}

// processGroups reads distributedInfo.pg_config, as PyTorch writes it
// (pg_name, pg_desc, ranks). What it cannot read is left out with a
// warning: the groups only stage the ranks.
func processGroups(p *Profile, raw json.RawMessage) []processGroup {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var cfg []struct {
		Name  flexString      `json:"pg_name"`
		Desc  flexString      `json:"pg_desc"`
		Ranks json.RawMessage `json:"ranks"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		p.warnf("%s: distributedInfo.pg_config not read (%v): no rank is staged by its process groups", p.Path, err)
		return nil
	}
	var out []processGroup
	for _, c := range cfg {
		g := processGroup{name: string(c.Name), desc: string(c.Desc)}
		if json.Unmarshal(c.Ranks, &g.ranks) != nil {
			continue
		}
		out = append(out, g)
	}
	return out
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
			if i := slices.Index(g.ranks, int64(rank)); i >= 0 && len(g.ranks) > size {
				stage, size = int32(i), len(g.ranks)
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
