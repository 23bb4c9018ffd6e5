package profiler_test

import (
	"cmp"
	"context"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
	trt "github.com/trainscope/trainscope/runtime"
)

// walkSummarize is the report's definition worked out the long way, from
// the whole record list: groups by rank and tag (ranks ascending, tags in
// order of first appearance), and a group's device total counts the
// device ranges none of whose ancestors, found through the parent links,
// has a device time. It does not read Record.DeviceNested.
func walkSummarize(records []profiler.Record, tagOf func(*profiler.Record) string) []profiler.Group {
	byID := indexByID(records)
	type key struct {
		rank int
		tag  string
	}
	var order []key
	groups := map[key]*profiler.Group{}
	names := map[key]map[string]*profiler.NameStats{}
	for i := range records {
		r := &records[i]
		k := key{r.Rank, tagOf(r)}
		g := groups[k]
		if g == nil {
			g = &profiler.Group{Rank: k.rank, Tag: k.tag}
			groups[k], names[k] = g, map[string]*profiler.NameStats{}
			order = append(order, k)
		}
		ns := names[k][r.Name]
		if ns == nil {
			ns = &profiler.NameStats{Name: r.Name}
			names[k][r.Name] = ns
		}
		ns.Count++
		ns.HostTotal += r.HostEnd - r.HostStart
		if r.HasDevice {
			ns.DeviceCount++
			ns.DeviceTotal += r.DeviceEnd - r.DeviceStart
			if !hasDeviceAncestor(byID, r) {
				g.DeviceTotal += r.DeviceEnd - r.DeviceStart
			}
		}
		if r.Depth == 0 {
			g.HostTotal += r.HostEnd - r.HostStart
		}
	}
	slices.SortStableFunc(order, func(a, b key) int { return cmp.Compare(a.rank, b.rank) })
	var out []profiler.Group
	for _, k := range order {
		g := *groups[k]
		for _, ns := range names[k] {
			n := *ns
			if g.HostTotal > 0 {
				n.HostPercent = 100 * float64(n.HostTotal) / float64(g.HostTotal)
			}
			if g.DeviceTotal > 0 {
				n.DevicePercent = 100 * float64(n.DeviceTotal) / float64(g.DeviceTotal)
			}
			g.Names = append(g.Names, n)
		}
		slices.SortFunc(g.Names, func(a, b profiler.NameStats) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, g)
	}
	return out
}

// recKey identifies a range: its rank and ID.
type recKey struct {
	rank int
	id   uint64
}

func indexByID(records []profiler.Record) map[recKey]*profiler.Record {
	byID := make(map[recKey]*profiler.Record, len(records))
	for i := range records {
		byID[recKey{records[i].Rank, records[i].ID}] = &records[i]
	}
	return byID
}

// hasDeviceAncestor walks r's parent links to the top, or to a parent
// that is not among the records.
func hasDeviceAncestor(byID map[recKey]*profiler.Record, r *profiler.Record) bool {
	for p := r.Parent; p != 0; {
		a, ok := byID[recKey{r.Rank, p}]
		if !ok {
			return false
		}
		if a.HasDevice {
			return true
		}
		p = a.Parent
	}
	return false
}

// tagOf is the report's grouping: the tag, else "step N", else "all".
func tagOf(r *profiler.Record) string {
	switch {
	case r.Tag != "":
		return r.Tag
	case r.Step >= 0:
		return "step " + strconv.Itoa(int(r.Step))
	}
	return "all"
}

func fixedTag(tag string) func(*profiler.Record) string {
	return func(*profiler.Record) string { return tag }
}

// sameGroups compares summaries: counts and durations exactly, shares
// within 1e-9.
func sameGroups(t *testing.T, what string, got, want []profiler.Group) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d groups, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Rank != w.Rank || g.Tag != w.Tag || g.HostTotal != w.HostTotal || g.DeviceTotal != w.DeviceTotal || len(g.Names) != len(w.Names) {
			t.Fatalf("%s: group %d is rank %d %q host %v device %v with %d names; want rank %d %q host %v device %v with %d names",
				what, i, g.Rank, g.Tag, g.HostTotal, g.DeviceTotal, len(g.Names), w.Rank, w.Tag, w.HostTotal, w.DeviceTotal, len(w.Names))
		}
		for j := range w.Names {
			a, b := g.Names[j], w.Names[j]
			if a.Name != b.Name || a.Count != b.Count || a.HostTotal != b.HostTotal || a.DeviceTotal != b.DeviceTotal || a.DeviceCount != b.DeviceCount ||
				math.Abs(a.HostPercent-b.HostPercent) > 1e-9 || math.Abs(a.DevicePercent-b.DevicePercent) > 1e-9 {
				t.Fatalf("%s: rank %d %q: got %+v, want %+v", what, g.Rank, g.Tag, a, b)
			}
		}
	}
}

// The recorder's DeviceNested is what the ancestor walk finds, on real
// runs: device depth 0 (kernels inside actions, sends inside send
// ranges) and 1 (actions timed, kernels on the host; collectives inside
// device ranges), one and two replicas.
func TestDeviceNestedMatchesAncestorWalk(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			tape, st, err := trainrun.Run(t.Context(), l)
			if err != nil {
				t.Fatal(err)
			}
			if st.Dropped != 0 || st.EventDrops != 0 || st.Errors != 0 {
				t.Fatalf("profiler lost ranges: %+v", st)
			}
			recs := tape.Records()
			byID := indexByID(recs)
			var nested, outer int
			for i := range recs {
				r := &recs[i]
				if !r.HasDevice {
					continue
				}
				if want := hasDeviceAncestor(byID, r); r.DeviceNested != want {
					t.Errorf("%s (rank %d, id %d, depth %d): DeviceNested %v, ancestor walk %v", r.Name, r.Rank, r.ID, r.Depth, r.DeviceNested, want)
				}
				if r.DeviceNested {
					nested++
				} else {
					outer++
				}
			}
			// Kernels inside actions at depth 0, the all-reduce inside its
			// range with two replicas; at depth 1 with one replica nothing
			// device-timed nests (a group's sends launch outside any range).
			if wantNested := l.DeviceDepth == 0 || l.Config.Replicas > 1; outer == 0 || (nested > 0) != wantNested {
				t.Errorf("%d nested and %d outermost device ranges; want nested ones: %v", nested, outer, wantNested)
			}
		})
	}
}

// Calls of a fused group are siblings: at top level none is nested, not
// even in the ones before it; inside a device range all are.
func TestGroupedDeviceNested(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := trt.Device{Type: trt.CPU, Index: 3}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 3)
	calls := []profiler.GroupedCollective{
		{Name: "Send", Stream: s, Collective: profiler.Collective{Op: "Send", Peer: 1, Root: -1}, Labels: profiler.NoLabels},
		{Name: "Recv", Stream: s, Collective: profiler.Collective{Op: "Recv", Peer: 1, Root: -1}, Labels: profiler.NoLabels},
	}
	launch := func() error { return nil }
	if err := r.Grouped(calls, launch); err != nil {
		t.Fatal(err)
	}
	r.StartDevice("send", s)
	if err := r.Grouped(calls, launch); err != nil {
		t.Fatal(err)
	}
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string][]bool{}
	for _, rec := range p.Snapshot() {
		if !rec.HasDevice {
			t.Fatalf("%s has no device time", rec.Name)
		}
		key := rec.Name
		if rec.Depth > 0 {
			key = "inner " + rec.Name
		}
		got[key] = append(got[key], rec.DeviceNested)
	}
	want := map[string][]bool{"Send": {false}, "Recv": {false}, "send": {false}, "inner Send": {true}, "inner Recv": {true}}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%s: DeviceNested %v, want %v", k, got[k], w)
		}
	}
}

// Summary registered as a sink on real runs equals the report computed
// from the whole record list, per step and for all steps at once.
func TestSummaryMatchesWholeRunOnTrainer(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			perStep, all := profiler.NewSummary(), profiler.NewSummary(profiler.WithSummaryTag("all steps"))
			tape, _, err := trainrun.Run(t.Context(), l, perStep, all)
			if err != nil {
				t.Fatal(err)
			}
			recs := tape.Records()
			if perStep.Records() != len(recs) || all.Records() != len(recs) {
				t.Fatalf("summaries counted %d and %d records, the sinks received %d", perStep.Records(), all.Records(), len(recs))
			}
			sameGroups(t, "per step", perStep.Groups(), walkSummarize(recs, tagOf))
			sameGroups(t, "all steps", all.Groups(), walkSummarize(recs, fixedTag("all steps")))
			if n := len(all.Groups()); n != 2*l.Config.Replicas {
				t.Errorf("%d all-steps groups, want one per rank (%d)", n, 2*l.Config.Replicas)
			}
			peaks := map[int]int64{}
			for _, r := range recs {
				if r.PeakMemory > peaks[r.Rank] {
					peaks[r.Rank] = r.PeakMemory
				}
			}
			got := all.Peaks()
			for rank, p := range peaks {
				if got[rank] != p {
					t.Errorf("rank %d: peak %d, want %d", rank, got[rank], p)
				}
			}
		})
	}
}

// syntheticOrders are the orders the summaries are fed a long synthetic
// run in: as generated (parents before their children), as a profiler
// collects host ranges (children first), and with every device range a
// batch after its neighbours.
func syntheticOrders(recs []profiler.Record) map[string][][]profiler.Record {
	byEnd := synthtrace.EndOrder(recs)
	cut := func(rs []profiler.Record, n int) [][]profiler.Record {
		var out [][]profiler.Record
		for i := 0; i < len(rs); i += n {
			out = append(out, rs[i:min(i+n, len(rs))])
		}
		return out
	}
	return map[string][][]profiler.Record{
		"parents first":      cut(recs, 1000),
		"children first":     cut(byEnd, 1000),
		"device a pass late": synthtrace.DeviceLater(byEnd, 100),
	}
}

func flatten(batches [][]profiler.Record) []profiler.Record {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	out := make([]profiler.Record, 0, n)
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// syntheticSteps is the length of the synthetic whole runs: 2,000 steps,
// some 100,000 records in batches of 1,000 and 100, cover every line of
// the summaries that 10,000 did, in a fifth of the time (most of it,
// under the race detector, the garbage collector's and the record
// copies').
const syntheticSteps = 2000

// smallShape is a trainer-shaped step of 26 records per rank, so that
// thousands of steps fit in a test's memory.
func smallShape(ranks, steps int) synthtrace.Shape {
	return synthtrace.Shape{Ranks: ranks, Steps: steps, Chunks: 1, Microbatches: 2, Layers: 1}
}

// stepMajor returns s's records step after step, ranks interleaved, as a
// run delivers them.
func stepMajor(s synthtrace.Shape) []profiler.Record {
	g := synthtrace.NewGenerator(s)
	recs := make([]profiler.Record, 0, s.Ranks*s.Steps*s.PerStep())
	for range s.Steps {
		recs = g.Step(recs)
	}
	return recs
}

func TestSummaryMatchesWholeRunSynthetic(t *testing.T) {
	recs := stepMajor(smallShape(2, syntheticSteps))
	for name, batches := range syntheticOrders(recs) {
		t.Run(name, func(t *testing.T) {
			perStep, all := profiler.NewSummary(), profiler.NewSummary(profiler.WithSummaryTag("all steps"))
			for _, b := range batches {
				perStep.Consume(b)
				all.Consume(b)
			}
			fed := flatten(batches)
			sameGroups(t, "all steps", all.Groups(), walkSummarize(fed, fixedTag("all steps")))
			sameGroups(t, "per step", perStep.Groups(), walkSummarize(fed, tagOf))
			if g := all.Groups(); len(g) != 2 || g[0].Names[0].Count == 0 {
				t.Fatalf("all-steps groups %v", g)
			}
		})
	}
}

// The issue the online summaries fix: with a record bound smaller than
// the run, the store keeps the first records only, and what is computed
// from it covers the first steps; the sinks cover every step.
func TestSummariesCoverRecordsBeyondTheStore(t *testing.T) {
	l := trainrun.Layouts()[0]
	l.Config.Steps, l.MaxRecords = 12, 1000
	all, steps := profiler.NewSummary(profiler.WithSummaryTag("all steps")), profiler.NewStepSummary()
	tape, st, kept, err := trainrun.RunSnapshot(t.Context(), l, all, steps)
	if err != nil {
		t.Fatal(err)
	}
	recs := tape.Records()
	if st.Overflow == 0 || len(kept) != 1000 || len(recs) != len(kept)+int(st.Overflow) {
		t.Fatalf("kept %d records, %d over the bound, sinks received %d: want the bound to cut the run", len(kept), st.Overflow, len(recs))
	}
	sameGroups(t, "all steps", all.Groups(), walkSummarize(recs, fixedTag("all steps")))
	got, whole, fromStore := steps.Breakdown(), profiler.StepBreakdown(recs), profiler.StepBreakdown(kept)
	if !reflect.DeepEqual(got, whole) || got[0].Steps != 12 {
		t.Errorf("step summary %+v, whole run %+v: want 12 steps per rank", got, whole)
	}
	// What the bound cuts depends on how the ranks and the collector were
	// scheduled: one rank may run all its steps ahead of the others, and
	// step ranges (host ranges) are delivered before device ranges whose
	// events are still to be resolved, so the store may hold every step
	// range but not the work inside them. Either way its breakdown is not
	// the run's.
	stored := 0
	for _, r := range fromStore {
		stored += r.Steps
	}
	if stored >= 12*len(whole) && reflect.DeepEqual(fromStore, whole) {
		t.Errorf("the store's breakdown (%d steps over %d ranks) is the whole run's: the bound did not cut the run", stored, len(whole))
	}
}
