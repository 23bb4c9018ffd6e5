package runcompare_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/runcompare"
)

func ptr[T any](v T) *T { return &v }

// job is a built-in trainer's document: two stages, one rank each, with
// the step times, busy shares, bubbles and waiting given.
func job(p50 [2]float64, busy [2]*float64, bubble [2]float64, waited [2]float64) jsonsummary.Document {
	t := &jsonsummary.Trainer{Placement: "2 ranks on 2 cpu devices", Stages: 2, Chunks: 2, Replicas: 1, Microbatches: 8,
		MicrobatchSize: 16, Layers: 16, Width: 128, Precision: "float32", Schedule: "1f1b", Steps: 20}
	d := jsonsummary.Document{Schema: jsonsummary.Schema, Command: []string{"-steps", "20"}, Trainer: t,
		Pipeline: &jsonsummary.Pipeline{Steps: 20, CompleteSteps: 20, Stages: 2, Chunks: 2, Microbatches: 8, IdealBubble: ptr(1.0 / 17)}}
	for r := range 2 {
		d.Steps = append(d.Steps, jsonsummary.RankStep{Rank: r, Stage: ptr(r), Steps: 20, Mean: ptr(p50[r] * 1.1), P50: ptr(p50[r]), P90: ptr(p50[r] * 1.5), Busy: busy[r]})
		// Stage 1 has three times stage 0's rank-steps: the mean over
		// stages weighs it so.
		d.Pipeline.Bubbles = append(d.Pipeline.Bubbles, jsonsummary.StageBubble{Stage: ptr(r), RankSteps: 20 * (2*r + 1), Fraction: ptr(bubble[r])})
		d.Pipeline.Ranks = append(d.Pipeline.Ranks, jsonsummary.RankWait{Rank: r, Stage: ptr(r), Steps: 20, Comm: ptr(0.002 * float64(r+1)), Waited: waited[r]})
	}
	return d
}

func figure(t *testing.T, c runcompare.Comparison, name string) runcompare.Figure {
	t.Helper()
	for _, f := range c.Figures {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no figure %q among %v", name, c.Figures)
	return runcompare.Figure{}
}

// TestFigures: each run-wide figure is worked by hand from the two
// documents: the slowest rank's step times, the mean busy share over
// ranks that measured one, the bubble over stages weighed by rank-steps,
// the communication's mean and the waiting's sum over ranks, the
// straggler, and each change in its unit.
func TestFigures(t *testing.T) {
	base := job([2]float64{0.010, 0.012}, [2]*float64{ptr(0.5), ptr(0.7)}, [2]float64{0.4, 0.2}, [2]float64{0.001, 0.003})
	new := job([2]float64{0.015, 0.011}, [2]*float64{ptr(0.6), nil}, [2]float64{0.2, 0.2}, [2]float64{0, 0.002})
	new.Pipeline.Straggler = ptr(1)
	new.Records.Dropped = 7
	base.Records.Unfinished = 3
	// Both measured their stages' computation; only new's stage 1 stood
	// out.
	for i := range 2 {
		base.Pipeline.Bubbles[i].Compute, new.Pipeline.Bubbles[i].Compute = ptr(0.01), ptr(0.01*float64(i+1))
	}
	new.Pipeline.SlowestStage = ptr(1)
	c := runcompare.Compare(runcompare.Run{Name: "a", Doc: base}, runcompare.Run{Name: "b", Doc: new})
	for _, w := range []struct {
		name      string
		base, new float64
		change    string
	}{
		// max(10, 12) ms → max(15, 11) ms: +25 %.
		{"step time p50, slowest rank", 0.012, 0.015, "+25.0 %"},
		{"step time mean, slowest rank", 0.0132, 0.0165, "+25.0 %"},
		{"step time p90, slowest rank", 0.018, 0.0225, "+25.0 %"},
		// (0.5 + 0.7) / 2 → 0.6 alone (rank 1 measured none): −0.0 pts.
		{"busy, mean over ranks", 0.6, 0.6, "±0.0 pts"},
		// (0.4·20 + 0.2·60) / 80 = 0.25 → 0.2: −5 pts.
		{"bubble, mean over stages", 0.25, 0.2, "−5.0 pts"},
		{"ideal bubble", 1.0 / 17, 1.0 / 17, "±0.0 pts"},
		// (2 + 4) / 2 ms both.
		{"communication per step, mean over ranks", 0.003, 0.003, "="},
		// 1 + 3 ms → 0 + 2 ms: −50 %.
		{"waiting at collectives per step, all ranks", 0.004, 0.002, "−50.0 %"},
		{"straggler", -1, 1, "none → rank 1"},
		{"slowest stage (stage balance)", -1, 1, "none → stage 1"},
		{"records dropped", 0, 7, "from 0"},
	} {
		f := figure(t, c, w.name)
		if !f.Base.Known || !f.New.Known || !near(f.Base.V, w.base) || !near(f.New.V, w.new) || f.Change() != w.change {
			t.Errorf("%s: %+v, %+v, change %q; want %v, %v, %q", w.name, f.Base, f.New, f.Change(), w.base, w.new, w.change)
		}
	}
	if f := figure(t, c, "collective arrival skew p90"); f.Base.Known || f.New.Known || f.Change() != "" {
		t.Errorf("skew with no collective matched: %+v; want unknown on both sides", f)
	}
	// A summary from before the stages' computation was measured: its
	// slowest stage is unknown, not none.
	for i := range 2 {
		base.Pipeline.Bubbles[i].Compute = nil
	}
	old := runcompare.Compare(runcompare.Run{Name: "a", Doc: base}, runcompare.Run{Name: "b", Doc: new})
	if f := figure(t, old, "slowest stage (stage balance)"); f.Base.Known || !f.New.Known || f.Change() != "" {
		t.Errorf("slowest stage against a summary without compute_s: %+v, change %q; want base unknown", f, f.Change())
	}
	if len(c.JobDiffs) != 0 {
		t.Errorf("the same job: differences %q", c.JobDiffs)
	}
	if len(c.Notes) != 2 || !strings.Contains(c.Notes[0], "base has 3 device ranges whose device work never finished") || !strings.Contains(c.Notes[1], "new dropped 7 records") {
		t.Errorf("notes %q; want two: base's 3 unfinished ranges, new's 7 drops", c.Notes)
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// TestGate: the slowest rank's p50 is gated; 25 % growth fails a 20 %
// bound and passes a 25 % one (the bound is inclusive); a faster run
// passes any bound; a run without step times cannot be gated.
func TestGate(t *testing.T) {
	base := job([2]float64{0.010, 0.008}, [2]*float64{}, [2]float64{}, [2]float64{})
	slower := job([2]float64{0.0125, 0.002}, [2]*float64{}, [2]float64{}, [2]float64{})
	faster := job([2]float64{0.009, 0.009}, [2]*float64{}, [2]float64{}, [2]float64{})
	for _, w := range []struct {
		new    jsonsummary.Document
		bound  float64
		growth float64
		ok     bool
	}{
		{slower, 0.20, 0.25, false},
		{slower, 0.25, 0.25, true},
		{faster, 0, -0.10, true},
	} {
		c := runcompare.Compare(runcompare.Run{Name: "a", Doc: base}, runcompare.Run{Name: "b", Doc: w.new})
		g, ok, err := c.Gate(w.bound)
		if err != nil || !near(g, w.growth) || ok != w.ok {
			t.Errorf("bound %v: growth %v, ok %v, %v; want %v, %v", w.bound, g, ok, err, w.growth, w.ok)
		}
	}
	stepless := jsonsummary.Document{Schema: jsonsummary.Schema, Command: []string{"--", "torchrun", "train.py"},
		Pipeline: &jsonsummary.Pipeline{Stepless: true}}
	c := runcompare.Compare(runcompare.Run{Name: "a", Doc: base}, runcompare.Run{Name: "wrapped", Doc: stepless})
	if _, _, err := c.Gate(0.05); !errors.Is(err, runcompare.ErrNotGated) || !strings.Contains(err.Error(), "new wrapped") {
		t.Errorf("gate on a run without steps: %v; want ErrNotGated naming new's run", err)
	}
}

// TestGateOnTheCycleOfCollectives: two wrapped runs that mark no steps
// are gated on the median time of the cycle their collectives repeat
// (10 ms, then 12.5 ms: 25 % more), and their GPUs' busy share of it is
// a row (4 ms of 10, 4 ms of 12.5: 40 %, 32 %), as are the p99 and the
// longest of every cycle of the run, the slowest rank's (rank 1's 11
// and 900 ms, then rank 0's 14 and 1,200 ms); not where the cycles
// differ in length, nor against a run with step times.
func TestGateOnTheCycleOfCollectives(t *testing.T) {
	wrapped := func(p50 float64, ops int) jsonsummary.Document {
		busy := 0.004
		// Each rank's cycles over the run: the p99 a little above the
		// median, one stall; rank 1's the slower in the base run, rank
		// 0's in the new one.
		run := []jsonsummary.CycleRun{{Rank: 0, Cycles: 100, P99: 0.010, Max: 0.5}, {Rank: 1, Cycles: 100, P99: 0.011, Max: 0.9}}
		if p50 > 0.010 {
			run = []jsonsummary.CycleRun{{Rank: 0, Cycles: 100, P99: 0.014, Max: 1.2}, {Rank: 1, Cycles: 100, P99: 0.013, Max: 0.3}, {Rank: 2, P99: 9, Max: 9}}
		}
		return jsonsummary.Document{Schema: jsonsummary.Schema, Command: []string{"--", "torchrun", "train.py"},
			Pipeline: &jsonsummary.Pipeline{Stepless: true},
			CollectiveCycle: &jsonsummary.CollectiveCycle{Found: true, Ranks: 2, AgreeingRanks: 2, Operations: ops, P50: &p50, P90: &p50, Busy: &busy,
				Run: run}}
	}
	run := func(name string, d jsonsummary.Document) runcompare.Run { return runcompare.Run{Name: name, Doc: d} }
	c := runcompare.Compare(run("a", wrapped(0.010, 4)), run("b", wrapped(0.0125, 4)))
	if got := c.GatedFigure(); got == runcompare.GatedStepTime {
		t.Fatalf("gated on %q; want the cycle's figure", got)
	}
	for _, w := range []struct {
		bound float64
		ok    bool
	}{{0.20, false}, {0.25, true}} {
		g, ok, err := c.Gate(w.bound)
		if err != nil || !near(g, 0.25) || ok != w.ok {
			t.Errorf("bound %v: growth %v, ok %v, %v; want 0.25, %v", w.bound, g, ok, err, w.ok)
		}
	}
	var buf strings.Builder
	if err := c.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`collectives' cycle p50\s+10\.0 ms\s+12\.5 ms\s+\+25\.0 %`).MatchString(buf.String()) {
		t.Errorf("no row of the cycle's p50:\n%s", buf.String())
	}
	if !regexp.MustCompile(`busy in the collectives' cycle\s+40\.0 %\s+32\.0 %\s+−8\.0 pts`).MatchString(buf.String()) {
		t.Errorf("no row of the GPU's busy share of the cycle:\n%s", buf.String())
	}
	// A rank with no cycle timed (rank 2's figures) counts for nothing.
	if !regexp.MustCompile(`cycles over the run p99, slowest rank\s+11\.0 ms\s+14\.0 ms\s+\+27\.3 %`).MatchString(buf.String()) ||
		!regexp.MustCompile(`longest cycle of the run\s+900 ms\s+1\.20 s\s+\+33\.3 %`).MatchString(buf.String()) {
		t.Errorf("no rows of the cycles over the run:\n%s", buf.String())
	}
	c = runcompare.Compare(run("a", wrapped(0.010, 4)), run("b", wrapped(0.020, 8)))
	if _, _, err := c.Gate(0.05); !errors.Is(err, runcompare.ErrNotGated) || !strings.Contains(err.Error(), "cycles of collectives differ (base 4 operations, new 8)") {
		t.Errorf("cycles of other lengths: %v; want ErrNotGated saying they differ", err)
	}
	if !slices.ContainsFunc(c.Notes, func(n string) bool {
		return strings.HasPrefix(n, "their cycles of collectives differ (base 4 operations, new 8)")
	}) {
		t.Errorf("notes %q; want one saying the cycles differ", c.Notes)
	}
	steps := job([2]float64{0.010, 0.008}, [2]*float64{}, [2]float64{}, [2]float64{})
	c = runcompare.Compare(run("a", steps), run("b", wrapped(0.010, 4)))
	if got := c.GatedFigure(); got != runcompare.GatedStepTime {
		t.Errorf("a run with steps against one without: gated on %q; want the step time", got)
	}
	if _, _, err := c.Gate(0.05); !errors.Is(err, runcompare.ErrNotGated) {
		t.Errorf("a run with steps against one without: %v; want ErrNotGated", err)
	}
}

// TestJobDiffs: the trainer's fields that differ are named with both
// values; a trainer against a wrapped command, and two wrapped commands,
// are told apart by what they ran.
func TestJobDiffs(t *testing.T) {
	a := job([2]float64{0.01, 0.01}, [2]*float64{}, [2]float64{}, [2]float64{})
	b := job([2]float64{0.01, 0.01}, [2]*float64{}, [2]float64{}, [2]float64{})
	b.Trainer.Width, b.Trainer.Precision, b.Trainer.Placement = 1024, "bf16", "2 ranks sharing 1 cuda device (in-process collectives)"
	b.Trainer.Steps = 100 // not a difference of job: a note
	c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	want := []string{"placement 2 ranks on 2 cpu devices → 2 ranks sharing 1 cuda device (in-process collectives)", "width 128 → 1024", "precision float32 → bf16"}
	if strings.Join(c.JobDiffs, "|") != strings.Join(want, "|") {
		t.Errorf("differences %q; want %q", c.JobDiffs, want)
	}
	if !strings.Contains(strings.Join(c.Notes, "|"), "base was asked for 20 steps, new for 100") {
		t.Errorf("notes %q; want the steps asked for", c.Notes)
	}

	w1 := jsonsummary.Document{Command: []string{"-quiet", "--", "torchrun", "a.py"}}
	w2 := jsonsummary.Document{Command: []string{"--", "torchrun", "b.py"}}
	c = runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: w1})
	if len(c.JobDiffs) != 1 || !strings.Contains(c.JobDiffs[0], "new is wrapped: torchrun a.py") || !strings.Contains(c.JobDiffs[0], "base is pp 2 × vpp 2") {
		t.Errorf("trainer against a wrapped command: %q", c.JobDiffs)
	}
	c = runcompare.Compare(runcompare.Run{Doc: w1}, runcompare.Run{Doc: w2})
	if len(c.JobDiffs) != 1 || c.JobDiffs[0] != "base is wrapped: torchrun a.py; new is wrapped: torchrun b.py" {
		t.Errorf("two wrapped commands: %q", c.JobDiffs)
	}
	w2.Command = []string{"--", "torchrun", "a.py"}
	if c = runcompare.Compare(runcompare.Run{Doc: w1}, runcompare.Run{Doc: w2}); len(c.JobDiffs) != 0 {
		t.Errorf("one wrapped command, profile-run's flags aside: %q", c.JobDiffs)
	}
}

// TestEnvironmentDiffs: the same job on other GPUs is a different job;
// other library versions, another host and another build of profile-run
// are notes; summaries without an environment compare as alike.
func TestEnvironmentDiffs(t *testing.T) {
	env := func(gpu string, n int, nccl, rev string) *jsonsummary.Environment {
		e := &jsonsummary.Environment{ProfileRun: jsonsummary.Build{Version: "v0.0.0-x", Revision: rev, Go: "go1.26.8"},
			Host: &jsonsummary.Host{Name: "node-" + gpu, CPUs: 16}, Backend: "cuda",
			Libraries: []jsonsummary.Library{{Name: "CUDA runtime", Version: "13.0"}, {Name: "NCCL", Version: nccl}}}
		for i := range n {
			e.Devices = append(e.Devices, jsonsummary.Device{Index: i, Name: gpu})
		}
		return e
	}
	a := job([2]float64{0.01, 0.01}, [2]*float64{}, [2]float64{}, [2]float64{})
	b := job([2]float64{0.01, 0.01}, [2]*float64{}, [2]float64{}, [2]float64{})
	a.Environment = env("NVIDIA H100 80GB HBM3", 2, "2.28.3", "89e3a542128fa3299ae260ddf26d65971fb7329d")
	b.Environment = env("NVIDIA H200", 2, "2.28.9", "0123456789abcdef0123456789abcdef01234567")
	b.Environment.ProfileRun.Modified = true
	c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if want := "devices 2 × NVIDIA H100 80GB HBM3 → 2 × NVIDIA H200"; strings.Join(c.JobDiffs, "|") != want {
		t.Errorf("differences %q; want %q", c.JobDiffs, want)
	}
	notes := strings.Join(c.Notes, "|")
	for _, w := range []string{"the libraries differ: NCCL 2.28.3 → 2.28.9", "different hosts: node-NVIDIA H100 80GB HBM3 → node-NVIDIA H200",
		"profile-run builds differ: 89e3a542128f → 0123456789ab+changes"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes %q: no %q", c.Notes, w)
		}
	}
	if strings.Contains(notes, "CUDA runtime") {
		t.Errorf("notes %q name a library whose version did not change", c.Notes)
	}

	// The same machine and build: nothing to say.
	b.Environment = env("NVIDIA H100 80GB HBM3", 2, "2.28.3", "89e3a542128fa3299ae260ddf26d65971fb7329d")
	b.Environment.Host.Name = a.Environment.Host.Name
	if c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b}); len(c.JobDiffs) != 0 || len(c.Notes) != 0 {
		t.Errorf("the same environment: differences %q, notes %q", c.JobDiffs, c.Notes)
	}
	// One GPU more is said by the device count; a library only one run
	// loaded (NCCL, used by ranks on GPUs of their own) by its side.
	b.Environment = env("NVIDIA H100 80GB HBM3", 1, "2.28.3", "89e3a542128fa3299ae260ddf26d65971fb7329d")
	b.Environment.Host.Name = a.Environment.Host.Name
	b.Environment.Libraries = b.Environment.Libraries[:1]
	c = runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if want := "devices 2 × NVIDIA H100 80GB HBM3 → 1 × NVIDIA H100 80GB HBM3"; strings.Join(c.JobDiffs, "|") != want {
		t.Errorf("differences %q; want %q", c.JobDiffs, want)
	}
	if want := "the libraries differ: NCCL 2.28.3 in base only"; strings.Join(c.Notes, "|") != want {
		t.Errorf("notes %q; want %q", c.Notes, want)
	}
	// Host backends are told apart by the host's processor.
	cpu := func(model string) *jsonsummary.Environment {
		return &jsonsummary.Environment{Host: &jsonsummary.Host{Name: "h", CPUs: 2, CPUModel: model}, Backend: "cpu",
			Devices: []jsonsummary.Device{{Index: 0, MemoryBytes: 1 << 30, HostMemory: true}}}
	}
	a.Environment, b.Environment = cpu("AMD EPYC"), cpu("Intel(R) Xeon(R) Platinum 8480+")
	c = runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if want := "devices AMD EPYC (2 CPUs) → Intel(R) Xeon(R) Platinum 8480+ (2 CPUs)"; strings.Join(c.JobDiffs, "|") != want {
		t.Errorf("host backends: differences %q; want %q", c.JobDiffs, want)
	}
	// The variables that steer the libraries, set, changed or gone.
	a.Environment, b.Environment = cpu("AMD EPYC"), cpu("AMD EPYC")
	a.Environment.Variables = map[string]string{"NCCL_ALGO": "Ring", "CUDA_DEVICE_MAX_CONNECTIONS": "8", "NCCL_NVLS_ENABLE": "0"}
	b.Environment.Variables = map[string]string{"NCCL_PROTO": "LL128", "CUDA_DEVICE_MAX_CONNECTIONS": "32", "NCCL_NVLS_ENABLE": "0"}
	c = runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if want := "environment variables differ: CUDA_DEVICE_MAX_CONNECTIONS 8 → 32, NCCL_ALGO Ring → (unset), NCCL_PROTO (unset) → LL128"; strings.Join(c.Notes, "|") != want {
		t.Errorf("notes %q; want %q", c.Notes, want)
	}
	b.Environment.Variables = nil
	for i := range 10 {
		a.Environment.Variables[fmt.Sprintf("NCCL_X%d", i)] = "1"
	}
	c = runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if n := strings.Join(c.Notes, "|"); !strings.HasPrefix(n, "environment variables differ: CUDA_DEVICE_MAX_CONNECTIONS 8 → (unset), NCCL_ALGO Ring → (unset), NCCL_NVLS_ENABLE 0 → (unset), NCCL_X0 1 → (unset)") ||
		!strings.HasSuffix(n, ", and 5 more") {
		t.Errorf("thirteen variables gone: notes %q; want the first eight named and 5 more counted", c.Notes)
	}
	b.Environment.Variables = a.Environment.Variables
	if c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b}); len(c.Notes) != 0 {
		t.Errorf("the same variables: notes %q", c.Notes)
	}
	// A summary of before environments: nothing is compared.
	a.Environment = nil
	if c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b}); len(c.JobDiffs) != 0 || len(c.Notes) != 0 {
		t.Errorf("without an environment: differences %q, notes %q", c.JobDiffs, c.Notes)
	}
}

// TestNotes: an interrupted run, one of few steps, a pipeline analysis
// with problems and a job without steps are each said; the stepless
// run's totals are not set beside the other's figures per step.
func TestNotes(t *testing.T) {
	a := job([2]float64{0.01, 0.01}, [2]*float64{}, [2]float64{}, [2]float64{0.001, 0})
	a.Partial = "partial run: interrupted by SIGINT at step 3"
	for i := range a.Steps {
		a.Steps[i].Steps = 3
	}
	a.Pipeline.Problems = []string{"step 2: rank 1 cut short", "step 3: missing rank 0"}
	b := jsonsummary.Document{Command: []string{"--", "python", "x.py"}, Pipeline: &jsonsummary.Pipeline{Stepless: true,
		Ranks: []jsonsummary.RankWait{{Rank: 0, Waited: 2}}}}
	c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	notes := strings.Join(c.Notes, "\n")
	for _, w := range []string{
		"base is partial run: interrupted by SIGINT at step 3",
		"base counted 3 steps",
		"base's pipeline analysis names 2 problems (its report lists them): step 2: rank 1 cut short",
		"one run marked no steps",
	} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
	// One step is one step.
	for i := range a.Steps {
		a.Steps[i].Steps = 1
	}
	one := strings.Join(runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b}).Notes, "\n")
	if !strings.Contains(one, "base counted 1 step:") {
		t.Errorf("a run of one step: notes lack %q:\n%s", "base counted 1 step:", one)
	}
	for _, name := range []string{"communication per step, mean over ranks", "waiting at collectives per step, all ranks"} {
		if f := figure(t, c, name); f.Base.Known || f.New.Known {
			t.Errorf("%s compared between a run per step and one of totals: %+v", name, f)
		}
	}
	if f := figure(t, c, "step time p50, slowest rank"); !f.Base.Known || f.New.Known {
		t.Errorf("step time: %+v; want base's only", f)
	}
}

// TestRanges: ranges are paired by tag and name, summed over ranks, and
// divided by each run's steps; device time where either run timed one on
// the device, else host time; ranges new or gone are kept, those one run
// did not time on the device go last, and at most ten are kept, the
// largest change first.
func TestRanges(t *testing.T) {
	doc := func(steps int, rs ...jsonsummary.Range) jsonsummary.Document {
		return jsonsummary.Document{Steps: []jsonsummary.RankStep{{Rank: 0, Steps: steps}, {Rank: 1, Steps: steps - 1}}, Ranges: rs}
	}
	a := doc(10,
		jsonsummary.Range{Tag: "all steps", Name: "forward", Count: 40, Host: 0.01, Device: 0.5}, // 50 ms a step
		jsonsummary.Range{Tag: "all steps", Name: "step", Count: 20, Host: 1.0},                  // host: 100 ms
		jsonsummary.Range{Tag: "all steps", Name: "old", Count: 1, Host: 0.02},                   // gone: 2 ms
		jsonsummary.Range{Tag: "all steps", Name: "linear", Count: 5, Host: 0.001},               // not device-timed here
	)
	b := doc(20,
		jsonsummary.Range{Tag: "all steps", Name: "forward", Count: 80, Host: 0.02, Device: 0.8}, // 40 ms: −10 ms
		jsonsummary.Range{Tag: "all steps", Name: "step", Count: 40, Host: 2.4},                  // 120 ms: +20 ms
		jsonsummary.Range{Tag: "all steps", Name: "linear", Count: 9, Host: 0.001, Device: 4},    // 200 ms, but untimed in a
		jsonsummary.Range{Tag: "step 3", Name: "forward", Count: 4, Device: 0.06},                // new: 3 ms
	)
	c := runcompare.Compare(runcompare.Run{Doc: a}, runcompare.Run{Doc: b})
	if !c.PerStep {
		t.Fatal("PerStep false with steps on both sides")
	}
	type row struct {
		tag, name string
		dev       bool
		base, new float64 // ms; -1: unknown
	}
	ms := func(x runcompare.Value) float64 {
		if !x.Known {
			return -1
		}
		return math.Round(x.V*1e6) / 1e3 // to the µs: the sums are not exact in binary
	}
	want := []row{
		{"all steps", "step", false, 100, 120},
		{"all steps", "forward", true, 50, 40},
		{"step 3", "forward", true, -1, 3},
		{"all steps", "old", false, 2, -1},
		{"all steps", "linear", true, -1, 200},
	}
	if len(c.Ranges) != len(want) {
		t.Fatalf("ranges %+v; want %+v", c.Ranges, want)
	}
	for i, r := range c.Ranges {
		if got := (row{r.Tag, r.Name, r.Device, ms(r.Base), ms(r.New)}); got != want[i] {
			t.Errorf("range %d: %+v; want %+v", i, got, want[i])
		}
	}
	if u := c.Ranges[4].Untimed; !u[0] || u[1] {
		t.Errorf("linear: Untimed %v; want base only", u)
	}

	var many []jsonsummary.Range
	for i := range 15 {
		many = append(many, jsonsummary.Range{Tag: "t", Name: string(rune('a' + i)), Count: 1, Host: float64(i)})
	}
	c = runcompare.Compare(runcompare.Run{Doc: doc(1)}, runcompare.Run{Doc: doc(1, many...)})
	if len(c.Ranges) != 10 || c.Ranges[0].Name != "o" || c.Ranges[9].Name != "f" {
		t.Errorf("15 new ranges: kept %d, first %q, last %q; want 10, o … f", len(c.Ranges), c.Ranges[0].Name, c.Ranges[9].Name)
	}
}

// TestWrite: the text names both runs and their jobs, says how they
// differ, and sets each figure beside the other in its unit.
func TestWrite(t *testing.T) {
	base := job([2]float64{0.010, 0.012}, [2]*float64{ptr(0.5), ptr(0.7)}, [2]float64{0.4, 0.2}, [2]float64{0.001, 0.003})
	new := job([2]float64{0.015, 0.011}, [2]*float64{ptr(0.6), nil}, [2]float64{0.2, 0.2}, [2]float64{0, 0.002})
	new.Trainer.Layers = 32
	c := runcompare.Compare(runcompare.Run{Name: "out/a", Doc: base}, runcompare.Run{Name: "out/b", Doc: new})
	var b bytes.Buffer
	if err := c.Write(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, w := range []string{
		"base  out/a  (pp 2 × vpp 2 × dp 1, 8 microbatches of 16 rows, 16 layers of width 128, float32, 1f1b; 2 ranks on 2 cpu devices)\n",
		"new   out/b  (pp 2 × vpp 2 × dp 1, 8 microbatches of 16 rows, 32 layers of width 128",
		"the jobs differ: layers 16 → 32",
		"step time p50, slowest rank                 12.0 ms  15.0 ms   +25.0 %\n",
		"bubble, mean over stages                     25.0 %   20.0 %  −5.0 pts\n",
		"waiting at collectives per step, all ranks  4.00 ms  2.00 ms   −50.0 %\n",
		"straggler                                      none     none         =\n",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the text lacks %q:\n%s", w, text)
		}
	}
	if err := c.Write(failing{}); err == nil {
		t.Error("Write to a failing writer: no error")
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }
