package otel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// stepless is two ranks of a job that marks no steps: a step every
// 100 ms of three all-reduces on "dp", a transfer from rank 0 to rank 1
// on "pp" and a kernel on each rank. A record's ID is 1000·step + its
// place in the step (steps from 1), so the test knows each span's step.
func stepless(steps int) []profiler.Record {
	return steplessTimed(steps, func(int) time.Duration { return 100 * time.Millisecond })
}

// steplessTimed is stepless with step s taking took(s).
func steplessTimed(steps int, took func(s int) time.Duration) []profiler.Record {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	at := 100 * time.Millisecond
	for s := 1; s <= steps; s++ {
		for rank := range 2 {
			t0 := at + ms(0.3*float64(rank))
			add := func(j int, at time.Duration, c profiler.Collective) {
				kind := profiler.KindCollective
				if c.Peer >= 0 {
					kind = profiler.KindP2P
				}
				c.GroupSize, c.GroupRank = 2, int32(rank)
				recs = append(recs, profiler.Record{ID: uint64(1000*s + j), Name: c.Op, Kind: kind, Rank: rank,
					Labels: profiler.NoLabels, HostStart: at, HostEnd: at + ms(1), Collective: c})
			}
			for j := range 3 {
				add(j, t0+ms(float64(10*j)), profiler.Collective{Op: "AllReduce", Group: "dp", Bytes: int64(1 << (20 + j)),
					Peer: -1, Root: -1, Seq: uint64(3*(s-1) + j)})
			}
			c := profiler.Collective{Op: "Send", Group: "pp", Bytes: 4096, Peer: 1, Root: -1, Seq: uint64(s - 1)}
			if rank == 1 {
				c.Op, c.Peer = "Recv", 0
			}
			add(3, t0+ms(30), c)
			recs = append(recs, profiler.Record{ID: uint64(1000*s + 4), Name: "gemm", Kind: profiler.KindKernel, Rank: rank,
				Labels: profiler.NoLabels, HostStart: t0 + ms(5), HostEnd: t0 + ms(5), HasDevice: true,
				DeviceStart: t0 + ms(6), DeviceEnd: t0 + ms(9)})
		}
		at += took(s)
	}
	return recs
}

// keptAfterShutdown is an in-memory span exporter whose spans outlive
// its Shutdown (the SDK's forgets them there).
type keptAfterShutdown struct{ *tracetest.InMemoryExporter }

func (keptAfterShutdown) Shutdown(context.Context) error { return nil }

// feedCycles hands recs in batches of 7 to the cycle search and then the
// exporter, as profile-run adds them, and shuts the exporter down.
func feedCycles(t *testing.T, recs []profiler.Record, cycles *cycle.Sink, exp *otelexp.Exporter) {
	t.Helper()
	for i := 0; i < len(recs); i += 7 {
		b := recs[i:min(i+7, len(recs))]
		cycles.Consume(b)
		exp.Consume(b)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With Config.Cycles, a job that marks no steps gets a trace per cycle
// of its collectives: each holds that step's records of both ranks and
// nothing else, under a "cycle" span per rank that runs from the rank's
// first operation of the cycle to its first of the next, and carries
// training.cycle; the records that came before the cycle was found stay
// in the run-level trace.
func TestCycleTraces(t *testing.T) {
	const steps = 40
	ctx := context.Background()
	mem := tracetest.NewInMemoryExporter()
	cycles := cycle.NewSink(0)
	exp, err := otelexp.New(ctx, nil, otelexp.Config{Epoch: epoch, RunID: "cycles", Cycles: cycles}, otelexp.WithSpanExporter(keptAfterShutdown{mem}))
	if err != nil {
		t.Fatal(err)
	}
	feedCycles(t, stepless(steps), cycles, exp)
	type trc struct {
		steps     map[int64]int        // records by their step
		roots     map[int]trace.SpanID // rank → its cycle span
		rootSpans []tracetest.SpanStub
		recs      []tracetest.SpanStub
	}
	traces := map[trace.TraceID]*trc{}
	for _, s := range mem.GetSpans() {
		tid := s.SpanContext.TraceID()
		tr := traces[tid]
		if tr == nil {
			tr = &trc{steps: map[int64]int{}, roots: map[int]trace.SpanID{}}
			traces[tid] = tr
		}
		a := map[string]int64{}
		for _, kv := range s.Attributes {
			a[string(kv.Key)] = kv.Value.AsInt64()
		}
		if s.Name == otelexp.CycleSpanName {
			tr.roots[int(a[string(otelexp.KeyRank)])] = s.SpanContext.SpanID()
			tr.rootSpans = append(tr.rootSpans, s)
			continue
		}
		if strings.HasSuffix(s.Name, otelexp.DeviceSuffix) {
			continue // a device child (none here)
		}
		tr.steps[a[string(otelexp.KeyRangeID)]/1000]++
		tr.recs = append(tr.recs, s)
	}
	runLevel, cycleTraces, firstCycled := 0, 0, steps+1
	for _, tr := range traces {
		if len(tr.roots) == 0 {
			runLevel++
			for s := range tr.steps {
				if int(s) >= firstCycled {
					t.Errorf("step %d in the run-level trace after step %d had a cycle's", s, firstCycled)
				}
			}
			continue
		}
		cycleTraces++
		if len(tr.steps) != 1 {
			t.Errorf("a cycle's trace holds the records of steps %v, want one step's", tr.steps)
			continue
		}
		var step int64
		for s, n := range tr.steps {
			step = s
			if n != 10 {
				t.Errorf("step %d's trace holds %d of its 10 records", s, n)
			}
		}
		firstCycled = min(firstCycled, int(step))
		if len(tr.roots) != 2 || len(tr.rootSpans) != 2 {
			t.Errorf("step %d's trace has cycle spans of ranks %v (%d spans), want one each of 0 and 1", step, tr.roots, len(tr.rootSpans))
		}
		for _, root := range tr.rootSpans {
			var k, rank int64 = -1, -1
			for _, kv := range root.Attributes {
				switch kv.Key {
				case otelexp.KeyCycle:
					k = kv.Value.AsInt64()
				case otelexp.KeyRank:
					rank = kv.Value.AsInt64()
				}
			}
			if k != step-1 { // the all-reduces before step s: 3(s−1), s−1 cycles of three
				t.Errorf("step %d's cycle span on rank %d says cycle %d, want %d", step, rank, k, step-1)
			}
			start := root.StartTime.Sub(epoch)
			want := time.Duration(100*step)*time.Millisecond + time.Duration(rank)*300*time.Microsecond
			if start != want {
				t.Errorf("step %d's cycle span on rank %d starts at %v, want %v", step, rank, start, want)
			}
			if d := root.EndTime.Sub(root.StartTime); step < steps && d != 100*time.Millisecond {
				t.Errorf("step %d's cycle span on rank %d lasts %v, want 100ms (to the next step's first operation)", step, rank, d)
			}
			if root.Parent.IsValid() {
				t.Errorf("step %d's cycle span has a parent", step)
			}
		}
		for _, r := range tr.recs {
			var rank int64
			for _, kv := range r.Attributes {
				if kv.Key == otelexp.KeyRank {
					rank = kv.Value.AsInt64()
				}
			}
			if r.Parent.SpanID() != tr.roots[int(rank)] {
				t.Errorf("step %d: %s of rank %d is not a child of its rank's cycle span", step, r.Name, rank)
			}
		}
	}
	if runLevel != 1 {
		t.Errorf("%d traces without cycle spans, want the run-level one", runLevel)
	}
	// The cycle is found once a few steps lie TrackLag (1 s, 10 steps)
	// behind the latest operation.
	if firstCycled > 20 || cycleTraces != steps-firstCycled+1 {
		t.Errorf("cycle traces for steps %d to %d: %d traces; want every step from the 20th at the latest", firstCycled, steps, cycleTraces)
	}
	t.Logf("steps 1 to %d in the run-level trace, %d cycle traces", firstCycled-1, cycleTraces)
	st := exp.Stats()
	if st.Spans != st.Sampled+st.Unsampled+st.Deciding || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A job whose records carry steps keeps its step traces: from the first
// record with a step on, nothing is put in a cycle's trace.
func TestCycleTracesNotForSteppedJobs(t *testing.T) {
	ctx := context.Background()
	mem := tracetest.NewInMemoryExporter()
	cycles := cycle.NewSink(0)
	exp, err := otelexp.New(ctx, nil, otelexp.Config{Epoch: epoch, RunID: "stepped", Cycles: cycles}, otelexp.WithSpanExporter(keptAfterShutdown{mem}))
	if err != nil {
		t.Fatal(err)
	}
	recs := stepless(40)
	for i := range recs {
		recs[i].Step = int32(recs[i].ID / 1000)
	}
	feedCycles(t, recs, cycles, exp)
	for _, s := range mem.GetSpans() {
		if s.Name == otelexp.CycleSpanName {
			t.Fatalf("a cycle span in a job with steps")
		}
		for _, kv := range s.Attributes {
			if kv.Key == otelexp.KeyCycle {
				t.Fatalf("%s carries %s", s.Name, otelexp.KeyCycle)
			}
		}
	}
}

// Under the tail policy (a traceidratio sampler leaving cycles out), a
// job that marks no steps keeps its slowest cycles as a stepped job keeps
// its slowest steps: every stalled cycle's trace is exported whole, with
// both ranks' cycle spans, while most ordinary cycles are left out.
func TestCycleTracesTailKeepsStalls(t *testing.T) {
	const steps = 400
	stalled := func(s int) bool { return s >= 60 && s%40 == 0 }
	ctx := context.Background()
	mem := tracetest.NewInMemoryExporter()
	cycles := cycle.NewSink(0)
	exp, err := otelexp.New(ctx, nil, otelexp.Config{Epoch: epoch, RunID: "cycle-tail", Cycles: cycles,
		Sampler: otelexp.SamplerTraceIDRatio, SamplerArg: "0.1"}, otelexp.WithSpanExporter(keptAfterShutdown{mem}))
	if err != nil {
		t.Fatal(err)
	}
	recs := steplessTimed(steps, func(s int) time.Duration {
		if stalled(s) {
			return 400 * time.Millisecond
		}
		return 100 * time.Millisecond
	})
	feedCycles(t, recs, cycles, exp)
	roots := map[int64]int{}   // step → its cycle spans exported
	records := map[int64]int{} // step → its records exported in a cycle's trace
	inCycle := map[trace.TraceID]bool{}
	for _, s := range mem.GetSpans() {
		if s.Name == otelexp.CycleSpanName {
			inCycle[s.SpanContext.TraceID()] = true
			for _, kv := range s.Attributes {
				if kv.Key == otelexp.KeyCycle {
					roots[kv.Value.AsInt64()+1]++ // cycle s−1 is step s
				}
			}
		}
	}
	for _, s := range mem.GetSpans() {
		if s.Name == otelexp.CycleSpanName || !inCycle[s.SpanContext.TraceID()] {
			continue
		}
		for _, kv := range s.Attributes {
			if kv.Key == otelexp.KeyRangeID {
				records[kv.Value.AsInt64()/1000]++
			}
		}
	}
	for s := 60; s <= steps; s++ {
		if stalled(s) && s < steps && (roots[int64(s)] != 2 || records[int64(s)] != 10) {
			t.Errorf("stalled step %d: %d cycle spans and %d records exported, want 2 and 10", s, roots[int64(s)], records[int64(s)])
		}
	}
	if len(roots) > steps/3 {
		t.Errorf("%d of %d cycles exported with a ratio of 0.1 and the tail policy", len(roots), steps)
	}
	for s, n := range roots {
		if n != 2 || records[s] != 10 && s < steps {
			t.Errorf("step %d exported with %d cycle spans and %d records, want whole", s, n, records[s])
		}
	}
	st := exp.Stats()
	if st.Spans != st.Sampled+st.Unsampled+st.Deciding || st.Deciding != 0 || st.KeptSlow == 0 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d cycles exported of %d; kept slow %d, first %d", len(roots), steps, st.KeptSlow, st.KeptFirst)
}
