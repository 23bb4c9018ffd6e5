package analysis

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

const ms_ = time.Millisecond

// build makes records by hand: every interval in milliseconds.
type build struct {
	recs []profiler.Record
	ids  map[int]uint64
}

func (b *build) add(r profiler.Record) *profiler.Record {
	if b.ids == nil {
		b.ids = map[int]uint64{}
	}
	b.ids[r.Rank]++
	r.ID = b.ids[r.Rank]
	r.Device = runtime.Device{Type: runtime.CPU, Index: r.Rank}
	b.recs = append(b.recs, r)
	return &b.recs[len(b.recs)-1]
}

func labels(step, stage, chunk, mb int, ph profiler.Phase) profiler.Labels {
	return profiler.Labels{Step: int32(step), Stage: int16(stage), Chunk: int16(chunk), Microbatch: int32(mb), Phase: ph}
}

func (b *build) step(rank, step, stage int, from, to float64) {
	l := labels(step, stage, profiler.None, profiler.None, profiler.PhaseNone)
	b.add(profiler.Record{Name: profiler.StepName, Rank: rank, Labels: l, HostStart: d(from), HostEnd: d(to)})
}

// dev adds a device range of phase ph on stream.
func (b *build) dev(rank, step, stage, chunk, mb int, ph profiler.Phase, stream uint64, from, to float64) {
	b.add(profiler.Record{Name: ph.String(), Depth: 1, Kind: profiler.KindDevice, Rank: rank, Stream: stream,
		Labels: labels(step, stage, chunk, mb, ph), HostStart: d(from), HostEnd: d(from),
		HasDevice: true, DeviceStart: d(from), DeviceEnd: d(to)})
}

// coll adds a collective (or p2p, for Send and Recv) on stream.
func (b *build) coll(rank, step, stage int, op, group string, size, grank, peer int, seq uint64, stream uint64, from, to float64) {
	kind := profiler.KindCollective
	if op == "Send" || op == "Recv" {
		kind = profiler.KindP2P
	}
	b.add(profiler.Record{Name: op, Depth: 2, Kind: kind, Rank: rank, Stream: stream,
		Labels: labels(step, stage, profiler.None, profiler.None, profiler.Comm), HostStart: d(from), HostEnd: d(from),
		HasDevice: true, DeviceStart: d(from), DeviceEnd: d(to),
		Collective: profiler.Collective{Op: op, Group: group, GroupSize: int32(size), GroupRank: int32(grank), Peer: int32(peer), Root: -1, Seq: seq}})
}

func d(msec float64) time.Duration { return time.Duration(msec * float64(time.Millisecond)) }

// twoRanks is one step of two stages whose figures are worked out by
// hand in TestConstructedStep.
func twoRanks(step int, b *build) {
	o := float64(step * 1000)
	// Rank 0, stage 0: compute stream 1, communication stream 2.
	b.step(0, step, 0, o+0, o+100)
	b.dev(0, step, 0, 0, 0, profiler.Forward, 1, o+10, o+20)
	b.dev(0, step, 0, 1, 0, profiler.Comm, 1, o+45, o+55) // a wait for the gradient
	b.dev(0, step, 0, 1, 0, profiler.Backward, 1, o+50, o+70)
	b.dev(0, step, 0, profiler.None, profiler.None, profiler.Optimizer, 1, o+85, o+95)
	b.coll(0, step, 0, "AllReduce", "dp", 2, 0, -1, uint64(7+step), 2, o+80, o+90)
	b.coll(0, step, 0, "Send", "pp", 2, 0, 1, uint64(2*step), 2, o+20, o+21)
	// Rank 1, stage 1: compute stream 3, communication stream 4.
	b.step(1, step, 1, o+0, o+100)
	b.dev(1, step, 1, 0, 0, profiler.Forward, 3, o+25, o+35)
	b.dev(1, step, 1, 1, 0, profiler.Backward, 3, o+35, o+50)
	b.coll(1, step, 1, "AllReduce", "dp", 2, 1, -1, uint64(7+step), 4, o+85, o+90)
	b.coll(1, step, 1, "Recv", "pp", 2, 1, 0, uint64(5*step), 4, o+15, o+21)
}

func TestConstructedStep(t *testing.T) {
	var b build
	twoRanks(0, &b)
	steps := Analyze(b.recs)
	if len(steps) != 1 {
		t.Fatalf("%d steps, want 1", len(steps))
	}
	st := steps[0]
	if !st.Complete() {
		t.Fatalf("problems: %q", st.Problems)
	}
	if st.Span != (profiler.Interval{Start: d(10), End: d(70)}) {
		t.Errorf("span %v, want [10ms, 70ms)", st.Span)
	}
	if p := st.Pipeline; p.Stages != 2 || p.Chunks != 2 || p.Microbatches != 1 || math.Abs(p.Ideal-1.0/3) > 1e-12 {
		t.Errorf("pipeline %+v, want 2×2×1 with ideal 1/3", p)
	}
	r0, r1 := st.Ranks[0], st.Ranks[1]
	// Rank 0 computes [10,20) and the backward [50,70) less the wait
	// [45,55) on its stream, and the optimizer [85,95).
	want := []struct {
		name      string
		got, want time.Duration
	}{
		{"rank 0 busy", r0.Busy, d(10 + 15 + 10)},
		{"rank 0 comm", r0.Comm, d(10 + 1)},
		{"rank 0 overlap", r0.Overlap, d(5)},
		{"rank 0 bubble", r0.Bubble, d(60 - 25)},
		{"rank 0 chunk 1 bubble", r0.Chunks[1], d(35)},
		{"rank 0 chunk 0 bubble", r0.Chunks[0], 0},
		{"rank 0 drain", r0.Drain, 0},
		{"rank 0 waited", r0.Waited, d(5)},
		{"rank 1 busy", r1.Busy, d(25)},
		{"rank 1 bubble", r1.Bubble, d(35)},
		{"rank 1 chunk 0 bubble", r1.Chunks[0], d(15)},
		{"rank 1 drain", r1.Drain, d(20)},
		{"rank 1 caused", r1.Caused, d(5)},
		{"rank 1 held up", r1.HeldUp, d(5)},
		{"stage 0 bubble", st.Stages[0].Bubble, d(35)},
		{"stage 1 bubble", st.Stages[1].Bubble, d(35)},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("%s = %v, want %v", w.name, w.got, w.want)
		}
	}
	if len(r0.Streams) != 2 {
		t.Fatalf("rank 0 streams %+v, want 2", r0.Streams)
	}
	if s := r0.Streams[0]; s.Stream != 1 || s.Compute != d(35) || s.Wait != d(10) || s.Transfer != 0 {
		t.Errorf("rank 0 stream 1 %+v, want compute 35ms, wait 10ms", s)
	}
	if s := r0.Streams[1]; s.Stream != 2 || s.Compute != 0 || s.Transfer != d(11) {
		t.Errorf("rank 0 stream 2 %+v, want transfer 11ms", s)
	}
	if len(st.Collectives) != 1 {
		t.Fatalf("collectives %+v, want 1", st.Collectives)
	}
	c := st.Collectives[0]
	if !c.Complete || c.Skew != d(5) || c.Last != 1 || c.Transfer != d(5) {
		t.Errorf("collective %+v, want complete, skew 5ms, last rank 1, transfer 5ms", c)
	}
	if st.P2P != (P2P{Matched: 1}) {
		t.Errorf("p2p %+v, want one matched pair", st.P2P)
	}
	if r1.Score != 1 || r0.Score != 0 || st.Straggler != 1 {
		t.Errorf("scores %v %v, straggler %d; want 0, 1 and rank 1", r0.Score, r1.Score, st.Straggler)
	}
	// The busy time is the step breakdown's, by the one definition.
	for _, rs := range profiler.StepBreakdown(b.recs) {
		if got := st.Ranks[rs.Rank].Busy; got != rs.Busy {
			t.Errorf("rank %d: busy %v, StepBreakdown %v", rs.Rank, got, rs.Busy)
		}
	}
}

func TestBadInput(t *testing.T) {
	drop := func(recs []profiler.Record, bad func(*profiler.Record) bool) []profiler.Record {
		var out []profiler.Record
		for _, r := range recs {
			if !bad(&r) {
				out = append(out, r)
			}
		}
		return out
	}
	var full build
	twoRanks(0, &full)
	twoRanks(1, &full)
	cases := []struct {
		name    string
		recs    []profiler.Record
		problem string // in step 1
	}{
		{"missing rank", drop(full.recs, func(r *profiler.Record) bool { return r.Step == 1 && r.Rank == 1 }), "no records of rank 1"},
		{"unmatched collective", drop(full.recs, func(r *profiler.Record) bool {
			return r.Step == 1 && r.Rank == 1 && r.Collective.Op == "AllReduce"
		}), "1 of 2 ranks recorded it"},
		{"step cut short", drop(full.recs, func(r *profiler.Record) bool {
			return r.Step == 1 && r.Rank == 1 && r.Name == profiler.StepName
		}), "rank 1: no step range"},
		{"unmatched transfer", drop(full.recs, func(r *profiler.Record) bool {
			return r.Step == 1 && r.Collective.Op == "Recv"
		}), "1 point-to-point transfers without their other side"},
		{"mismatched op", func() []profiler.Record {
			recs := append([]profiler.Record(nil), full.recs...)
			for i := range recs {
				if recs[i].Step == 1 && recs[i].Rank == 1 && recs[i].Collective.Op == "AllReduce" {
					recs[i].Collective.Op = "AllGather"
				}
			}
			return recs
		}(), "rank 1 called AllGather, others AllReduce"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			steps := Analyze(tc.recs)
			if len(steps) != 2 {
				t.Fatalf("%d steps, want 2", len(steps))
			}
			if !steps[0].Complete() {
				t.Errorf("step 0 has problems %q", steps[0].Problems)
			}
			if steps[1].Complete() || !strings.Contains(strings.Join(steps[1].Problems, "\n"), tc.problem) {
				t.Errorf("step 1 problems %q, want one saying %q", steps[1].Problems, tc.problem)
			}
			sum := Summarize(steps)
			if sum.Complete != 1 || sum.ProblemSteps != 1 {
				t.Errorf("summary: %d complete, %d with problems; want 1 and 1", sum.Complete, sum.ProblemSteps)
			}
			// The figures are step 0's alone.
			for _, r := range sum.Ranks {
				if r.Steps != 1 {
					t.Errorf("rank %d counted in %d steps, want 1", r.Rank, r.Steps)
				}
			}
			var buf bytes.Buffer
			if err := WriteReport(&buf, sum); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), tc.problem) || !strings.Contains(buf.String(), "1 of 2 steps complete") {
				t.Errorf("report does not say %q and that 1 of 2 steps is complete:\n%s", tc.problem, buf.String())
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	if steps := Analyze(nil); len(steps) != 0 {
		t.Errorf("Analyze(nil) = %d steps", len(steps))
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, Summarize(nil)); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "0 of 0 steps complete\n" {
		t.Errorf("report of nothing: %q", got)
	}
}

// FuzzAnalyze feeds records made from arbitrary bytes: the analysis must
// not panic, and what it calls complete must be self-consistent.
func FuzzAnalyze(f *testing.F) {
	var b build
	twoRanks(0, &b)
	f.Add(encodeRecords(b.recs))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := decodeRecords(data)
		for _, st := range Analyze(recs) {
			checkStep(t, &st)
		}
		for _, st := range Analyze(recs, WithClockAlignment()) {
			checkStep(t, &st)
		}
		s := NewSink(WithMaxRecords(8), WithMaxOpenSteps(2), WithStepDelay(1))
		s.Consume(recs)
		s.Flush()
		var buf bytes.Buffer
		if err := WriteReport(&buf, s.Summary()); err != nil {
			t.Fatal(err)
		}
		// Without steps, as a wrapped run's records: every collective is
		// decided once, and nothing stays held.
		colls := 0
		for i := range recs {
			if recs[i].Kind == profiler.KindCollective {
				colls++
			}
		}
		for _, cs := range []*CallSink{NewCallSink(WithClockAlignment()), NewCallSink(WithMaxRecords(3))} {
			cs.Consume(recs[:len(recs)/2])
			cs.Consume(recs[len(recs)/2:])
			cs.Flush()
			st, sum := cs.Stats(), cs.Summary()
			if st.Matched+st.Incomplete > colls || st.Matched != sum.Collectives.Matched || cs.held != 0 || len(cs.open) != 0 {
				t.Fatalf("%d collective records: %+v decided, summary %+v, %d held", colls, st, sum.Collectives, cs.held)
			}
			if err := WriteReport(&buf, sum); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func checkStep(t *testing.T, st *Step) {
	t.Helper()
	var total float64
	for _, r := range st.Ranks {
		if r.Busy < 0 || r.Busy > r.Wall.Len() || r.Overlap > r.Comm || r.Overlap > r.Busy {
			t.Fatalf("step %d rank %d: busy %v of wall %v, overlap %v of comm %v", st.Step, r.Rank, r.Busy, r.Wall.Len(), r.Overlap, r.Comm)
		}
		if st.Pipeline.Stages == 0 && (r.Bubble != 0 || len(st.Stages) != 0) {
			// No stage label on any rank's work: no pipeline, no bubble.
			t.Fatalf("step %d rank %d: bubble %v, %d stages without a stage label", st.Step, r.Rank, r.Bubble, len(st.Stages))
		}
		if r.Bubble < 0 || r.Bubble > st.Span.Len() {
			t.Fatalf("step %d rank %d: bubble %v outside span %v", st.Step, r.Rank, r.Bubble, st.Span.Len())
		}
		var chunks time.Duration
		for _, c := range r.Chunks {
			chunks += c
		}
		// Split by chunk where the computation has chunk labels, else
		// not split at all.
		if len(r.Chunks) > 0 && chunks+r.Drain != r.Bubble || len(r.Chunks) == 0 && r.Drain != 0 {
			t.Fatalf("step %d rank %d: chunks %v (%d) + drain %v != bubble %v", st.Step, r.Rank, chunks, len(r.Chunks), r.Drain, r.Bubble)
		}
		total += r.Score
	}
	if total > 1+1e-9 {
		t.Fatalf("step %d: scores sum to %v", st.Step, total)
	}
}

// encodeRecords and decodeRecords map records to bytes and back, 16 bytes
// a record, for the fuzz corpus.
func encodeRecords(recs []profiler.Record) []byte {
	var out []byte
	for _, r := range recs {
		op := byte(0)
		switch r.Collective.Op {
		case "AllReduce":
			op = 1
		case "Send":
			op = 2
		case "Recv":
			op = 3
		}
		top := byte(0)
		if r.Name == profiler.StepName {
			top = 1
		}
		out = append(out, byte(r.Rank), byte(r.Step), byte(r.Stage), byte(r.Chunk), byte(r.Microbatch), byte(r.Phase),
			byte(r.Kind)|top<<4, byte(r.Stream), op, byte(r.Collective.Seq), byte(r.Collective.GroupSize), byte(r.Collective.Peer),
			byte(r.HostStart/ms_), byte(r.HostEnd/ms_), byte(r.DeviceStart/ms_), byte(r.DeviceEnd/ms_))
	}
	return out
}

func decodeRecords(data []byte) []profiler.Record {
	var out []profiler.Record
	ids := map[int]uint64{}
	for ; len(data) >= 16; data = data[16:] {
		x := data[:16]
		rank := int(x[0] % 5)
		ids[rank]++
		r := profiler.Record{ID: ids[rank], Rank: rank, Name: "r", Depth: 1,
			Labels: profiler.Labels{Step: int32(x[1]%4) - 1, Stage: int16(x[2]%4) - 1, Chunk: int16(x[3]%4) - 1, Microbatch: int32(x[4]%5) - 1, Phase: profiler.Phase(x[5] % 6)},
			Kind:   profiler.Kind(x[6] % 4), Stream: uint64(x[7] % 4),
			HostStart: time.Duration(x[12]) * ms_, HostEnd: time.Duration(x[13]) * ms_}
		if x[6]>>4&1 == 1 {
			r.Name, r.Depth = profiler.StepName, 0
		}
		if r.Kind != profiler.KindHost {
			r.HasDevice = x[14] <= x[15] || x[7]&8 != 0 // inverted intervals too
			r.DeviceStart, r.DeviceEnd = time.Duration(x[14])*ms_, time.Duration(x[15])*ms_
		}
		if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
			r.Collective = profiler.Collective{Op: [...]string{"AllReduce", "AllReduce", "Send", "Recv"}[x[8]%4], Group: "g",
				Seq: uint64(x[9] % 8), GroupSize: int32(x[10] % 4), GroupRank: int32(x[0] % 4), Peer: int32(x[11] % 4)}
		}
		out = append(out, r)
	}
	return out
}

// TestTransferOutlastsKernel: a send over a network transport whose
// kernel stops at 21 ms while NCCL's proxy moves its data until 30 ms.
// Communication lasts to the transfer's end and overlaps the backward
// computation that started at 25 ms; busy time keeps the kernel's
// interval. Figures worked by hand.
func TestTransferOutlastsKernel(t *testing.T) {
	var b build
	b.step(0, 0, 0, 0, 100)
	b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 10, 20)
	b.coll(0, 0, 0, "Send", "pp", 2, 0, 1, 0, 2, 20, 21)
	b.recs[len(b.recs)-1].Collective.TransferEnd = d(30)
	b.dev(0, 0, 0, 0, 0, profiler.Backward, 1, 25, 45)
	b.step(1, 0, 1, 0, 100)
	b.coll(1, 0, 1, "Recv", "pp", 2, 1, 0, 0, 4, 15, 30)
	b.dev(1, 0, 1, 0, 0, profiler.Forward, 3, 30, 40)
	b.dev(1, 0, 1, 0, 0, profiler.Backward, 3, 40, 50)

	check := func(t *testing.T, recs []profiler.Record) {
		t.Helper()
		steps := Analyze(recs)
		if len(steps) != 1 || len(steps[0].Ranks) != 2 {
			t.Fatalf("steps %+v, want one of two ranks", steps)
		}
		r0 := steps[0].Ranks[0]
		if r0.Busy != d(30) || r0.Comm != d(10) || r0.Overlap != d(5) {
			t.Errorf("rank 0 busy %v comm %v overlap %v, want 30ms, 10ms (20 to 30), 5ms (25 to 30)", r0.Busy, r0.Comm, r0.Overlap)
		}
		if len(r0.Streams) != 2 || r0.Streams[1].Transfer != d(1) {
			t.Errorf("rank 0 streams %+v, want the send's stream to hold 1ms of transfer", r0.Streams)
		}
		var transfer time.Duration
		for _, s := range r0.Time {
			if s.Use == UseTransfer {
				transfer += s.Time
			}
		}
		if transfer != d(5) {
			t.Errorf("rank 0 time in transfer alone %v, want 5ms (20 to 25)", transfer)
		}
		for _, rs := range profiler.StepBreakdown(recs) {
			if got := steps[0].Ranks[rs.Rank].Busy; got != rs.Busy {
				t.Errorf("rank %d: busy %v, StepBreakdown %v", rs.Rank, got, rs.Busy)
			}
		}
	}
	t.Run("as recorded", func(t *testing.T) { check(t, b.recs) })
	// Offsets.Apply moves the transfer's end with the rest of the record.
	t.Run("shifted back", func(t *testing.T) {
		recs := append([]profiler.Record(nil), b.recs...)
		for i := range recs {
			if recs[i].Rank != 0 {
				continue
			}
			r := &recs[i]
			r.HostStart += d(7)
			r.HostEnd += d(7)
			if r.HasDevice {
				r.DeviceStart += d(7)
				r.DeviceEnd += d(7)
			}
			if r.Collective.TransferEnd != 0 {
				r.Collective.TransferEnd += d(7)
			}
		}
		o := Offsets{Offset: map[int]time.Duration{0: d(7)}}
		o.Apply(recs)
		check(t, recs)
	})
}

// TestKernelBubbles: a wrapped pipeline's step, its kernels carrying
// their rank's stage and no phase. The span runs from the step's first
// kernel on any rank (10 ms) to its last (95 ms), 85 ms; stage 0's
// kernels cover 20 + 10 + 10 ms of it (bubble 45 ms), stage 1's 20 + 25
// (bubble 40 ms). There is no chunk or microbatch, so no ideal and no
// split by chunk. The same kernels without a stage (a job with no
// pipeline communicator) have no bubbles at all.
func TestKernelBubbles(t *testing.T) {
	records := func(stage func(rank int) int) []profiler.Record {
		var b build
		kernel := func(rank int, from, to float64) {
			b.add(profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: 7,
				Labels: labels(0, stage(rank), profiler.None, profiler.None, profiler.PhaseNone), HostStart: d(from), HostEnd: d(from),
				HasDevice: true, DeviceStart: d(from), DeviceEnd: d(to)})
		}
		for r := range 2 {
			b.step(r, 0, stage(r), 0, 100)
		}
		kernel(0, 10, 30)
		kernel(0, 50, 60)
		kernel(0, 80, 90)
		kernel(1, 20, 40)
		kernel(1, 70, 95)
		return b.recs
	}
	steps := Analyze(records(func(r int) int { return r }))
	if len(steps) != 1 {
		t.Fatalf("%d steps", len(steps))
	}
	st := steps[0]
	if st.Span.Start != d(10) || st.Span.End != d(95) {
		t.Errorf("span %v–%v, want 10ms–95ms", st.Span.Start, st.Span.End)
	}
	want := map[int]time.Duration{0: d(45), 1: d(40)}
	if len(st.Stages) != 2 {
		t.Fatalf("stages %+v", st.Stages)
	}
	for _, s := range st.Stages {
		if s.Bubble != want[s.Stage] || len(s.Chunks) != 0 || s.Drain != 0 {
			t.Errorf("stage %d: bubble %v, chunks %v, drain %v; want %v, none, 0", s.Stage, s.Bubble, s.Chunks, s.Drain, want[s.Stage])
		}
	}
	if p := st.Pipeline; p.Stages != 2 || p.Chunks != 0 || p.Microbatches != 0 || !math.IsNaN(p.Ideal) {
		t.Errorf("pipeline %+v, want 2 stages, no chunk, no microbatch, no ideal", p)
	}
	var report strings.Builder
	if err := WriteReport(&report, Summarize(steps)); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		// One step: its figures are said to rest on few.
		"1 of 1 step complete (few: a first step carries warm-up work, first launches and allocations, and one step's figures are not a run's; more steps give steadier ones)\n",
		"pipeline: 2 stages; the work carries no chunk or microbatch (traced kernels outside any range named as forward or backward work), so there is no ideal bubble to compare with",
		"(bubble: the span's time with no forward or backward computation, transfers and the optimizer included; a pprof profile's [idle: bubble] frame is the part of it with nothing running)\n",
		"Stage  Ranks×steps  Compute/step(ms)  Bubble/step(ms)  Bubble %\n",
		"0            1            40.000           45.000      52.9\n",
		"1            1            45.000           40.000      47.1\n",
		// 45 ms leads 40 by 1/9, more than 5%; the mean is 42.5 ms.
		"stage balance (computation per step within the span): stage 1 the most, 45.000 ms; the next and least, stage 0, 40.000 ms (11.1% less); the mean 42.500 ms — a pipeline goes at its slowest stage's pace: the others wait for stage 1, and spreading the work evenly over the stages would save about 2.500 ms a step (the most less the mean)\n",
		"straggler: not measured: stragglers are found by the waiting at collectives, and these steps have none; but the pipeline's stages are uneven: the others wait for stage 1 (rank 1), which computes 5.000 ms a step more than the next (stage balance, above)\n",
	} {
		if !strings.Contains(report.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, report.String())
		}
	}
	// With the schedule given (2 chunks × 4 microbatches): the ideal
	// (2−1)/(2·4+2−1) = 1/9 beside the measured bubble.
	given := Summarize(Analyze(records(func(r int) int { return r }), WithSchedule(2, 4)))
	if p := given.Pipeline; !p.Given || p.Chunks != 2 || p.Microbatches != 4 || math.Abs(p.Ideal-1.0/9) > 1e-12 {
		t.Errorf("schedule given: pipeline %+v, want 2 chunks × 4 microbatches given, ideal 1/9", p)
	}
	report.Reset()
	if err := WriteReport(&report, given); err != nil {
		t.Fatal(err)
	}
	if want := "pipeline: 2 stages × 2 chunks × 4 microbatches (chunks and microbatches as given: the work carries stages only); ideal bubble (p−1)/(v·m+p−1) = 11.1% of the span"; !strings.Contains(report.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, report.String())
	}
	none := Analyze(records(func(int) int { return profiler.None }))
	if len(none) != 1 {
		t.Fatalf("kernels without a stage: %d steps, want 1", len(none))
	}
	if len(none[0].Stages) != 0 || none[0].Span.Len() != 0 {
		t.Errorf("kernels without a stage: stages %+v, span %v; want none", none[0].Stages, none[0].Span)
	}
}

// TestDataParallelNoBubble: two data-parallel ranks whose work carries
// phases but no stage (DDP's forward and backward, then an all-reduce of
// the gradients) are no pipeline. Their idle compute between forward and
// backward is no bubble: no stage rows, no bubble, and the report says
// why. Busy by hand (compute only, profiler.BusyDefinition): rank 0
// computes 10–30 and 40–60 (40 ms); rank 1 10–25 and 45–60 (30 ms).
func TestDataParallelNoBubble(t *testing.T) {
	var b build
	none := profiler.None
	for r := range 2 {
		b.step(r, 0, none, 0, 100)
	}
	b.dev(0, 0, none, none, none, profiler.Forward, 1, 10, 30)
	b.dev(0, 0, none, none, none, profiler.Backward, 1, 40, 60)
	b.coll(0, 0, none, "AllReduce", "dp", 2, 0, -1, 1, 2, 60, 70)
	b.dev(1, 0, none, none, none, profiler.Forward, 1, 10, 25)
	b.dev(1, 0, none, none, none, profiler.Backward, 1, 45, 60)
	b.coll(1, 0, none, "AllReduce", "dp", 2, 1, -1, 1, 2, 65, 70)
	steps := Analyze(b.recs)
	if len(steps) != 1 || !steps[0].Complete() {
		t.Fatalf("steps %+v, want one complete", steps)
	}
	st := steps[0]
	if st.Pipeline.Stages != 0 || len(st.Stages) != 0 {
		t.Errorf("pipeline %+v, stages %+v; want none", st.Pipeline, st.Stages)
	}
	for i, want := range []time.Duration{d(40), d(30)} {
		r := st.Ranks[i]
		if r.Bubble != 0 || len(r.Chunks) != 0 || r.Drain != 0 {
			t.Errorf("rank %d: bubble %v, chunks %v, drain %v; want none", i, r.Bubble, r.Chunks, r.Drain)
		}
		if r.Busy != want {
			t.Errorf("rank %d: busy %v, want %v", i, r.Busy, want)
		}
	}
	var report strings.Builder
	if err := WriteReport(&report, Summarize(steps)); err != nil {
		t.Fatal(err)
	}
	if want := "pipeline: none (no rank's forward or backward work carries a stage label), so no bubble is counted"; !strings.Contains(report.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, report.String())
	}
	if strings.Contains(report.String(), "Bubble") {
		t.Errorf("report of a data-parallel job shows a bubble:\n%s", report.String())
	}

	// Staged ranks with no computation timed (a wrapped pipeline whose
	// kernels were not traced): stages, but nothing to find a bubble in.
	var p build
	for r := range 2 {
		p.step(r, 0, r, 0, 100)
		p.coll(r, 0, r, "AllReduce", "dp", 2, r, -1, 1, 2, 60, 70)
	}
	report.Reset()
	if err := WriteReport(&report, Summarize(Analyze(p.recs))); err != nil {
		t.Fatal(err)
	}
	if want := "pipeline: 2 of 2 ranks staged, but no forward or backward computation was timed on the device, so no bubble is counted"; !strings.Contains(report.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, report.String())
	}
}

// TestLabelledKernelBubbles: a wrapped pipeline's kernels launched inside
// NVTX ranges named as forward and backward work carry phase, chunk and
// microbatch (one chunk, two microbatches), and the optimizer's kernel
// none. Worked by hand: the span runs from 10 ms to 95 ms. Stage 0 is
// busy 10–30, 60–70, 80–90 and 92–95 (the optimizer): bubble 85 − 43 =
// 42 ms, of which the gaps before its backward chunk-0 kernels (30–60,
// 70–80) are chunk 0's 40 ms and the gap the optimizer ends (90–92) the
// tail's 2. Stage 1 is busy 30–60 and 70–80: bubble 45 ms, chunk 0's
// the gaps before its chunk-0 work (10–30, 60–70) 30 ms, the tail 80–95
// 15. The ideal is (2−1)/(1·2+2−1) = 1/3 from the labels alone.
func TestLabelledKernelBubbles(t *testing.T) {
	var b build
	kernel := func(rank, chunk, mb int, ph profiler.Phase, from, to float64) {
		b.add(profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: 7,
			Labels: labels(0, rank, chunk, mb, ph), HostStart: d(from), HostEnd: d(from),
			HasDevice: true, DeviceStart: d(from), DeviceEnd: d(to)})
	}
	for r := range 2 {
		b.step(r, 0, r, 0, 100)
	}
	kernel(0, 0, 0, profiler.Forward, 10, 20)
	kernel(0, 0, 1, profiler.Forward, 20, 30)
	kernel(0, 0, 0, profiler.Backward, 60, 70)
	kernel(0, 0, 1, profiler.Backward, 80, 90)
	kernel(0, profiler.None, profiler.None, profiler.PhaseNone, 92, 95)
	kernel(1, 0, 0, profiler.Forward, 30, 40)
	kernel(1, 0, 1, profiler.Forward, 40, 50)
	kernel(1, 0, 0, profiler.Backward, 50, 60)
	kernel(1, 0, 1, profiler.Backward, 70, 80)
	steps := Analyze(b.recs)
	if len(steps) != 1 {
		t.Fatalf("%d steps", len(steps))
	}
	st := steps[0]
	if st.Span.Start != d(10) || st.Span.End != d(95) {
		t.Errorf("span %v–%v, want 10ms–95ms", st.Span.Start, st.Span.End)
	}
	type split struct{ bubble, chunk0, drain time.Duration }
	want := map[int]split{0: {d(42), d(40), d(2)}, 1: {d(45), d(30), d(15)}}
	if len(st.Stages) != 2 {
		t.Fatalf("stages %+v", st.Stages)
	}
	for _, s := range st.Stages {
		if len(s.Chunks) != 1 {
			t.Errorf("stage %d: chunks %v, want one", s.Stage, s.Chunks)
			continue
		}
		if got := (split{s.Bubble, s.Chunks[0], s.Drain}); got != want[s.Stage] {
			t.Errorf("stage %d: bubble, chunk 0, tail %v, want %v", s.Stage, got, want[s.Stage])
		}
	}
	if p := st.Pipeline; p.Stages != 2 || p.Chunks != 1 || p.Microbatches != 2 || p.Given || math.Abs(p.Ideal-1.0/3) > 1e-12 {
		t.Errorf("pipeline %+v, want 2 stages × 1 chunk × 2 microbatches from the labels, ideal 1/3", p)
	}
	var report strings.Builder
	if err := WriteReport(&report, Summarize(steps)); err != nil {
		t.Fatal(err)
	}
	if want := "pipeline: 2 stages × 1 chunk × 2 microbatches; ideal bubble (p−1)/(v·m+p−1) = 33.3% of the span (a step's first to last kernel, the optimizer's included; chunks and microbatches from the ranges (NVTX, or record_function in a torch.profiler trace) the kernels were launched in)"; !strings.Contains(report.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, report.String())
	}
}

func TestCounted(t *testing.T) {
	for _, c := range []struct {
		n    int
		noun string
		want string
	}{{1, "chunk", "1 chunk"}, {2, "chunk", "2 chunks"}, {1, "microbatch", "1 microbatch"}, {8, "microbatch", "8 microbatches"}, {0, "stage", "0 stages"}} {
		if got := counted(c.n, c.noun); got != c.want {
			t.Errorf("counted(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}

// TestComputeSpanIgnoresEmptyWork: a forward range of no device time
// (its start and end events at one instant) or an inverted one did no
// computation, so it neither starts nor ends a rank's Compute nor the
// step's Span, whichever order the records come in. The one real
// computation runs 0–50 ms: the span is [0, 50) and nothing in it idles.
func TestComputeSpanIgnoresEmptyWork(t *testing.T) {
	for _, empty := range [][2]float64{{100, 100}, {120, 110}} {
		for _, emptyFirst := range []bool{false, true} {
			var b build
			b.step(0, 0, 0, 0, 200)
			add := []func(){
				func() { b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 50) },
				func() { b.dev(0, 0, 0, 0, 1, profiler.Forward, 1, empty[0], empty[1]) },
			}
			if emptyFirst {
				add[0], add[1] = add[1], add[0]
			}
			add[0]()
			add[1]()
			st := Analyze(b.recs)[0]
			want := profiler.Interval{Start: 0, End: d(50)}
			r := st.Ranks[0]
			if st.Span != want || r.Compute != want || r.Bubble != 0 {
				t.Errorf("empty forward %v, first %v: span %v, compute %v, bubble %v; want [0, 50ms), [0, 50ms), 0",
					empty, emptyFirst, st.Span, r.Compute, r.Bubble)
			}
		}
	}
}

// TestDataParallelTimeHasNoBubble: without stage labels there is no
// pipeline, so a rank's idle time between the step's first and last
// forward or backward computation is no bubble in its time slices either
// (Rank.Bubble is 0). Rank 0 computes 10–20 ms, rank 1 30–40 ms, in
// steps of 100 ms: each has 10 ms of compute and 90 ms of other idle time.
func TestDataParallelTimeHasNoBubble(t *testing.T) {
	var b build
	none := profiler.None
	for r := range 2 {
		b.step(r, 0, none, 0, 100)
	}
	b.dev(0, 0, none, none, none, profiler.Forward, 1, 10, 20)
	b.dev(1, 0, none, none, none, profiler.Forward, 1, 30, 40)
	st := Analyze(b.recs)[0]
	checkAttribution(t, []Step{st})
	for _, r := range st.Ranks {
		var compute, idle, bubble time.Duration
		for _, s := range r.Time {
			switch s.Use {
			case UseCompute:
				compute += s.Time
			case UseIdle:
				idle += s.Time
			case UseBubble:
				bubble += s.Time
			}
		}
		if compute != d(10) || idle != d(90) || bubble != 0 {
			t.Errorf("rank %d: compute %v, other idle %v, bubble %v; want 10ms, 90ms, 0", r.Rank, compute, idle, bubble)
		}
	}
}

// TestSummaryProblemsDistinct: a problem that recurs in every step is
// listed once, with the first step it was found in, so that it does not
// crowd out the others. Steps 1 to 19 lack rank 1's step range; step 19
// also lacks its receive.
func TestSummaryProblemsDistinct(t *testing.T) {
	var b build
	for s := range 20 {
		twoRanks(s, &b)
	}
	var recs []profiler.Record
	for _, r := range b.recs {
		if r.Step > 0 && r.Rank == 1 && r.Name == profiler.StepName || r.Step == 19 && r.Collective.Op == "Recv" {
			continue
		}
		recs = append(recs, r)
	}
	sum := Summarize(Analyze(recs))
	want := []string{
		"step 1: rank 1: no step range (the step was cut short, its end never arrived, or it was dropped while recording); its busy and idle time are left out",
		"step 19: 1 point-to-point transfers without their other side",
	}
	if sum.ProblemSteps != 19 || !slices.Equal(sum.Problems, want) {
		t.Errorf("%d steps with problems, problems %q; want 19 and %q", sum.ProblemSteps, sum.Problems, want)
	}
}

// TestChunkTieIsOrderFree: after 10 ms of bubble, chunks 1 and 0 of one
// rank start together on two streams (as two kernels can in a trace
// timed to the microsecond). The gap is chunk 0's, the lower, in either
// record order; before, it went to whichever record came first.
func TestChunkTieIsOrderFree(t *testing.T) {
	for _, order := range [][2]int{{1, 0}, {0, 1}} {
		var b build
		b.step(0, 0, 0, 0, 100)
		b.dev(0, 0, 0, 0, 0, profiler.Forward, 1, 0, 20)
		for _, chunk := range order {
			b.dev(0, 0, 0, chunk, 1, profiler.Forward, uint64(1+chunk), 30, 40+float64(chunk))
		}
		b.dev(0, 0, 0, 1, 0, profiler.Backward, 2, 50, 60)
		steps := Analyze(b.recs)
		if len(steps) != 1 || len(steps[0].Ranks) != 1 {
			t.Fatalf("order %v: %d steps", order, len(steps))
		}
		r := steps[0].Ranks[0]
		// Busy 0–20, 30–41, 50–60: gaps 20–30 (before both chunks) and
		// 41–50 (before chunk 1's backward).
		if len(r.Chunks) != 2 || r.Chunks[0] != d(10) || r.Chunks[1] != d(9) || r.Bubble != d(19) {
			t.Errorf("order %v: bubble %v split %v, want 19ms as [10ms 9ms]", order, r.Bubble, r.Chunks)
		}
	}
}
