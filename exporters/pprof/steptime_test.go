package pprof_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// stepRecords is one step of two pipeline stages with known intervals
// (milliseconds), worked out by hand in TestStepTime.
func stepRecords() []profiler.Record {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	id := map[int]uint64{}
	add := func(r profiler.Record) {
		id[r.Rank]++
		r.ID = id[r.Rank]
		recs = append(recs, r)
	}
	step := func(rank, stage int) {
		add(profiler.Record{Name: profiler.StepName, Rank: rank, HostStart: 0, HostEnd: ms(100),
			Labels: profiler.Labels{Step: 0, Stage: int16(stage), Chunk: profiler.None, Microbatch: profiler.None}})
	}
	dev := func(rank, stage int, ph profiler.Phase, stream uint64, from, to float64) {
		add(profiler.Record{Name: ph.String(), Depth: 1, Kind: profiler.KindDevice, Rank: rank, Stream: stream,
			Labels:    profiler.Labels{Step: 0, Stage: int16(stage), Chunk: 0, Microbatch: 0, Phase: ph},
			HostStart: ms(from), HostEnd: ms(from), HasDevice: true, DeviceStart: ms(from), DeviceEnd: ms(to)})
	}
	p2p := func(rank, stage int, op string, grank, peer int, stream uint64, from, to float64) {
		add(profiler.Record{Name: op, Depth: 1, Kind: profiler.KindP2P, Rank: rank, Stream: stream,
			Labels:    profiler.Labels{Step: 0, Stage: int16(stage), Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Comm},
			HostStart: ms(from), HostEnd: ms(from), HasDevice: true, DeviceStart: ms(from), DeviceEnd: ms(to),
			Collective: profiler.Collective{Op: op, Group: "pp", GroupSize: 2, GroupRank: int32(grank), Peer: int32(peer), Root: -1}})
	}
	step(0, 0)
	dev(0, 0, profiler.Forward, 1, 10, 30)
	p2p(0, 0, "Send", 0, 1, 2, 30, 32)
	dev(0, 0, profiler.Backward, 1, 60, 80)
	p2p(0, 0, "Recv", 0, 1, 2, 58, 60)
	step(1, 1)
	p2p(1, 1, "Recv", 1, 0, 4, 20, 32)
	dev(1, 1, profiler.Forward, 3, 32, 52)
	dev(1, 1, profiler.Backward, 3, 52, 60)
	p2p(1, 1, "Send", 1, 0, 4, 58, 60)
	return recs
}

// TestStepTime: per rank, the step_time samples add up to the step's
// wall time and the bubble frame holds the bubble, both worked out by
// hand: the span of forward and backward work is [10,80). Rank 0 idles
// [0,10) and [80,100) (other), computes [10,30) and [60,80), sends
// [30,32), receives [58,60), and idles [32,58) in the bubble (26 ms).
// Rank 1 idles [0,10) and [80,100), sits in the bubble [10,20) and
// [60,80) (30 ms), receives [20,32), computes [32,60) — its send
// [58,60) runs while it computes, and computing holds the instant.
func TestStepTime(t *testing.T) {
	recs := stepRecords()
	agg := pprof.NewAggregate()
	agg.Consume(recs)
	steps := analysis.Analyze(recs)
	if len(steps) != 1 || !steps[0].Complete() {
		t.Fatalf("analysis: %+v", steps)
	}
	agg.AddStep(&steps[0])
	p, err := agg.Profile()
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultSampleType != pprof.StepTime {
		t.Errorf("default sample type %q, want %q", p.DefaultSampleType, pprof.StepTime)
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == pprof.StepTime {
			vi = i
		}
	}
	if vi < 0 {
		t.Fatalf("no %s sample type in %v", pprof.StepTime, p.SampleType)
	}
	total := map[int64]time.Duration{}
	frame := map[[2]any]time.Duration{}
	for _, s := range p.Sample {
		v := time.Duration(s.Value[vi])
		if v == 0 {
			continue
		}
		rank := s.NumLabel[pprof.LabelRank][0]
		total[rank] += v
		// Location[0] is the leaf; the last is the root.
		if root := s.Location[len(s.Location)-1].Line[0].Function.Name; root != profiler.StepName {
			t.Errorf("a step_time stack rooted at %q", root)
		}
		for _, loc := range s.Location {
			frame[[2]any{rank, loc.Line[0].Function.Name}] += v
		}
	}
	ms := time.Millisecond
	for rank, want := range map[int64]time.Duration{0: 100 * ms, 1: 100 * ms} {
		if total[rank] != want {
			t.Errorf("rank %d: step_time %v, want the step's %v", rank, total[rank], want)
		}
	}
	want := map[[2]any]time.Duration{
		{int64(0), "[idle: bubble]"}: 26 * ms,
		{int64(0), "[idle: other]"}:  30 * ms,
		{int64(0), "forward"}:        20 * ms,
		{int64(0), "backward"}:       20 * ms,
		{int64(0), "transfer"}:       4 * ms,
		{int64(1), "[idle: bubble]"}: 30 * ms,
		{int64(1), "[idle: other]"}:  30 * ms,
		{int64(1), "transfer"}:       12 * ms,
		{int64(1), "forward"}:        20 * ms,
		{int64(1), "backward"}:       8 * ms,
	}
	for k, w := range want {
		if frame[k] != w {
			t.Errorf("rank %v frame %q: %v, want %v", k[0], k[1], frame[k], w)
		}
	}
	// The other sample types are the range nesting's, as before.
	var ranges int64
	for _, s := range p.Sample {
		ranges += s.Value[2]
	}
	if ranges != int64(len(recs)) {
		t.Errorf("ranges %d, want one per record (%d)", ranges, len(recs))
	}
}

// TestStepTimeOfASimulatedSchedule builds one step from the schedule
// simulator's timeline of interleaved 1F1B (2 stages × 2 chunks × 4
// microbatches, forward 1 ms, backward 2 ms, communication free): per
// rank, step_time adds up to the makespan, its computation frames to the
// stage's busy time and its bubble frame to the stage's idle time, as the
// simulator computed them.
func TestStepTimeOfASimulatedSchedule(t *testing.T) {
	s, err := schedule.Interleaved1F1B(2, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := schedule.Simulate(s, schedule.UniformCost(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	for stage, spans := range tl.Spans {
		id := uint64(0)
		next := func() uint64 { id++; return id }
		recs = append(recs, profiler.Record{ID: next(), Name: profiler.StepName, Rank: stage, HostStart: 0, HostEnd: ms(tl.Makespan),
			Labels: profiler.Labels{Step: 0, Stage: int16(stage), Chunk: profiler.None, Microbatch: profiler.None}})
		for _, sp := range spans {
			ph := profiler.Forward
			if sp.Action.Kind == schedule.Backward {
				ph = profiler.Backward
			}
			recs = append(recs, profiler.Record{ID: next(), Name: ph.String(), Depth: 1, Kind: profiler.KindDevice, Rank: stage, Stream: 1,
				Labels:    profiler.Labels{Step: 0, Stage: int16(stage), Chunk: int16(sp.Action.Chunk), Microbatch: int32(sp.Action.Microbatch), Phase: ph},
				HostStart: ms(sp.Start), HostEnd: ms(sp.Start), HasDevice: true, DeviceStart: ms(sp.Start), DeviceEnd: ms(sp.End)})
		}
	}
	steps := analysis.Analyze(recs)
	if len(steps) != 1 {
		t.Fatalf("%d steps", len(steps))
	}
	agg := pprof.NewAggregate()
	agg.Consume(recs)
	agg.AddStep(&steps[0])
	agg.AddStep(nil) // no step: adds nothing, and does not panic
	p, err := agg.Profile()
	if err != nil {
		t.Fatal(err)
	}
	vi := len(p.SampleType) - 1
	if p.SampleType[vi].Type != pprof.StepTime {
		t.Fatalf("sample types %v", p.SampleType)
	}
	total, compute, bubble, other := map[int64]time.Duration{}, map[int64]time.Duration{}, map[int64]time.Duration{}, map[int64]time.Duration{}
	for _, smp := range p.Sample {
		v := time.Duration(smp.Value[vi])
		if v == 0 {
			continue // a range's sample: no step_time
		}
		rank := smp.NumLabel[pprof.LabelRank][0]
		total[rank] += v
		if len(smp.Location) < 2 {
			t.Fatalf("a step_time sample with no frame under step: %v", smp)
		}
		switch smp.Location[len(smp.Location)-2].Line[0].Function.Name { // the frame under step
		case "forward", "backward":
			compute[rank] += v
		case "[idle: bubble]":
			bubble[rank] += v
		case "[idle: other]":
			other[rank] += v
		}
	}
	near := func(a, b time.Duration) bool { return (a - b).Abs() <= time.Microsecond }
	for stage := range tl.Spans {
		r := int64(stage)
		if !near(total[r], ms(tl.Makespan)) || !near(compute[r], ms(tl.Busy[stage])) || !near(bubble[r], ms(tl.Idle[stage])) || other[r] != 0 {
			t.Errorf("rank %d: step_time %v, computing %v, bubble %v, other %v; simulator: makespan %v, busy %v, idle %v",
				r, total[r], compute[r], bubble[r], other[r], ms(tl.Makespan), ms(tl.Busy[stage]), ms(tl.Idle[stage]))
		}
	}
}

// Write to a nil writer is an error, not a panic.
func TestAggregateWriteNilWriter(t *testing.T) {
	if _, err := pprof.NewAggregate().Write(nil); err == nil || err.Error() != "pprof: Write: nil writer" {
		t.Fatalf("Write(nil) = %v, want the nil writer named", err)
	}
}
