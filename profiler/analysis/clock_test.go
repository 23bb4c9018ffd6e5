package analysis

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// shifted returns a copy of recs with every time of rank r moved by
// off[r]: what a rank whose clock runs off[r] ahead would have recorded.
func shifted(recs []profiler.Record, off map[int]time.Duration) []profiler.Record {
	out := slices.Clone(recs)
	for i := range out {
		d := off[out[i].Rank]
		out[i].HostStart += d
		out[i].HostEnd += d
		if out[i].HasDevice {
			out[i].DeviceStart += d
			out[i].DeviceEnd += d
		}
		if out[i].Collective.TransferEnd != 0 {
			out[i].Collective.TransferEnd += d
		}
	}
	return out
}

// TestClockOffsetsRecovered injects known offsets into the records of a
// data-parallel trainer run (one clock, so the truth is known) and
// recovers them within the collectives' own spread of departures. It
// trains on the backend the fidelity tests use (fidelityBackend).
func TestClockOffsetsRecovered(t *testing.T) {
	cfg := trainerShape(1, 2, 3, 4, 4, 16, 8, 6)
	recs := trainerRecords(t, "dp3", cfg)
	// The jitter: the largest spread of one collective's departures.
	var jitter time.Duration
	n := 0
	for _, st := range Analyze(recs) {
		for _, c := range st.Collectives {
			if !c.Complete {
				t.Fatalf("step %d: collective %s #%d incomplete: %s", st.Step, c.Group, c.Seq, c.Problem)
			}
			lo, hi := c.Members[0].Leave, c.Members[0].Leave
			for _, m := range c.Members {
				lo, hi = min(lo, m.Leave), max(hi, m.Leave)
			}
			jitter = max(jitter, hi-lo)
			n++
		}
	}
	if n != cfg.Steps*cfg.Chunks {
		t.Fatalf("%d complete collectives, want %d", n, cfg.Steps*cfg.Chunks)
	}
	inject := map[int]time.Duration{1: 7 * time.Millisecond, 2: -3*time.Millisecond - 123*time.Microsecond}
	got := EstimateOffsets(shifted(recs, inject))
	t.Logf("jitter %v; estimated %v, residual %v", jitter, got.Offset, got.Residual)
	if got.Reference != 0 || len(got.Unaligned) != 0 {
		t.Fatalf("reference %d, unaligned %v; want 0 and none", got.Reference, got.Unaligned)
	}
	for r := range 3 {
		if e := (got.Offset[r] - inject[r]).Abs(); e > jitter {
			t.Errorf("rank %d: offset %v, injected %v: off by %v, more than the jitter %v", r, got.Offset[r], inject[r], e, jitter)
		}
		if got.Residual[r] > jitter {
			t.Errorf("rank %d: residual %v above the jitter %v", r, got.Residual[r], jitter)
		}
		if got.Samples[r] != n {
			t.Errorf("rank %d: %d samples, want %d", r, got.Samples[r], n)
		}
	}
	// Aligned analysis sees what the single clock saw, within the jitter.
	plain := Summarize(Analyze(recs))
	aligned := Summarize(Analyze(shifted(recs, inject), WithClockAlignment()))
	if !aligned.Aligned || aligned.Complete != plain.Complete {
		t.Fatalf("aligned: %d complete (aligned %v), plain %d", aligned.Complete, aligned.Aligned, plain.Complete)
	}
	if d := (aligned.Collectives.MaxSkew - plain.Collectives.MaxSkew).Abs(); d > 2*jitter {
		t.Errorf("max skew aligned %v, on one clock %v", aligned.Collectives.MaxSkew, plain.Collectives.MaxSkew)
	}
}

// TestClockChain aligns ranks that share collectives only through
// others, and says which share none.
func TestClockChain(t *testing.T) {
	var b build
	// Groups: a = {0, 1}, b = {1, 2}; rank 3 only computes.
	for s := range 3 {
		o := float64(100 * s)
		for r := range 4 {
			b.step(r, s, r, o, o+50)
		}
		b.coll(0, s, 0, "AllReduce", "a", 2, 0, -1, uint64(s), 1, o+1, o+10)
		b.coll(1, s, 1, "AllReduce", "a", 2, 1, -1, uint64(s), 1, o+2, o+10)
		b.coll(1, s, 1, "AllReduce", "b", 2, 0, -1, uint64(s), 1, o+11, o+20)
		b.coll(2, s, 2, "AllReduce", "b", 2, 1, -1, uint64(s), 1, o+12, o+20)
		b.dev(3, s, 3, 0, 0, profiler.Forward, 1, o+5, o+6)
	}
	inject := map[int]time.Duration{1: 2 * time.Millisecond, 2: 5 * time.Millisecond, 3: time.Second}
	got := EstimateOffsets(shifted(b.recs, inject))
	for r := range 3 {
		if got.Offset[r] != inject[r] {
			t.Errorf("rank %d: offset %v, want %v", r, got.Offset[r], inject[r])
		}
	}
	if !slices.Equal(got.Unaligned, []int{3}) {
		t.Errorf("unaligned %v, want [3]", got.Unaligned)
	}
	steps := Analyze(shifted(b.recs, inject), WithClockAlignment())
	for _, st := range steps {
		want := "clock alignment: rank 3 shares no complete collective, send or receive with rank 0, directly or through other ranks; its clock is left as recorded"
		if st.Complete() || !slices.Contains(st.Problems, want) {
			t.Errorf("step %d: problems %q, want %q", st.Step, st.Problems, want)
		}
		for _, c := range st.Collectives {
			if c.Skew != time.Millisecond {
				t.Errorf("step %d: %s skew %v after alignment, want 1ms", st.Step, c.Group, c.Skew)
			}
		}
	}
}

// TestClockAlignmentWithoutCollectives: two ranks that only compute and
// pass activations have no collective to align on; each step says so,
// naming the ranks (and no reference rank, there being none), and the
// summary does not claim the clocks were aligned.
func TestClockAlignmentWithoutCollectives(t *testing.T) {
	var b build
	for s := range 2 {
		o := float64(100 * s)
		for r := range 2 {
			b.step(r, s, r, o, o+50)
			b.dev(r, s, r, 0, 0, profiler.Forward, 1, o+10*float64(r), o+10*float64(r)+5)
		}
	}
	steps := Analyze(b.recs, WithClockAlignment())
	want := "clock alignment: no collective was recorded by every rank of its group and no send matched with its receive, so ranks 0, 1 cannot be put on one clock; their clocks are left as recorded"
	if len(steps) != 2 {
		t.Fatalf("%d steps, want 2", len(steps))
	}
	for _, st := range steps {
		if !slices.Contains(st.Problems, want) {
			t.Errorf("step %d: problems %q, want %q", st.Step, st.Problems, want)
		}
	}
	if sum := Summarize(steps); sum.Aligned || sum.MaxClockResidual != 0 {
		t.Errorf("summary aligned %v (residual %v); want not aligned: no rank was put on another's clock", sum.Aligned, sum.MaxClockResidual)
	}
}

// TestClockAlignmentOneRank: a one-rank run (a wrapped one-GPU job) has
// one clock; that it has no collective to align on is no problem.
func TestClockAlignmentOneRank(t *testing.T) {
	var b build
	for s := range 2 {
		o := float64(100 * s)
		b.step(0, s, 0, o, o+50)
		b.dev(0, s, 0, 0, 0, profiler.Forward, 1, o+10, o+15)
	}
	steps := Analyze(b.recs, WithClockAlignment())
	if len(steps) != 2 {
		t.Fatalf("%d steps, want 2", len(steps))
	}
	for _, st := range steps {
		if len(st.Problems) != 0 || !st.Complete() {
			t.Errorf("step %d: problems %q", st.Step, st.Problems)
		}
	}
}

// TestClockDomainsByHand: ranks 0 and 1 share a clock, rank 2 is on
// another that runs 4 ms ahead. The shared clock's departure at a
// collective is its members' median, and its offset is one for both.
func TestClockDomainsByHand(t *testing.T) {
	var b build
	for s := range 3 {
		o := float64(100 * s)
		for r := range 3 {
			b.step(r, s, r, o, o+50)
		}
		// Rank 0 leaves at o+10, rank 1 at o+12: their clock's departure
		// is o+11; rank 2 leaves at o+11 on the true clock.
		b.coll(0, s, 0, "AllReduce", "g", 3, 0, -1, uint64(s), 1, o+1, o+10)
		b.coll(1, s, 1, "AllReduce", "g", 3, 1, -1, uint64(s), 1, o+2, o+12)
		b.coll(2, s, 2, "AllReduce", "g", 3, 2, -1, uint64(s), 1, o+3, o+11)
	}
	inject := map[int]time.Duration{2: 4 * time.Millisecond}
	domains := map[int]int{0: 7, 1: 7}
	got := EstimateOffsets(shifted(b.recs, inject), WithClockDomains(domains))
	want := map[int]time.Duration{0: 0, 1: 0, 2: 4 * time.Millisecond}
	for r, w := range want {
		if got.Offset[r] != w {
			t.Errorf("rank %d: offset %v, want %v", r, got.Offset[r], w)
		}
		if got.Samples[r] != 3 {
			t.Errorf("rank %d: %d samples, want 3", r, got.Samples[r])
		}
	}
	// Residuals, by rank: the median of {10, 12, 11} is 11, so 0 and 1
	// are 1 ms from it and rank 2 on it.
	for r, w := range map[int]time.Duration{0: time.Millisecond, 1: time.Millisecond, 2: 0} {
		if got.Residual[r] != w {
			t.Errorf("rank %d: residual %v, want %v", r, got.Residual[r], w)
		}
	}
	if got.Reference != 0 || len(got.Unaligned) != 0 {
		t.Errorf("reference %d, unaligned %v; want 0 and none", got.Reference, got.Unaligned)
	}
	// One clock for every rank: nothing to align, whatever the
	// departures.
	one := EstimateOffsets(shifted(b.recs, inject), WithClockDomains(map[int]int{0: 0, 1: 0, 2: 0}))
	for r := range 3 {
		if d, ok := one.Offset[r]; !ok || d != 0 {
			t.Errorf("one clock: rank %d offset %v (set %v), want 0", r, d, ok)
		}
	}
}

// TestClockDomainsAcrossHosts: a pp=2 × dp=2 trainer run split as two
// hosts would record it — ranks 0 and 1 (one replica's two stages) on
// one clock, ranks 2 and 3 on another 5.3 ms ahead. The data-parallel
// groups are {0, 2} and {1, 3}: without knowing which ranks share a clock,
// ranks 1 and 3 share no collective with rank 0 and stay unaligned; with
// the domains every rank is aligned, within the collectives' jitter, by
// Analyze, the online Sink and the CallSink alike.
func TestClockDomainsAcrossHosts(t *testing.T) {
	cfg := trainerShape(2, 1, 2, 4, 4, 16, 4, 10)
	recs := trainerRecords(t, "pp2dp2", cfg)
	groups := map[string][]int{}
	var jitter time.Duration
	for _, st := range Analyze(recs) {
		for _, c := range st.Collectives {
			if !c.Complete {
				t.Fatalf("step %d: collective %s #%d incomplete: %s", st.Step, c.Group, c.Seq, c.Problem)
			}
			lo, hi := c.Members[0].Leave, c.Members[0].Leave
			var ranks []int
			for _, m := range c.Members {
				lo, hi = min(lo, m.Leave), max(hi, m.Leave)
				ranks = append(ranks, m.Rank)
			}
			jitter = max(jitter, hi-lo)
			slices.Sort(ranks)
			groups[c.Group] = ranks
		}
	}
	// The layout this test is about: data-parallel pairs across the hosts.
	var pairs [][]int
	for _, g := range groups {
		pairs = append(pairs, g)
	}
	slices.SortFunc(pairs, slices.Compare)
	if len(pairs) != 2 || !slices.Equal(pairs[0], []int{0, 2}) || !slices.Equal(pairs[1], []int{1, 3}) {
		t.Fatalf("collective groups %v, want {0, 2} and {1, 3}", pairs)
	}
	skew := 5*time.Millisecond + 300*time.Microsecond
	inject := map[int]time.Duration{2: skew, 3: skew}
	hosts := map[int]int{0: 0, 1: 0, 2: 1, 3: 1}
	split := shifted(recs, inject)

	// Without domains, no collective joins rank 1 to rank 0: rank 1 is
	// aligned on its sends and receives (each pair's two ends taken as
	// leaving together), rank 3 through its collectives with rank 1.
	// Their error is bounded by how far apart a pair's ends leave.
	var pairJitter time.Duration
	for _, d := range p2pDepartures(keepAll(recs)) {
		var v []time.Duration
		for _, t := range d {
			v = append(v, t)
		}
		pairJitter = max(pairJitter, (v[0] - v[1]).Abs())
	}
	own := EstimateOffsets(split)
	if len(own.Unaligned) != 0 || !slices.Equal(own.P2P, []int{1, 3}) {
		t.Errorf("without domains: unaligned %v, aligned on sends and receives %v; want none and [1 3] (3 through its collectives with 1)", own.Unaligned, own.P2P)
	}
	for r := range 4 {
		if e := (own.Offset[r] - inject[r]).Abs(); e > pairJitter+jitter {
			t.Errorf("without domains: rank %d: offset %v, injected %v: off by %v, more than the pairs' spread %v and the collectives' %v", r, own.Offset[r], inject[r], e, pairJitter, jitter)
		}
	}
	t.Logf("without domains: %v (pairs' spread %v)", own.Offset, pairJitter)
	got := EstimateOffsets(split, WithClockDomains(hosts))
	if len(got.P2P) != 0 {
		t.Errorf("with domains: %v aligned on sends and receives, want none", got.P2P)
	}
	t.Logf("jitter %v; estimated %v, residual %v", jitter, got.Offset, got.Residual)
	if len(got.Unaligned) != 0 {
		t.Fatalf("with domains: unaligned %v", got.Unaligned)
	}
	for r := range 4 {
		if e := (got.Offset[r] - inject[r]).Abs(); e > jitter {
			t.Errorf("rank %d: offset %v, injected %v: off by %v, more than the jitter %v", r, got.Offset[r], inject[r], e, jitter)
		}
	}
	if got.Offset[0] != got.Offset[1] || got.Offset[2] != got.Offset[3] {
		t.Errorf("ranks on one clock got different offsets: %v", got.Offset)
	}

	plain := Summarize(Analyze(recs))
	for name, steps := range map[string][]Step{
		"Analyze": Analyze(split, WithClockAlignment(), WithClockDomains(hosts)),
		"Sink":    sinkSteps(t, split, WithClockAlignment(), WithClockDomains(hosts)),
	} {
		sum := Summarize(steps)
		if !sum.Aligned || sum.Complete != plain.Complete || len(sum.Problems) != 0 {
			t.Errorf("%s: %d of %d steps complete (aligned %v), problems %q; on one clock %d complete", name, sum.Complete, len(steps), sum.Aligned, sum.Problems, plain.Complete)
		}
		if d := (sum.Collectives.MaxSkew - plain.Collectives.MaxSkew).Abs(); d > 2*jitter {
			t.Errorf("%s: max skew aligned %v, on one clock %v", name, sum.Collectives.MaxSkew, plain.Collectives.MaxSkew)
		}
	}

	cs := NewCallSink(WithClockAlignment(), WithClockDomains(hosts))
	cs.Consume(split)
	cs.Flush()
	sum := cs.Summary()
	if sum.Offsets == nil {
		t.Fatal("CallSink: no offsets")
	}
	// The CallSink's offsets are against each collective's median
	// departure: the two clocks' differ by the injected skew.
	o := sum.Offsets.Offset
	if o[0] != o[1] || o[2] != o[3] {
		t.Errorf("CallSink: ranks on one clock got different offsets: %v", o)
	}
	if e := (o[2] - o[0] - skew).Abs(); e > jitter {
		t.Errorf("CallSink: clocks %v apart, injected %v: off by %v, more than the jitter %v", o[2]-o[0], skew, e, jitter)
	}
}

// sinkSteps feeds recs to an online Sink and returns the steps it
// analysed.
func sinkSteps(t *testing.T, recs []profiler.Record, opts ...Option) []Step {
	t.Helper()
	var steps []Step
	s := NewSink(append(opts, WithStepFunc(func(st *Step) { steps = append(steps, *st) }))...)
	s.Consume(recs)
	s.Flush()
	return steps
}

// keepAll is the items the analysis keeps of recs.
func keepAll(recs []profiler.Record) []item {
	var its []item
	for i := range recs {
		if it, ok := keep(&recs[i]); ok {
			its = append(its, it)
		}
	}
	return its
}

// TestClockOnSendsAndReceives: a pp=2 job with no data parallelism has no
// collective at all; split over two hosts (rank 1's clock 2.5 ms ahead),
// its clocks are aligned on the activations and gradients the stages
// exchange, within how far apart a pair's two ends leave. Before, no
// step of such a run could be accounted on two clocks.
func TestClockOnSendsAndReceives(t *testing.T) {
	cfg := trainerShape(2, 2, 1, 4, 4, 16, 4, 4)
	recs := trainerRecords(t, "pp2", cfg)
	pairs := p2pDepartures(keepAll(recs))
	var spread time.Duration
	for _, d := range pairs {
		spread = max(spread, (d[0] - d[1]).Abs())
	}
	// 2 stages × 2 chunks: each microbatch crosses between the ranks
	// three times forward and three times backward, every step.
	if want := cfg.Steps * cfg.Microbatches * 2 * (cfg.Stages*cfg.Chunks - 1); len(pairs) != want {
		t.Fatalf("%d sends matched with their receives, want %d", len(pairs), want)
	}
	inject := map[int]time.Duration{1: 2500 * time.Microsecond}
	split := shifted(recs, inject)
	got := EstimateOffsets(split)
	t.Logf("pairs' spread %v; estimated %v, residual %v", spread, got.Offset, got.Residual)
	if len(got.Unaligned) != 0 || !slices.Equal(got.P2P, []int{1}) || got.Samples[1] != len(pairs) {
		t.Fatalf("unaligned %v, on sends and receives %v from %d pairs; want none, [1], %d", got.Unaligned, got.P2P, got.Samples[1], len(pairs))
	}
	if e := (got.Offset[1] - inject[1]).Abs(); e > spread {
		t.Errorf("rank 1: offset %v, injected %v: off by %v, more than the pairs' spread %v", got.Offset[1], inject[1], e, spread)
	}
	plain := Summarize(Analyze(recs))
	for name, steps := range map[string][]Step{
		"Analyze": Analyze(split, WithClockAlignment()),
		"Sink":    sinkSteps(t, split, WithClockAlignment()),
	} {
		sum := Summarize(steps)
		if sum.Complete != plain.Complete || len(sum.Problems) != 0 || !slices.Equal(sum.AlignedOnP2P, []int{1}) {
			t.Errorf("%s: %d complete (one clock: %d), problems %q, aligned on sends and receives %v", name, sum.Complete, plain.Complete, sum.Problems, sum.AlignedOnP2P)
		}
		var b strings.Builder
		if err := WriteReport(&b, sum); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "rank 1 on sends and receives, no collective joining its clock to the others'") {
			t.Errorf("%s: the report does not say rank 1 was aligned on sends and receives:\n%s", name, b.String())
		}
	}
}

// TestClockMinSamples: rank 1 shares 3 collectives with rank 0, rank 2
// shares 20 with rank 1 and none with rank 0. At a minimum of 8, rank 1
// cannot join, and rank 2, which could only join through it, stays out
// too; the reference keeps its clock. Without a minimum all three align.
func TestClockMinSamples(t *testing.T) {
	var b build
	for s := range 20 {
		o := float64(100 * s)
		for r := range 3 {
			b.step(r, s, r, o, o+50)
		}
		if s < 3 {
			b.coll(0, s, 0, "AllReduce", "a", 2, 0, -1, uint64(s), 1, o+1, o+10)
			b.coll(1, s, 1, "AllReduce", "a", 2, 1, -1, uint64(s), 1, o+2, o+10)
		}
		b.coll(1, s, 1, "AllReduce", "b", 2, 0, -1, uint64(s), 1, o+11, o+20)
		b.coll(2, s, 2, "AllReduce", "b", 2, 1, -1, uint64(s), 1, o+12, o+20)
	}
	inject := map[int]time.Duration{1: 3 * time.Millisecond, 2: 7 * time.Millisecond}
	recs := shifted(b.recs, inject)
	got := EstimateOffsets(recs, WithMinClockSamples(8))
	if got.Reference != 0 || !slices.Equal(got.Unaligned, []int{1, 2}) || got.Joined != 0 || got.MinSamples != 8 {
		t.Errorf("minimum 8: reference %d, unaligned %v, joined %d, minimum %d; want 0, [1 2], 0, 8", got.Reference, got.Unaligned, got.Joined, got.MinSamples)
	}
	if d, ok := got.Offset[0]; !ok || d != 0 {
		t.Errorf("minimum 8: the reference's offset %v (kept %v), want 0", d, ok)
	}
	want := "clock alignment: ranks 1, 2 share fewer than 8 complete collectives (or sends matched with their receives) with rank 0, directly or through other ranks; their clocks are left as recorded"
	if p := got.problems(); !slices.Equal(p, []string{want}) {
		t.Errorf("problems %q, want %q", p, want)
	}
	all := EstimateOffsets(recs)
	for r, w := range inject {
		if all.Offset[r] != w {
			t.Errorf("no minimum: rank %d offset %v, want %v", r, all.Offset[r], w)
		}
	}
	if all.Joined != 2 || len(all.Unaligned) != 0 {
		t.Errorf("no minimum: joined %d, unaligned %v; want 2 and none", all.Joined, all.Unaligned)
	}
}

// TestAppliedOffsetsSayWhatIsUnaligned: offsets estimated over a whole
// run and applied before the records come (WithAppliedOffsets) align rank
// 1 (20 collectives with rank 0) and leave rank 2 out (3 with rank 1, at
// a minimum of 8). The step sink leaves every step rank 2 is in out of
// its figures, saying why; the CallSink reports the offsets and the same
// problem.
func TestAppliedOffsetsSayWhatIsUnaligned(t *testing.T) {
	var b build
	for s := range 20 {
		o := float64(100 * s)
		for r := range 3 {
			b.step(r, s, r, o, o+50)
		}
		b.coll(0, s, 0, "AllReduce", "a", 2, 0, -1, uint64(s), 1, o+1, o+10)
		b.coll(1, s, 1, "AllReduce", "a", 2, 1, -1, uint64(s), 1, o+2, o+10)
		if s < 3 {
			b.coll(1, s, 1, "AllReduce", "b", 2, 0, -1, uint64(s), 1, o+11, o+20)
			b.coll(2, s, 2, "AllReduce", "b", 2, 1, -1, uint64(s), 1, o+12, o+20)
		}
	}
	recs := shifted(b.recs, map[int]time.Duration{1: 4 * time.Millisecond, 2: 9 * time.Millisecond})
	est := EstimateOffsets(recs, WithMinClockSamples(MinClockSamples))
	if est.Joined != 1 || est.Offset[1] != 4*time.Millisecond || !slices.Equal(est.Unaligned, []int{2}) {
		t.Fatalf("estimate: joined %d, offsets %v, unaligned %v; want 1, rank 1 at 4ms, [2]", est.Joined, est.Offset, est.Unaligned)
	}
	est.Apply(recs)
	want := "clock alignment: rank 2 shares fewer than 8 complete collectives (or sends matched with their receives) with rank 0, directly or through other ranks; its clock is left as recorded"
	steps := sinkSteps(t, recs, WithAppliedOffsets(est))
	sum := Summarize(steps)
	if len(steps) != 20 || sum.Complete != 0 || sum.ProblemSteps != 20 || !slices.ContainsFunc(sum.Problems, func(p string) bool { return strings.HasSuffix(p, want) }) {
		t.Errorf("steps %d, complete %d, with problems %d, problems %q; want 20 steps, each left out for %q", len(steps), sum.Complete, sum.ProblemSteps, sum.Problems, want)
	}
	cs := NewCallSink(WithAppliedOffsets(est))
	cs.Consume(recs)
	cs.Flush()
	cm := cs.Summary()
	if !cm.Aligned || cm.Offsets == nil || cm.Offsets.Offset[1] != 4*time.Millisecond || !slices.Contains(cm.Problems, want) {
		t.Errorf("CallSink: aligned %v, offsets %+v, problems %q; want rank 1's offset and %q", cm.Aligned, cm.Offsets, cm.Problems, want)
	}
}

// trainerShape is the default configuration with the given layout and
// sizes, on the backend the fidelity tests use (fidelityBackend).
func trainerShape(stages, chunks, replicas, microbatches, rows, width, layers, steps int) pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.Stages, cfg.Chunks, cfg.Replicas = stages, chunks, replicas
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers = microbatches, rows, width, layers
	cfg.Steps = steps
	return cfg
}

// trainerRecords trains cfg on the fidelity tests' backend, every pipeline
// action and collective device-timed, and returns the records.
func trainerRecords(t *testing.T, name string, cfg pipeline.Config) []profiler.Record {
	t.Helper()
	cfg.Backend = fidelityBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tape, _, err := trainrun.Run(ctx, trainrun.Layout{Name: name, Config: cfg, DeviceDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tape.Records()
}

// TestOneClock: ranks on one clock (a wrapped command's processes) are
// not shifted, though their departures differ. Three ranks' all-reduces
// as in TestCallSinkByHand (arrivals +0, +1, +4 ms), but rank 2 leaves
// each 1 ms after the others (+7): as recorded, ranks 0 and 1 wait 4 and
// 3 ms for it, 7 ms caused a call; aligned on departures, rank 2 would be
// moved 1 ms earlier and cause 5. WithOneClock overrides
// WithClockAlignment, and the report says the clock was one.
func TestOneClock(t *testing.T) {
	const n = 20
	var b build
	for k := range n {
		o := float64(10 * k)
		for r, at := range []float64{0, 1, 4} {
			end := o + 6
			if r == 2 {
				end++
			}
			b.coll(r, profiler.None, profiler.None, "AllReduce", "dp", 3, r, -1, uint64(k), 1, o+at, end)
		}
	}
	caused := func(sum Summary) time.Duration {
		for _, r := range sum.Ranks {
			if r.Rank == 2 {
				return r.Caused
			}
		}
		return -1
	}
	aligned := NewCallSink(WithClockAlignment())
	aligned.Consume(b.recs)
	// Aligned once rank 2 is in MinClockSamples collectives: the first 7
	// as recorded, the rest 1 ms earlier.
	if got, want := caused(aligned.Summary()), 7*d(7)+(n-7)*d(5); got != want {
		t.Fatalf("aligned: rank 2 caused %v, want %v: the case does not tell one clock from alignment", got, want)
	}
	for _, opts := range [][]Option{{WithOneClock()}, {WithClockAlignment(), WithOneClock()}, {WithOneClock(), WithClockAlignment()}} {
		s := NewCallSink(opts...)
		s.Consume(b.recs)
		sum := s.Summary()
		if got := caused(sum); got != n*d(7) || sum.Aligned || !sum.OneClock || sum.AlignAfter != 0 {
			t.Errorf("one clock: rank 2 caused %v (want %v), aligned %v, one clock %v, align after %d", got, n*d(7), sum.Aligned, sum.OneClock, sum.AlignAfter)
		}
		var w strings.Builder
		if err := WriteReport(&w, sum); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.String(), "clocks: every rank on one clock (one host's processes, or records aligned before), none shifted; departures from collectives against their median, by rank: 0 +0.000 ms 1 +0.000 ms 2 +1.000 ms;") {
			t.Errorf("report:\n%s", w.String())
		}
	}
	// A step analysis: TestConstructedStep's step, rank 1 leaving its
	// all-reduce 1 ms after rank 0; rank 0 still waited the 5 ms recorded.
	var sb build
	twoRanks(0, &sb)
	for i := range sb.recs {
		if r := &sb.recs[i]; r.Rank == 1 && r.Name == "AllReduce" {
			r.DeviceEnd += d(1)
		}
	}
	var steps []Step
	s := NewSink(WithClockAlignment(), WithOneClock(), WithStepFunc(func(st *Step) { steps = append(steps, *st) }))
	s.Consume(sb.recs)
	s.Flush()
	if len(steps) != 1 || steps[0].Clock != nil || steps[0].Ranks[0].Waited != d(5) {
		t.Fatalf("steps %+v: want one, unshifted, rank 0 waiting 5 ms", steps)
	}
	sum := s.Summary()
	var w strings.Builder
	if err := WriteReport(&w, sum); err != nil {
		t.Fatal(err)
	}
	if !sum.OneClock || !strings.Contains(w.String(), "\nclocks: every rank on one clock (one host's processes, or records aligned before), none shifted\n") {
		t.Errorf("summary one clock %v; report:\n%s", sum.OneClock, w.String())
	}
}

// TestClockJoinedByACollectiveIsNotOnSends: at a minimum of 2 samples,
// rank 1 joins rank 0 through two sends matched with their receives (it
// shares no collective with rank 0). Rank 2 then joins through two
// collectives: one with rank 0, one with rank 1. A collective joins rank
// 2's clock to the reference's directly, so only rank 1 was aligned on
// sends and receives.
func TestClockJoinedByACollectiveIsNotOnSends(t *testing.T) {
	var b build
	for r := range 3 {
		b.step(r, 0, r, 0, 100)
	}
	for k, at := range []float64{10, 20} {
		b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, uint64(k), 2, at, at+1)
		b.coll(1, 0, 1, "Recv", "pp", 2, 1, 0, uint64(k), 2, at, at+1)
	}
	b.coll(0, 0, 0, "AllReduce", "a", 2, 0, -1, 0, 3, 30, 40)
	b.coll(2, 0, 2, "AllReduce", "a", 2, 1, -1, 0, 3, 31, 40)
	b.coll(1, 0, 1, "AllReduce", "b", 2, 0, -1, 0, 3, 50, 60)
	b.coll(2, 0, 2, "AllReduce", "b", 2, 1, -1, 0, 3, 51, 60)
	for range 20 { // the collectives come out of a map: any order
		o := EstimateOffsets(b.recs, WithMinClockSamples(2))
		if len(o.Unaligned) != 0 || o.Joined != 2 || !slices.Equal(o.P2P, []int{1}) {
			t.Fatalf("unaligned %v, joined %d, aligned on sends and receives %v; want none, 2, [1]", o.Unaligned, o.Joined, o.P2P)
		}
	}
}

// TestClockOfALargeRankIsItsOwn: a rank's own clock is never taken for a
// clock domain's, whatever the rank's number. Ranks 0 and 1 share domain
// 0; rank 2^40, in no domain, runs 4 ms ahead and is aligned on its own.
func TestClockOfALargeRankIsItsOwn(t *testing.T) {
	const big = 1 << 40
	var b build
	for s := range 3 {
		o := float64(100 * s)
		for _, r := range []int{0, 1, big} {
			b.step(r, s, 0, o, o+50)
		}
		b.coll(0, s, 0, "AllReduce", "g", 3, 0, -1, uint64(s), 1, o+1, o+11)
		b.coll(1, s, 0, "AllReduce", "g", 3, 1, -1, uint64(s), 1, o+2, o+11)
		b.coll(big, s, 0, "AllReduce", "g", 3, 2, -1, uint64(s), 1, o+3, o+11)
	}
	inject := map[int]time.Duration{big: 4 * time.Millisecond}
	got := EstimateOffsets(shifted(b.recs, inject), WithClockDomains(map[int]int{0: 0, 1: 0}))
	for _, r := range []int{0, 1, big} {
		if got.Offset[r] != inject[r] {
			t.Errorf("rank %d: offset %v, want %v", r, got.Offset[r], inject[r])
		}
	}
}
