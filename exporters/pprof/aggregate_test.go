package pprof_test

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/internal/testmem"
	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
)

// sampleKey is a sample's stack (names, leaf first) and its labels other
// than the step, as text.
func sampleKey(s *profile.Sample) string {
	var b strings.Builder
	for _, l := range s.Location {
		b.WriteString(l.Line[0].Function.Name)
		b.WriteString(" ← ")
	}
	var labels []string
	for k, v := range s.Label {
		labels = append(labels, fmt.Sprintf("%s=%v", k, v))
	}
	for k, v := range s.NumLabel {
		if k != pprof.LabelStep {
			labels = append(labels, fmt.Sprintf("%s=%v", k, v))
		}
	}
	slices.Sort(labels)
	b.WriteString(strings.Join(labels, ","))
	return b.String()
}

// byStepless sums a profile's samples by sampleKey.
func byStepless(p *profile.Profile) map[string][3]int64 {
	out := map[string][3]int64{}
	for _, s := range p.Sample {
		k := sampleKey(s)
		v := out[k]
		for i := range v {
			v[i] += s.Value[i]
		}
		out[k] = v
	}
	return out
}

// checkAggregate compares an aggregate's profile with Build's over the
// records it was fed, samples summed over steps: the same samples and
// values, no step label, one sample per stack and label set, the same
// span of time.
func checkAggregate(t *testing.T, a *pprof.Aggregate, records []profiler.Record) *profile.Profile {
	t.Helper()
	got, err := a.Profile(pprof.WithEpoch(epoch))
	if err != nil {
		t.Fatal(err)
	}
	if err := got.CheckValid(); err != nil {
		t.Fatal(err)
	}
	want, err := pprof.Build(records, pprof.WithEpoch(epoch))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range got.Sample {
		if _, ok := s.NumLabel[pprof.LabelStep]; ok {
			t.Fatalf("sample %s has a step label", sampleKey(s))
		}
		if k := sampleKey(s); seen[k] {
			t.Fatalf("two samples for %s", k)
		} else {
			seen[k] = true
		}
	}
	g, w := byStepless(got), byStepless(want)
	if len(g) != len(w) {
		t.Errorf("%d samples, Build summed over steps has %d", len(g), len(w))
	}
	for k, wv := range w {
		if gv, ok := g[k]; !ok || gv != wv {
			t.Errorf("%s: values %v, Build's summed %v", k, gv, wv)
		}
	}
	if got.DurationNanos != want.DurationNanos || got.TimeNanos != want.TimeNanos {
		t.Errorf("duration %d at %d, Build's %d at %d", got.DurationNanos, got.TimeNanos, want.DurationNanos, want.TimeNanos)
	}
	if !slices.ContainsFunc(got.Comments, func(c string) bool { return strings.Contains(c, "no step label") }) {
		t.Errorf("comments %q do not say the step label is left out", got.Comments)
	}
	return got
}

// The aggregate registered as a sink on real runs gives Build's profile
// of the whole record list, summed over steps, and holds nothing back
// once the run is flushed.
func TestAggregateMatchesBuildOnTrainer(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			a := pprof.NewAggregate()
			tape, _, err := trainrun.Run(t.Context(), l, a)
			if err != nil {
				t.Fatal(err)
			}
			recs := tape.Records()
			got := checkAggregate(t, a, recs)
			// The whole run in fewer samples than records: the steps are
			// folded together.
			if len(got.Sample)*l.Config.Steps > len(recs) {
				t.Errorf("%d samples for %d records of %d steps", len(got.Sample), len(recs), l.Config.Steps)
			}
			st := a.Stats()
			if st.Records != uint64(len(recs)) || st.Waiting != 0 || st.Orphans != 0 {
				t.Errorf("stats %+v after %d records: want every record placed under its parent", st, len(recs))
			}
			// What Write writes is the profile.
			var buf bytes.Buffer
			ws, err := a.Write(&buf, pprof.WithEpoch(epoch))
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := profile.Parse(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if ws.Samples != len(got.Sample) || ws.Ranges != len(recs) || parsed.String() != got.String() {
				t.Errorf("Write: %+v, and the parsed profile differs from Profile's", ws)
			}
		})
	}
}

func TestAggregateMatchesBuildSynthetic(t *testing.T) {
	shape := synthtrace.Shape{Ranks: 2, Chunks: 1, Microbatches: 2, Layers: 1}
	g := synthtrace.NewGenerator(shape)
	// 2,000 steps pass the default window of 4 top-level ranges 500
	// times over (10,000 covered no more of Aggregate and took two
	// minutes under the race detector, mostly copying records); the
	// records are sized from the first step, not grown by append.
	recs := g.Step(nil)
	recs = slices.Grow(recs, 2000*len(recs))
	for range 2000 - 1 {
		recs = g.Step(recs)
	}
	byEnd := synthtrace.EndOrder(recs)
	cut := func(rs []profiler.Record, n int) [][]profiler.Record {
		var out [][]profiler.Record
		for i := 0; i < len(rs); i += n {
			out = append(out, rs[i:min(i+n, len(rs))])
		}
		return out
	}
	for name, batches := range map[string][][]profiler.Record{
		"parents first":      cut(recs, 1000),
		"children first":     cut(byEnd, 1000),
		"device a pass late": synthtrace.DeviceLater(byEnd, 100),
	} {
		t.Run(name, func(t *testing.T) {
			a := pprof.NewAggregate()
			fed := make([]profiler.Record, 0, len(recs))
			for _, b := range batches {
				a.Consume(b)
				fed = append(fed, b...)
			}
			checkAggregate(t, a, fed)
			if st := a.Stats(); st.Orphans != 0 || st.Waiting != 0 || st.Records != uint64(len(recs)) {
				t.Errorf("stats %+v: want all %d records placed under their parents", st, len(recs))
			}
		})
	}
}

// A record whose parent never comes (the recorder dropped it) starts a
// stack of its own, as in Build, once the window has passed, and is
// counted.
func TestAggregateMissingParents(t *testing.T) {
	g := synthtrace.NewGenerator(synthtrace.Shape{Ranks: 2, Chunks: 1, Microbatches: 2, Layers: 2})
	var recs []profiler.Record
	for range 40 {
		recs = g.Step(recs)
	}
	var kept []profiler.Record
	dropped := map[[2]uint64]bool{}
	for _, r := range synthtrace.EndOrder(recs) {
		// Drop every third forward range.
		if r.Name == "forward" && r.ID%3 == 0 {
			dropped[[2]uint64{uint64(r.Rank), r.ID}] = true
			continue
		}
		kept = append(kept, r)
	}
	orphans := 0
	for _, r := range kept {
		if dropped[[2]uint64{uint64(r.Rank), r.Parent}] {
			orphans++
		}
	}
	if orphans == 0 {
		t.Fatal("the test dropped no parent")
	}
	a := pprof.NewAggregate(pprof.WithWindow(2))
	for i := 0; i < len(kept); i += 50 {
		a.Consume(kept[i:min(i+50, len(kept))])
	}
	// The children of the last steps' dropped ranges still wait; the
	// others were placed at the root. Profile places the waiting ones
	// too, without changing the aggregate.
	st := a.Stats()
	if int(st.Orphans) >= orphans || st.Orphans == 0 || st.Waiting == 0 {
		t.Errorf("%d orphans and %d waiting; want some of the %d records without a parent placed, some waiting", st.Orphans, st.Waiting, orphans)
	}
	checkAggregate(t, a, kept)
	if again := a.Stats(); again != st {
		t.Errorf("Profile changed the aggregate: %+v, then %+v", st, again)
	}
	// Once a window of complete steps has passed, every one is placed.
	var more []profiler.Record
	for range 3 {
		more = g.Step(more)
	}
	more = synthtrace.EndOrder(more)
	a.Consume(more)
	if st := a.Stats(); int(st.Orphans) != orphans || st.Waiting != 0 {
		t.Errorf("%d orphans and %d waiting, want %d orphans and none waiting", st.Orphans, st.Waiting, orphans)
	}
	checkAggregate(t, a, append(kept, more...))
}

// Device ranges later than the window, a run-long top-level range that
// holds everything, cycles and duplicate IDs: the aggregate stays within
// its bounds, counts every record once and never panics.
func TestAggregateBounds(t *testing.T) {
	shape := synthtrace.Shape{Ranks: 1, Chunks: 1, Microbatches: 2, Layers: 1}
	t.Run("device later than the window", func(t *testing.T) {
		g := synthtrace.NewGenerator(shape)
		var held []profiler.Record
		a := pprof.NewAggregate(pprof.WithWindow(2))
		n := 0
		for range 20 {
			step := synthtrace.EndOrder(g.Step(nil))
			var host []profiler.Record
			for _, r := range step {
				if r.HasDevice {
					held = append(held, r)
				} else {
					host = append(host, r)
				}
			}
			a.Consume(host)
			n += len(step)
		}
		a.Consume(held) // every device range, 20 steps late
		for range 3 {   // and a window of steps as usual
			step := synthtrace.EndOrder(g.Step(nil))
			a.Consume(step)
			n += len(step)
		}
		st := a.Stats()
		if st.Records != uint64(n) || st.Orphans == 0 || st.Waiting != 0 {
			t.Errorf("stats %+v: want %d records, orphans counted, none waiting", st, n)
		}
		p, err := a.Profile()
		if err != nil {
			t.Fatal(err)
		}
		if total := sum(p, 2); total != int64(n) {
			t.Errorf("%d ranges in the profile, want %d", total, n)
		}
	})
	t.Run("run-long top-level range", func(t *testing.T) {
		const maxNodes = 64
		g := synthtrace.NewGenerator(shape)
		a := pprof.NewAggregate(pprof.WithMaxNodes(maxNodes))
		var last profiler.Record
		n := 0
		for range 50 {
			step := synthtrace.EndOrder(g.Step(nil))
			for i := range step {
				step[i].ID += 1 // make room for the run's range, ID 1
				if step[i].Parent == 0 {
					step[i].Parent = 1
				} else {
					step[i].Parent++
				}
				step[i].Depth++
			}
			last = step[len(step)-1]
			a.Consume(step)
			n += len(step)
			if st := a.Stats(); st.Waiting > maxNodes/2 || st.Waiting+st.Kept > maxNodes+1 {
				t.Fatalf("holding %d waiting and %d kept records, bound %d", st.Waiting, st.Kept, maxNodes)
			}
		}
		a.Consume([]profiler.Record{{ID: 1, Name: "train", HostStart: 0, HostEnd: last.HostEnd + 1}})
		p, err := a.Profile()
		if err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); sum(p, 2) != int64(n+1) || st.Orphans == 0 {
			t.Errorf("%d ranges in the profile, %d orphans; want %d ranges, orphans counted", sum(p, 2), st.Orphans, n+1)
		}
	})
	t.Run("malformed links", func(t *testing.T) {
		recs := []profiler.Record{
			{ID: 2, Parent: 3, Depth: 1, Name: "a", HostEnd: 5},
			{ID: 3, Parent: 2, Depth: 1, Name: "b", HostEnd: 5}, // a cycle
			{ID: 4, Parent: 4, Depth: 1, Name: "self", HostEnd: 5},
			{ID: 5, Name: "dup", HostEnd: 7},
			{ID: 5, Name: "dup", HostEnd: 9},
			{ID: 6, Parent: 5, Depth: 1, Name: "under dup", HostEnd: 1},
		}
		a := pprof.NewAggregate()
		a.Consume(recs)
		p, err := a.Profile()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckValid(); err != nil {
			t.Fatal(err)
		}
		if sum(p, 2) != int64(len(recs)) {
			t.Errorf("%d ranges in the profile, want %d", sum(p, 2), len(recs))
		}
	})
}

func sum(p *profile.Profile, value int) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[value]
	}
	return n
}

func TestAggregateEmpty(t *testing.T) {
	if _, err := pprof.NewAggregate().Profile(); err != pprof.ErrNoRecords {
		t.Errorf("empty aggregate: %v, want ErrNoRecords", err)
	}
}

// After 10,000 steps the aggregate holds what it held after 100: the
// same samples, no more records, and a live heap within a small constant.
func TestAggregateMemoryBounded(t *testing.T) {
	g := synthtrace.NewGenerator(synthtrace.TrainerShape(2, 0))
	a := pprof.NewAggregate()
	var step, buf []profiler.Record
	feed := func(n int) {
		for range n {
			step = g.Step(step[:0])
			buf = synthtrace.EndOrderInto(buf, step)
			a.Consume(buf)
		}
	}
	feed(100)
	heap100, st100 := testmem.LiveHeap(), a.Stats()
	feed(9900)
	heap10k, st10k := testmem.LiveHeap(), a.Stats()
	if st100.Samples != st10k.Samples || st10k.Kept > st100.Kept || st10k.Waiting > st100.Waiting {
		t.Errorf("after 100 steps %+v, after 10,000 %+v", st100, st10k)
	}
	const slack = 64 << 10
	if heap10k > heap100+slack {
		t.Errorf("live heap %d B after 100 steps, %d B after 10,000: grew by more than %d B", heap100, heap10k, slack)
	}
	t.Logf("live heap after 100 steps %d B, after 10,000 steps %d B; %+v", heap100, heap10k, st10k)
	runtime.KeepAlive(buf)
}

// Profile and Stats while another goroutine feeds records (the race
// detector watches the copy Profile works on).
func TestAggregateProfileWhileConsuming(t *testing.T) {
	recs := synthtrace.EndOrder(synthtrace.Trainer(2, 20))
	a := pprof.NewAggregate()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < len(recs); i += 100 {
			a.Consume(recs[i:min(i+100, len(recs))])
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if p, err := a.Profile(); err == nil {
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
		}
		_ = a.Stats()
	}
	checkAggregate(t, a, recs)
}

// Once warm, the aggregate allocates nothing per record: slots, map
// entries and queue space are reused.
func TestAggregateSteadyStateAllocs(t *testing.T) {
	g := synthtrace.NewGenerator(synthtrace.TrainerShape(2, 0))
	var steps [][]profiler.Record
	for range 1200 {
		steps = append(steps, synthtrace.EndOrder(g.Step(nil)))
	}
	a := pprof.NewAggregate()
	for _, st := range steps[:200] {
		a.Consume(st)
	}
	i := 200
	if n := testing.AllocsPerRun(900, func() { a.Consume(steps[i]); i++ }); n != 0 {
		t.Errorf("%v allocations per step of %d records, want 0", n, len(steps[0]))
	}
}

// The same records give the same file: records still waiting for a
// parent on several ranks are placed in rank order when the profile is
// written, not in map order.
func TestAggregateWriteDeterministic(t *testing.T) {
	var recs []profiler.Record
	for rank := range 16 {
		// A child whose parent (ID 99) never arrives, under a name of
		// its own, so each rank's placement makes a new stack and sample.
		recs = append(recs,
			profiler.Record{ID: 1, Parent: 99, Depth: 1, Name: fmt.Sprintf("op%d", rank), Rank: rank, Labels: profiler.NoLabels,
				HostStart: 0, HostEnd: 10},
			profiler.Record{ID: 2, Name: "step", Rank: rank, Labels: profiler.NoLabels, HostStart: 0, HostEnd: 100})
	}
	var first []byte
	for i := range 8 {
		a := pprof.NewAggregate()
		a.Consume(recs)
		var buf bytes.Buffer
		if _, err := a.Write(&buf, pprof.WithEpoch(epoch)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("write %d differs from the first for the same records", i)
		}
	}
}

// A record that waits for a parent that never comes, followed by ranges
// that are their own parents (malformed links, placed as top-level
// without counting as one) each with a child that arrives first: the
// aggregate's memory must not grow with those ranges, as WithMaxNodes
// documents.
func TestAggregateMemoryBoundedSelfParents(t *testing.T) {
	rec := func(id, parent uint64, name string) profiler.Record {
		return profiler.Record{ID: id, Parent: parent, Name: name, Labels: profiler.NoLabels, HostStart: 0, HostEnd: 10}
	}
	a := pprof.NewAggregate(pprof.WithMaxNodes(64))
	a.Consume([]profiler.Record{rec(1, 1<<40, "lost")})
	next := uint64(2)
	batch := make([]profiler.Record, 2)
	feed := func(n int) {
		for range n {
			batch[0] = rec(next, next+1, "child")
			batch[1] = rec(next+1, next+1, "self")
			next += 2
			a.Consume(batch)
		}
	}
	const first, more = 1000, 200_000
	feed(first)
	heapBefore := testmem.LiveHeap()
	feed(more)
	heapAfter := testmem.LiveHeap()
	const slack = 256 << 10 // the bug kept 8 B per pair: 1.6 MB here
	if heapAfter > heapBefore+slack {
		t.Errorf("live heap %d B after %d pairs, %d B after %d more: grew by more than %d B", heapBefore, first, heapAfter, more, slack)
	}
	p, err := a.Profile()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, s := range p.Sample {
		counts[sampleKey(s)] += s.Value[2]
	}
	want := map[string]int64{
		"lost ← rank=[0]":         1,
		"self ← rank=[0]":         first + more,
		"child ← self ← rank=[0]": first + more,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("ranges per sample: got %v, want %v", counts, want)
	}
}

// Records that reuse one ID (a malformed or merged source) beneath a
// run-long top-level range that arrived first: each is placed under it at
// once, no further top-level range ever arrives, and the ID map holds two
// entries however many arrive. The aggregate must still hold no more
// than WithMaxNodes records, as it documents, and count every record.
func TestAggregateMemoryBoundedDuplicateIDs(t *testing.T) {
	const maxNodes = 64
	a := pprof.NewAggregate(pprof.WithMaxNodes(maxNodes))
	a.Consume([]profiler.Record{{ID: 1, Name: "run", Labels: profiler.NoLabels, HostStart: 0, HostEnd: 10}})
	batch := []profiler.Record{{ID: 2, Parent: 1, Depth: 1, Name: "op", Labels: profiler.NoLabels, HostStart: 0, HostEnd: 1}}
	const first, more = 1000, 200_000
	for range first {
		a.Consume(batch)
	}
	heapBefore := testmem.LiveHeap()
	for range more {
		a.Consume(batch)
	}
	heapAfter := testmem.LiveHeap()
	const slack = 256 << 10 // about 90 B a record without the bound: 18 MB here
	if heapAfter > heapBefore+slack {
		t.Errorf("live heap %d B after %d records, %d B after %d more: grew by more than %d B", heapBefore, first, heapAfter, more, slack)
	}
	if st := a.Stats(); st.Waiting+st.Kept > maxNodes+1 || st.Records != 1+first+more {
		t.Errorf("stats %+v: want at most %d records held, %d consumed", st, maxNodes+1, 1+first+more)
	}
	p, err := a.Profile()
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(p, 2); got != 1+first+more {
		t.Errorf("%d ranges in the profile, want %d", got, 1+first+more)
	}
}
