package prom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// Two stages, one microbatch: each computes 10 ms of a 20 ms span (a
// bubble of 10 ms, half the span, as the ideal (2−1)/(1+2−1)); rank 1
// arrives 5 ms after rank 0 at their all-reduce.
func TestAnalysisCollector(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var recs []profiler.Record
	for rank := range 2 {
		l := profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None}
		recs = append(recs, profiler.Record{ID: 1, Name: profiler.StepName, Rank: rank, Labels: l, HostEnd: ms(100)})
		l.Chunk, l.Microbatch, l.Phase = 0, 0, profiler.Forward
		recs = append(recs, profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: rank,
			Stream: uint64(1 + 2*rank), Labels: l, HasDevice: true, DeviceStart: ms(10 + 10*rank), DeviceEnd: ms(20 + 10*rank)})
		l.Phase = profiler.Comm
		recs = append(recs, profiler.Record{ID: 3, Parent: 1, Depth: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank,
			Stream: uint64(2 + 2*rank), Labels: l, HasDevice: true, DeviceStart: ms(30 + 5*rank), DeviceEnd: ms(40),
			Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 2, GroupRank: int32(rank), Peer: -1, Root: -1}})
	}
	s := analysis.NewSink()
	s.Consume(recs)
	s.Flush()
	c := prom.NewAnalysisCollector(s)
	want := `
# HELP trainscope_pipeline_bubble_fraction The stage's bubble over the steps' spans.
# TYPE trainscope_pipeline_bubble_fraction gauge
trainscope_pipeline_bubble_fraction{stage="0"} 0.5
trainscope_pipeline_bubble_fraction{stage="1"} 0.5
# HELP trainscope_pipeline_bubble_ideal_fraction The ideal bubble (p−1)/(v·m+p−1) of the pipeline shape the steps' labels show.
# TYPE trainscope_pipeline_bubble_ideal_fraction gauge
trainscope_pipeline_bubble_ideal_fraction 0.5
# HELP trainscope_pipeline_bubble_seconds Mean pipeline bubble per step of the stage's ranks: time within the step's span (first to last forward/backward on any rank) doing no forward or backward computation.
# TYPE trainscope_pipeline_bubble_seconds gauge
trainscope_pipeline_bubble_seconds{stage="0"} 0.01
trainscope_pipeline_bubble_seconds{stage="1"} 0.01
# HELP trainscope_pipeline_overlap_ratio Share of the rank's communication time during which it was busy computing.
# TYPE trainscope_pipeline_overlap_ratio gauge
trainscope_pipeline_overlap_ratio{rank="0"} 0
trainscope_pipeline_overlap_ratio{rank="1"} 0
# HELP trainscope_pipeline_steps_total Steps analysed, by whether their records were complete (only complete steps count in the other pipeline metrics).
# TYPE trainscope_pipeline_steps_total counter
trainscope_pipeline_steps_total{complete="false"} 0
trainscope_pipeline_steps_total{complete="true"} 1
# HELP trainscope_pipeline_straggler_score Share of all ranks' waiting at collectives that the rank caused, by arriving last or by holding up the rank that did.
# TYPE trainscope_pipeline_straggler_score gauge
trainscope_pipeline_straggler_score{rank="0"} 0
trainscope_pipeline_straggler_score{rank="1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"trainscope_pipeline_bubble_fraction", "trainscope_pipeline_bubble_ideal_fraction", "trainscope_pipeline_bubble_seconds",
		"trainscope_pipeline_overlap_ratio", "trainscope_pipeline_steps_total", "trainscope_pipeline_straggler_score"); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "trainscope_collective_skew_seconds" {
			continue
		}
		sm := mf.GetMetric()[0].GetSummary()
		if sm.GetSampleCount() != 1 || sm.GetSampleSum() != 0.005 {
			t.Errorf("skew: count %d, sum %v; want 1 and 0.005", sm.GetSampleCount(), sm.GetSampleSum())
		}
		for _, q := range sm.GetQuantile() {
			if v := q.GetValue(); v < 0.005*0.99 || v > 0.005*1.01 {
				t.Errorf("skew quantile %v = %v, want 0.005 within 1%%", q.GetQuantile(), v)
			}
		}
		return
	}
	t.Error("no trainscope_collective_skew_seconds")
}

// A wrapped run's collectives, without steps: rank 2 arrives 4 ms after
// the others at each of 3 all-reduces; no step metrics, the straggler
// scores and the skew.
func TestAnalysisCollectorWithoutSteps(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var recs []profiler.Record
	for k := range 3 {
		for rank := range 3 {
			arrive := 0
			if rank == 2 {
				arrive = 4
			}
			recs = append(recs, profiler.Record{ID: uint64(k + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank, Labels: profiler.NoLabels,
				HasDevice: true, DeviceStart: ms(10*k + arrive), DeviceEnd: ms(10*k + 6),
				Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 3, GroupRank: int32(rank), Peer: -1, Root: -1, Seq: uint64(k)}})
		}
	}
	s := analysis.NewCallSink()
	s.Consume(recs)
	c := prom.NewAnalysisCollector(s)
	want := `
# HELP trainscope_pipeline_straggler_score Share of all ranks' waiting at collectives that the rank caused, by arriving last or by holding up the rank that did.
# TYPE trainscope_pipeline_straggler_score gauge
trainscope_pipeline_straggler_score{rank="0"} 0
trainscope_pipeline_straggler_score{rank="1"} 0
trainscope_pipeline_straggler_score{rank="2"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"trainscope_pipeline_steps_total", "trainscope_pipeline_bubble_fraction", "trainscope_pipeline_straggler_score"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "trainscope_collective_skew_seconds"); n != 1 {
		t.Errorf("%d skew series, want 1", n)
	}
}

// Without compute timed on the device (a wrapped job's steps whose
// kernels were not traced) a rank's overlap of computation with its
// transfers is unknown, not 0: no overlap series, as the report shows
// "-"; the straggler score, from transfers alone, is there.
func TestAnalysisCollectorOverlapUnknownWithoutCompute(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	var recs []profiler.Record
	for rank := range 2 {
		l := profiler.Labels{Step: 0, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None}
		recs = append(recs, profiler.Record{ID: 1, Name: profiler.StepName, Rank: rank, Labels: l, HostEnd: ms(100)})
		recs = append(recs, profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank,
			Stream: 2, Labels: l, HasDevice: true, DeviceStart: ms(30 + 5*rank), DeviceEnd: ms(40),
			Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 2, GroupRank: int32(rank), Peer: -1, Root: -1}})
	}
	s := analysis.NewSink()
	s.Consume(recs)
	s.Flush()
	if sum := s.Summary(); len(sum.Ranks) != 2 || sum.Ranks[0].Comm <= 0 || sum.Ranks[0].Computed {
		t.Fatalf("the test needs ranks with transfers and no compute: %+v", sum.Ranks)
	}
	c := prom.NewAnalysisCollector(s)
	if n := testutil.CollectAndCount(c, "trainscope_pipeline_overlap_ratio"); n != 0 {
		t.Errorf("%d overlap series for ranks with no compute timed, want none", n)
	}
	if n := testutil.CollectAndCount(c, "trainscope_pipeline_straggler_score"); n != 2 {
		t.Errorf("%d straggler score series, want 2", n)
	}
}
