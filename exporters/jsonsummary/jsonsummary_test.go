package jsonsummary_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// TestDocument: figures worked by hand from a small input come out in
// seconds and fractions; what was not measured (a busy share without
// device-timed compute, an overlap likewise, the ideal bubble without a
// pipeline shape, a straggler where none stands out, a stage on work of
// none) is null, not 0; ranges are summed over ranks per tag.
func TestDocument(t *testing.T) {
	ms := time.Millisecond
	step := func(rank, stage int, computed bool) profiler.StepStats {
		return profiler.StepStats{
			RankSteps: profiler.RankSteps{Rank: rank, Stage: stage, Steps: 4, Wall: 40 * ms, Busy: 10 * ms, Computed: computed, CutShort: 1},
			Min:       8 * ms, Max: 13 * ms, P50: 9 * ms, P90: 12 * ms, P99: 13 * ms,
		}
	}
	in := jsonsummary.Input{
		RunID:   "run-1",
		Partial: "partial run: interrupted by SIGINT at step 5",
		Command: []string{"-pp", "4", "-steps", "5"},
		Trainer: &jsonsummary.Trainer{Placement: "4 ranks on 4 cpu devices", Stages: 4, Chunks: 2, Replicas: 1, Precision: "bf16", Steps: 5},
		Stats:   profiler.Stats{Collected: 100, Dropped: 2, Overflow: 3, EventDrops: 4, Errors: 5, Abandoned: 6},
		Steps:   []profiler.StepStats{step(0, 0, true), step(1, profiler.None, false)},
		Groups: []profiler.Group{
			{Rank: 0, Tag: "all steps", Names: []profiler.NameStats{{Name: "forward", Count: 2, HostTotal: 1 * ms, DeviceTotal: 4 * ms}}},
			{Rank: 1, Tag: "all steps", Names: []profiler.NameStats{{Name: "forward", Count: 3, HostTotal: 2 * ms, DeviceTotal: 5 * ms}}},
		},
		Pipeline: &analysis.Summary{
			Steps: 5, Complete: 4, Straggler: profiler.None,
			Pipeline: analysis.Pipeline{Ideal: math.NaN()},
			Stages: []analysis.StageTotals{
				{Stage: 0, RankSteps: 4, Bubble: 20 * ms, Span: 80 * ms, Drain: 4 * ms, Chunks: []time.Duration{8 * ms, 8 * ms}},
				{Stage: 1, RankSteps: 1}, // no span: no fraction
			},
			Ranks: []analysis.RankTotals{
				{Rank: 0, Stage: 0, Steps: 4, Calls: 6, Comm: 8 * ms, Overlap: 2 * ms, Waited: 4 * ms, Caused: 12 * ms, Score: 0.75, Computed: true},
				{Rank: 1, Stage: profiler.None, Steps: 4, Comm: 8 * ms, Computed: false},
			},
			Collectives: analysis.CollectiveTotals{Matched: 7, Transfers: 9, P50Skew: 1 * ms, P90Skew: 2 * ms, P99Skew: 3 * ms, MaxSkew: 4 * ms},
			Problems:    []string{"step 4: rank 1 cut short"},
		},
	}
	var b bytes.Buffer
	if err := jsonsummary.Write(&b, in); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	for _, c := range []struct {
		path string
		want any
	}{
		{"schema", "trainscope.summary/v1"},
		{"run_id", "run-1"},
		{"partial", "partial run: interrupted by SIGINT at step 5"},
		{"command.1", "4"},
		{"trainer.placement", "4 ranks on 4 cpu devices"},
		{"trainer.pp", 4.0},
		{"trainer.vpp", 2.0},
		{"trainer.precision", "bf16"},
		{"records.collected", 100.0},
		{"records.dropped", 5.0},
		{"records.host_only", 4.0},
		{"records.backend_errors", 5.0},
		{"records.device_unfinished", 6.0},
		{"steps.0.mean_s", 0.010},
		{"steps.0.p50_s", 0.009},
		{"steps.0.p99_s", 0.013},
		{"steps.0.busy_fraction", 0.25},
		{"steps.0.cut_short_steps", 1.0},
		{"steps.1.stage", nil},
		{"steps.1.busy_fraction", nil},
		{"pipeline.stepless", false},
		{"pipeline.steps", 5.0},
		{"pipeline.ranks.0.collectives", 6.0},
		{"pipeline.complete_steps", 4.0},
		{"pipeline.ideal_bubble_fraction", nil},
		{"pipeline.straggler", nil},
		{"pipeline.bubbles.0.bubble_s", 0.005},
		{"pipeline.bubbles.0.bubble_fraction", 0.25},
		{"pipeline.bubbles.0.chunk_bubble_s.1", 0.002},
		{"pipeline.bubbles.0.drain_s", 0.001},
		{"pipeline.bubbles.1.bubble_fraction", nil},
		{"pipeline.bubbles.0.compute_s", 0.015}, // (80 − 20) ms over 4 rank-steps
		{"pipeline.bubbles.1.compute_s", nil},
		{"pipeline.slowest_stage", nil}, // one stage computed: nothing to compare

		{"pipeline.ranks.0.comm_s", 0.002},
		{"pipeline.ranks.0.overlap_fraction", 0.25},
		{"pipeline.ranks.0.waited_s", 0.001},
		{"pipeline.ranks.0.caused_s", 0.003},
		{"pipeline.ranks.0.straggler_score", 0.75},
		{"pipeline.ranks.1.overlap_fraction", nil},
		{"pipeline.ranks.1.stage", nil},
		{"pipeline.collectives.matched", 7.0},
		{"pipeline.collectives.p2p_matched", 9.0},
		{"pipeline.collectives.skew_p90_s", 0.002},
		{"pipeline.collectives.skew_max_s", 0.004},
		{"pipeline.problems.0", "step 4: rank 1 cut short"},
		{"ranges.0.tag", "all steps"},
		{"ranges.0.name", "forward"},
		{"ranges.0.count", 5.0},
		{"ranges.0.host_s", 0.003},
		{"ranges.0.device_s", 0.009},
	} {
		got, ok := lookup(doc, c.path)
		if !ok {
			t.Errorf("%s: missing\n%s", c.path, b.String())
			continue
		}
		if g, isNum := got.(float64); isNum {
			if w, _ := c.want.(float64); math.Abs(g-w) > 1e-12 {
				t.Errorf("%s = %v, want %v", c.path, got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s = %v, want %v", c.path, got, c.want)
		}
	}
	if n, _ := lookup(doc, "ranges"); len(n.([]any)) != 1 {
		t.Errorf("ranges %v: want forward once, summed over both ranks", n)
	}
}

// TestUnmeasuredIsNull: a rank that ended no step (a run interrupted in
// its first) has no step times, a run whose collectives none matched
// has no skew, and a job without steps (a CallSink's summary) has its
// waiting but no communication time per rank, nor an overlap of it:
// each null, not 0.
func TestUnmeasuredIsNull(t *testing.T) {
	ms := time.Millisecond
	in := jsonsummary.Input{
		Steps: []profiler.StepStats{{RankSteps: profiler.RankSteps{Rank: 0, Stage: profiler.None, CutShort: 1}}},
		Pipeline: &analysis.Summary{Stepless: true, Straggler: profiler.None, Pipeline: analysis.Pipeline{Ideal: math.NaN()},
			Ranks: []analysis.RankTotals{{Rank: 0, Stage: profiler.None, Calls: 3, Comm: 5 * ms, Overlap: 1 * ms, Waited: 2 * ms, Computed: true}}},
	}
	var b bytes.Buffer
	if err := jsonsummary.Write(&b, in); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"steps.0.mean_s", "steps.0.min_s", "steps.0.p50_s", "steps.0.p90_s", "steps.0.p99_s", "steps.0.max_s",
		"pipeline.collectives.skew_p50_s", "pipeline.collectives.skew_p90_s", "pipeline.collectives.skew_p99_s", "pipeline.collectives.skew_max_s",
		"pipeline.ranks.0.comm_s", "pipeline.ranks.0.overlap_fraction"} {
		if v, ok := lookup(doc, path); !ok || v != nil {
			t.Errorf("%s = %v (present %v); want null\n%s", path, v, ok, b.String())
		}
	}
	for path, want := range map[string]float64{"steps.0.cut_short_steps": 1, "pipeline.ranks.0.waited_s": 0.002, "pipeline.ranks.0.collectives": 3} {
		if v, ok := lookup(doc, path); !ok || v != want {
			t.Errorf("%s = %v; want %v", path, v, want)
		}
	}
}

// TestEmpty: a run with nothing summed still makes a document whose
// lists are empty arrays, not null, and no pipeline.
func TestEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := jsonsummary.Write(&b, jsonsummary.Input{}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"steps", "ranges", "command"} {
		if l, ok := doc[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %v, want []", k, doc[k])
		}
	}
	for _, k := range []string{"pipeline", "partial", "run_id", "trainer"} {
		if _, ok := doc[k]; ok {
			t.Errorf("%s present without one: %s", k, b.String())
		}
	}
}

// lookup follows a dotted path of keys and indices through doc.
func lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, k := range strings.Split(path, ".") {
		switch v := cur.(type) {
		case map[string]any:
			x, ok := v[k]
			if !ok {
				return nil, false
			}
			cur = x
		case []any:
			i := 0
			for _, c := range k {
				if c < '0' || c > '9' {
					return nil, false
				}
				i = 10*i + int(c-'0')
			}
			if i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// An environment in a line: the devices, the libraries with versions, the
// host and the build, each where known.
func TestEnvironmentText(t *testing.T) {
	gpu := func(i int, name string) jsonsummary.Device {
		return jsonsummary.Device{Index: i, Name: name, MemoryBytes: 85 << 30}
	}
	e := jsonsummary.Environment{
		ProfileRun: jsonsummary.Build{Version: "v0.0.0-20261206091222-dd0de816b417", Revision: "dd0de816b417aaaa", Go: "go1.26.8"},
		Host:       &jsonsummary.Host{Name: "node7", CPUs: 16, CPUModel: "Intel(R) Xeon(R) Processor"},
		Backend:    "cuda",
		Devices:    []jsonsummary.Device{gpu(0, "NVIDIA H100 80GB HBM3"), gpu(1, "NVIDIA H100 80GB HBM3"), gpu(2, "NVIDIA H200")},
		Libraries:  []jsonsummary.Library{{Name: "CUDA runtime", Version: "13.0"}, {Name: "NVIDIA driver", Version: "580.159.04"}, {Name: "cuBLAS", Version: ""}},
	}
	want := "2 × NVIDIA H100 80GB HBM3 + 1 × NVIDIA H200; CUDA runtime 13.0, NVIDIA driver 580.159.04; host node7; profile-run v0.0.0-20261206091222-dd0de816b417"
	if got := e.Text(); got != want {
		t.Errorf("Text = %q\nwant %q", got, want)
	}
	// A build whose version does not carry its commit names it; the host
	// backend's devices are the host's processor.
	e.ProfileRun.Version = "(devel)"
	e.Backend, e.Devices, e.Libraries = "cpu", []jsonsummary.Device{{Index: 0, MemoryBytes: 1 << 30, HostMemory: true}}, nil
	if got, want := e.Text(), "Intel(R) Xeon(R) Processor (16 CPUs); host node7; profile-run (devel) (dd0de816b417)"; got != want {
		t.Errorf("Text = %q\nwant %q", got, want)
	}
	// An import's: the build alone.
	if got := (&jsonsummary.Environment{ProfileRun: jsonsummary.Build{Version: "(devel)"}}).Text(); got != "profile-run (devel)" {
		t.Errorf("an import's Text = %q", got)
	}
}

// TestCollectiveCycle: a rank issuing an all-reduce of 1 MiB and a
// broadcast of 4 KiB every 20 ms, 10 times, and a rank issuing five
// operations: collective_cycle holds the first's cycle (two operations,
// 1 MiB + 4 KiB, 20 ms), one of two ranks agreeing; with the first rank
// alone removed, why none was found, the times null; with its operations
// timed on the device and a kernel a cycle, their device time and the
// GPU's busy time.
func TestCollectiveCycle(t *testing.T) {
	rec := func(rank int, at time.Duration, op string, bytes int64) profiler.Record {
		return profiler.Record{Name: op, Kind: profiler.KindCollective, Rank: rank, HostStart: at,
			Collective: profiler.Collective{Op: op, Bytes: bytes, Peer: -1, Root: -1, Group: "dp"}}
	}
	var steady, few []profiler.Record
	for i := range 10 {
		at := time.Duration(i) * 20 * time.Millisecond
		steady = append(steady, rec(0, at, "AllReduce", 1<<20), rec(0, at+5*time.Millisecond, "Broadcast", 4096))
	}
	for i := range 5 {
		few = append(few, rec(1, time.Duration(i)*time.Millisecond, "AllGather", 64))
	}
	// The same rank with its operations timed on the device and a kernel
	// of 3 ms each cycle: the GPU busy 3 ms of it.
	var timed []profiler.Record
	for i, r := range steady {
		r.HasDevice, r.DeviceStart, r.DeviceEnd, r.Stream = true, r.HostStart+time.Millisecond, r.HostStart+2*time.Millisecond, 1
		timed = append(timed, r)
		if i%2 == 0 {
			timed = append(timed, profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Stream: 2, HasDevice: true,
				DeviceStart: r.HostStart + 10*time.Millisecond, DeviceEnd: r.HostStart + 13*time.Millisecond})
		}
	}
	// 20 cycles of 20 ms, the 11th 40 ms longer: a stall at 0.2 s.
	var stalled []profiler.Record
	at := time.Duration(0)
	for i := range 20 {
		stalled = append(stalled, rec(0, at, "AllReduce", 1<<20), rec(0, at+5*time.Millisecond, "Broadcast", 4096))
		at += 20 * time.Millisecond
		if i == 10 {
			at += 40 * time.Millisecond
		}
	}
	for _, c := range []struct {
		name   string
		recs   []profiler.Record
		want   map[string]any
		finish bool
	}{
		{"found", append(append([]profiler.Record{}, steady...), few...), map[string]any{
			"collective_cycle.found": true, "collective_cycle.ranks": 2.0, "collective_cycle.agreeing_ranks": 1.0,
			"collective_cycle.operations": 2.0, "collective_cycle.min_operations": 2.0, "collective_cycle.max_operations": 2.0,
			"collective_cycle.bytes": float64(1<<20 + 4096), "collective_cycle.cycles": 10.0,
			"collective_cycle.ops.0.op": "AllReduce", "collective_cycle.ops.1.op": "Broadcast", "collective_cycle.ops.1.bytes": 4096.0,
			"collective_cycle.p50_s": 0.02, "collective_cycle.p90_s": 0.02, "collective_cycle.device_s": nil,
			"collective_cycle.busy_s": nil,
		}, false},
		{"busy", timed, map[string]any{
			"collective_cycle.found": true, "collective_cycle.operations": 2.0, "collective_cycle.p50_s": 0.02,
			"collective_cycle.device_s": 0.002, "collective_cycle.busy_s": 0.003,
		}, false},
		// Once the Sink has every operation, each cycle of the run:
		// the last has no next, so 9 of 10 are timed.
		{"run", steady, map[string]any{
			"collective_cycle.run.0.rank": 0.0, "collective_cycle.run.0.cycles": 9.0, "collective_cycle.run.0.from_s": 0.0,
			"collective_cycle.run.0.to_s": 0.18, "collective_cycle.run.0.min_s": 0.02, "collective_cycle.run.0.max_s": 0.02,
			"collective_cycle.run.0.sum_s": 0.18, "collective_cycle.run.0.breaks": 0.0, "collective_cycle.run.0.missed": 0.0,
		}, true},
		{"stall", stalled, map[string]any{
			"collective_cycle.run.0.cycles": 19.0, "collective_cycle.run.0.max_s": 0.06,
			"collective_cycle.stalls.0.rank": 0.0, "collective_cycle.stalls.0.at_s": 0.2, "collective_cycle.stalls.0.s": 0.06,
		}, true},
		{"none", few, map[string]any{
			"collective_cycle.found": false, "collective_cycle.ranks": 1.0, "collective_cycle.operations": 0.0,
			"collective_cycle.why": "5 operations, too few to repeat 3 times", "collective_cycle.p50_s": nil,
		}, false},
	} {
		s := cycle.NewSink(0)
		s.Consume(c.recs)
		if c.finish {
			s.Finish()
		}
		res := s.Result()
		var b bytes.Buffer
		if err := jsonsummary.Write(&b, jsonsummary.Input{Cycle: &res}); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if _, ok := lookup(doc, "collective_cycle.note"); ok {
			t.Errorf("%s: a note where the cycle fills the operations kept: %s", c.name, b.String())
		}
		for path, want := range c.want {
			got, ok := lookup(doc, path)
			if f, isF := want.(float64); isF && ok {
				if g, _ := got.(float64); math.Abs(g-f) > 1e-9 {
					t.Errorf("%s: %s = %v, want %v", c.name, path, got, want)
				}
				continue
			}
			if !ok || got != want {
				t.Errorf("%s: %s = %v (present %v), want %v\n%s", c.name, path, got, ok, want, b.String())
			}
		}
	}
	// No collectives (the built-in trainer's runs carry none in Cycle;
	// a wrapped command that used none): no collective_cycle at all.
	var empty cycle.Result
	var b bytes.Buffer
	if err := jsonsummary.Write(&b, jsonsummary.Input{Cycle: &empty}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "collective_cycle") {
		t.Errorf("collective_cycle without a rank: %s", b.String())
	}
}
