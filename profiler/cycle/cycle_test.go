package cycle_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

const (
	ms  = time.Millisecond
	mib = 1 << 20
)

// job builds a rank's records: calls of op with bytes, issued at the
// given times.
type job struct {
	rank int
	recs []profiler.Record
}

func (j *job) call(at time.Duration, op string, bytes int64, peer int32) {
	kind := profiler.KindCollective
	if peer >= 0 {
		kind = profiler.KindP2P
	}
	j.recs = append(j.recs, profiler.Record{
		Name: op, Kind: kind, Rank: j.rank, HostStart: at, HostEnd: at + 10*time.Microsecond,
		Collective: profiler.Collective{Op: op, Bytes: bytes, Peer: peer, Root: -1, Group: "dp"},
	})
}

// ddp is a DDP-like rank: a first step whose buckets are not yet
// rebuilt (other sizes), then steps of four all-reduces issued during the
// backward pass, each step taking step ± jitter.
func ddp(rank, steps int, step, jitter time.Duration, seed uint64) []profiler.Record {
	rng := rand.New(rand.NewPCG(seed, 7))
	j := &job{rank: rank}
	t := time.Duration(0)
	for _, b := range []int64{40, 30, 13} { // the warm-up step
		j.call(t+50*ms, "AllReduce", b*mib, -1)
		t += 10 * ms
	}
	t += 200 * ms
	for range steps {
		d := step + time.Duration((rng.Float64()*2-1)*float64(jitter))
		for i, b := range []int64{25, 25, 25, 8} {
			j.call(t+d*6/10+time.Duration(i)*d/10, "AllReduce", b*mib, -1)
		}
		t += d
	}
	return j.recs
}

func near(t *testing.T, what string, got, want, tol time.Duration) {
	t.Helper()
	if got < want-tol || got > want+tol {
		t.Errorf("%s: %v, want %v ± %v", what, got, want, tol)
	}
}

func TestDataParallelStep(t *testing.T) {
	s := cycle.NewSink(0)
	recs := ddp(0, 20, 100*ms, 2*ms, 1)
	// After the loop, a last evaluation's all-reduce and a barrier.
	end := recs[len(recs)-1].HostStart
	tail := &job{}
	tail.call(end+50*ms, "AllReduce", 4, -1)
	tail.call(end+60*ms, "AllReduce", 1, -1)
	s.Consume(append(recs, tail.recs...))
	// Host ranges are not collectives: left out.
	s.Consume([]profiler.Record{{Name: "forward", Kind: profiler.KindHost, HostStart: time.Hour}})
	res := s.Result()
	if len(res.Ranks) != 1 {
		t.Fatalf("%d ranks, want 1", len(res.Ranks))
	}
	r := res.Ranks[0]
	if !r.Found {
		t.Fatalf("no cycle: %s", r.Why)
	}
	if r.Length != 4 || r.Period != 4 {
		t.Errorf("cycle of %d (period %d), want 4 all-reduces a step", r.Length, r.Period)
	}
	// 20 steps of 4 between a warm-up of other sizes and the end's two:
	// the stretch is the 20.
	if r.Cycles != 20 || r.Seen != 85 || r.Kept != 85 {
		t.Errorf("%d cycles of %d seen, %d kept; want 20 cycles, 85 operations seen and kept", r.Cycles, r.Seen, r.Kept)
	}
	near(t, "median", r.Median, 100*ms, 2*ms)
	if r.P25 > r.Median || r.Median > r.P75 || r.P75 > r.P90 || r.P90 > 103*ms {
		t.Errorf("quantiles out of order or beyond the jitter: %v %v %v %v", r.P25, r.Median, r.P75, r.P90)
	}
	if len(r.Ops) != 1 || r.Ops[0].Op != "AllReduce" || r.Ops[0].Count != 4 || r.Bytes != 83*mib {
		t.Errorf("one cycle: %+v, %d bytes; want AllReduce ×4, 83 MiB", r.Ops, r.Bytes)
	}
	text := res.Text()
	for _, want := range []string{"cycle: rank 0 repeats a cycle of 4 collectives (AllReduce ×4, 83.0 MiB) every 10", "median over 20 or more cycles a rank"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
}

// TestTensorParallelStep: every operation has the same signature, so the
// sequence repeats every one; the step is the multiple whose duration is
// steady: 24 all-reduces 1 ms apart forward, 24 at 2 ms backward, then
// 20 ms of optimizer and data.
func TestTensorParallelStep(t *testing.T) {
	j := &job{rank: 3}
	t0 := time.Duration(0)
	for range 10 {
		for i := range 24 {
			j.call(t0+time.Duration(i)*ms, "AllReduce", 4*mib, -1)
		}
		for i := range 24 {
			j.call(t0+24*ms+time.Duration(i)*2*ms, "AllReduce", 4*mib, -1)
		}
		t0 += 24*ms + 48*ms + 20*ms
	}
	s := cycle.NewSink(0)
	s.Consume(j.recs)
	r := s.Result().Ranks[0]
	if !r.Found || r.Length != 48 || r.Period != 1 {
		t.Fatalf("found %v: cycle of %d, period %d (%s); want 48 operations of period 1", r.Found, r.Length, r.Period, r.Why)
	}
	near(t, "median", r.Median, 92*ms, 0)
	if r.Cycles != 10 {
		t.Errorf("%d cycles, want 10", r.Cycles)
	}
}

// TestPipelineStep: a pipeline stage's 1F1B step of sends and receives
// to its neighbour and a gradient all-reduce.
func TestPipelineStep(t *testing.T) {
	j := &job{rank: 1}
	t0 := time.Duration(0)
	for range 12 {
		at := t0
		call := func(op string, peer int32) {
			j.call(at, op, 2*mib, peer)
			at += 3 * ms
		}
		call("Send", 2)
		call("Send", 2)
		for range 6 {
			call("Recv", 2)
			call("Send", 2)
		}
		call("Recv", 2)
		call("Recv", 2)
		j.call(at, "AllReduce", 64*mib, -1)
		t0 += 80 * ms
	}
	s := cycle.NewSink(0)
	s.Consume(j.recs)
	r := s.Result().Ranks[0]
	if !r.Found || r.Length != 17 {
		t.Fatalf("found %v: cycle of %d (%s); want 17 operations", r.Found, r.Length, r.Why)
	}
	near(t, "median", r.Median, 80*ms, 0)
	want := map[string]int{"Send": 8, "Recv": 8, "AllReduce": 1}
	for _, o := range r.Ops {
		if want[o.Op] != o.Count {
			t.Errorf("%s ×%d, want ×%d", o.Op, o.Count, want[o.Op])
		}
	}
}

func TestNoCycle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	irregular := &job{}
	for i := range 500 {
		irregular.call(time.Duration(i)*ms, "AllReduce", int64(1+rng.IntN(1<<20)), -1)
	}
	// One signature, issued at random times: it repeats every operation,
	// but no number of them takes a steady time.
	unsteady := &job{rank: 1}
	at := time.Duration(0)
	for range 500 {
		at += time.Duration(1+rng.IntN(100)) * ms
		unsteady.call(at, "AllReduce", mib, -1)
	}
	few := &job{rank: 2}
	for i := range 5 {
		few.call(time.Duration(i)*ms, "Broadcast", mib, -1)
	}
	for _, c := range []struct {
		name string
		recs []profiler.Record
		why  string
	}{
		{"sizes that never repeat", irregular.recs, "hold no sequence repeated 3 times"},
		{"one kind at random times", unsteady.recs, "repeat every 1, but no multiple of 1"},
		{"five operations", few.recs, "5 operations, too few"},
	} {
		s := cycle.NewSink(0)
		s.Consume(c.recs)
		res := s.Result()
		r := res.Ranks[0]
		if r.Found || !strings.Contains(r.Why, c.why) {
			t.Errorf("%s: found %v (cycle of %d), why %q; want none, %q", c.name, r.Found, r.Length, r.Why, c.why)
		}
		if text := res.Text(); !strings.Contains(text, "cycle: no repeating cycle of collectives found") {
			t.Errorf("%s: text %q", c.name, text)
		}
	}
	if text := cycle.NewSink(0).Result().Text(); text != "" {
		t.Errorf("no ranks: text %q, want none", text)
	}
}

// TestWindow: a long run keeps only the latest operations, and the
// search still finds the step in them.
func TestWindow(t *testing.T) {
	s := cycle.NewSink(64)
	recs := ddp(0, 2000, 50*ms, ms, 2)
	for len(recs) > 0 { // in the collector's batches
		n := min(len(recs), 37)
		s.Consume(recs[:n])
		recs = recs[n:]
	}
	r := s.Result().Ranks[0]
	if r.Seen != 8003 || r.Kept != 64 {
		t.Errorf("seen %d, kept %d; want 8003, 64", r.Seen, r.Kept)
	}
	if !r.Found || r.Length != 4 || r.Cycles != 16 {
		t.Fatalf("found %v: cycle of %d, %d cycles (%s); want 4 operations, 16 cycles", r.Found, r.Length, r.Cycles, r.Why)
	}
	near(t, "median", r.Median, 50*ms, ms)
}

// TestJobAcrossRanks: ranks that agree, and one whose operations do not
// repeat.
func TestJobAcrossRanks(t *testing.T) {
	s := cycle.NewSink(0)
	for rank := range 3 {
		s.Consume(ddp(rank, 30, time.Duration(100+10*rank)*ms, ms, uint64(rank)))
	}
	odd := &job{rank: 3}
	for i := range 50 {
		odd.call(time.Duration(i)*ms, "AllGather", int64(i+1)*mib, -1)
	}
	s.Consume(odd.recs)
	res := s.Result()
	j, ok := res.Job()
	if !ok || j.Ranks != 4 || j.Agreeing != 3 || j.Length != 4 || j.Cycles != 30 {
		t.Fatalf("job %+v (ok %v); want 3 of 4 ranks agreeing on 4 operations, 30 cycles", j, ok)
	}
	near(t, "median over ranks", j.Median, 110*ms, ms) // the middle of 100, 110 and 120 ms
	if j.P90 < 119*ms || j.P90 > 122*ms {
		t.Errorf("p90 %v, want the slowest rank's, about 120 ms", j.P90)
	}
	if text := res.Text(); !strings.Contains(text, "cycle: 3 of 4 ranks repeat a cycle of 4 collectives") {
		t.Errorf("text %q", text)
	}
}

// TestRepeatWithinTheStep: sequence parallelism's all-gather and
// reduce-scatter per layer repeat every two operations; forward layers
// take 1 ms, backward 2 ms, and the step ends with 10 ms of optimizer:
// 32 operations a step.
func TestRepeatWithinTheStep(t *testing.T) {
	j := &job{}
	t0 := time.Duration(0)
	for range 8 {
		at := t0
		for _, layer := range []time.Duration{ms, ms, ms, ms, ms, ms, ms, ms, 2 * ms, 2 * ms, 2 * ms, 2 * ms, 2 * ms, 2 * ms, 2 * ms, 2 * ms} {
			j.call(at, "AllGather", 8*mib, -1)
			j.call(at+layer/2, "ReduceScatter", 8*mib, -1)
			at += layer
		}
		t0 = at + 10*ms
	}
	s := cycle.NewSink(0)
	s.Consume(j.recs)
	r := s.Result().Ranks[0]
	if !r.Found || r.Length != 32 || r.Period != 2 || r.Cycles != 8 {
		t.Fatalf("found %v: cycle of %d, period %d, %d cycles (%s); want 32 operations of period 2, 8 cycles", r.Found, r.Length, r.Period, r.Cycles, r.Why)
	}
	near(t, "median", r.Median, 34*ms, 0)
}

// TestPipelineStagesOfOtherLengths: a pipeline of four stages, 80 ms a
// step: the first and last stages send or receive one way (8 operations
// and an all-reduce a step), the middle two both ways (16 and an
// all-reduce). Every rank takes the step's time; their cycles differ in
// length, and the text says the range.
func TestPipelineStagesOfOtherLengths(t *testing.T) {
	s := cycle.NewSink(0)
	for rank := range 4 {
		j := &job{rank: rank}
		ops := []string{"Send"}
		switch rank {
		case 1, 2:
			ops = []string{"Recv", "Send"}
		case 3:
			ops = []string{"Recv"}
		}
		for step := range 12 {
			at := time.Duration(step) * 80 * time.Millisecond
			for range 8 {
				for _, op := range ops {
					j.call(at, op, 2*mib, int32(rank+1))
					at += 2 * time.Millisecond
				}
			}
			j.call(at, "AllReduce", 64*mib, -1)
		}
		s.Consume(j.recs)
	}
	res := s.Result()
	j, ok := res.Job()
	if !ok || j.Agreeing != 4 || j.MinLength != 9 || j.MaxLength != 17 || j.Length != 9 || j.Rank != 0 {
		t.Fatalf("job %+v (ok %v); want all 4 ranks, cycles of 9 to 17, the most common (9, rank 0's) named", j, ok)
	}
	near(t, "median", j.Median, 80*ms, 0)
	want := "cycle: every rank (4) repeats cycles of 9 to 17 collectives (rank 0's 9: Send ×8, AllReduce ×1, 80.0 MiB) every 80.0 ms"
	if text := res.Text(); !strings.HasPrefix(text, want) {
		t.Errorf("text %q, want it to begin %q", text, want)
	}
}

// TestGradientAccumulation: 14 microbatches a step, each an all-gather
// and a reduce-scatter 5 ms apart, then the step's all-reduce and 20 ms
// of optimizer: 29 operations a step, of which a window of 64 holds two
// and a bit. The cycle found is a microbatch's, repeating through fewer
// than half the operations kept, and the text says it may be a part of
// the step.
func TestGradientAccumulation(t *testing.T) {
	j := &job{}
	at := time.Duration(0)
	for range 20 {
		for range 14 {
			j.call(at, "AllGather", 8*mib, -1)
			j.call(at+2*ms, "ReduceScatter", 8*mib, -1)
			at += 5 * ms
		}
		j.call(at, "AllReduce", 64*mib, -1)
		at += 20 * ms
	}
	s := cycle.NewSink(64)
	s.Consume(j.recs)
	res := s.Result()
	r := res.Ranks[0]
	job, ok := res.Job()
	if !ok || r.Length != 2 || r.Stretch != 28 || r.Kept != 64 || !job.Interrupted {
		t.Fatalf("cycle of %d through %d of %d kept, interrupted %v (found %v); want a microbatch's 2 through 28 of 64, interrupted", r.Length, r.Stretch, r.Kept, job.Interrupted, ok)
	}
	if text := res.Text(); !strings.Contains(text, "every 5.0 ms") || !strings.Contains(text, "the step, or a part of it that repeats within it (a microbatch's, under gradient accumulation): its repetitions fill less than half the operations kept") {
		t.Errorf("text %q", text)
	}
	// The whole run kept: the step repeats, and is found.
	s = cycle.NewSink(0)
	s.Consume(j.recs)
	if job, ok := s.Result().Job(); !ok || job.Length != 29 || job.Interrupted {
		t.Errorf("with every operation kept: %+v (ok %v); want the step's 29, not interrupted", job, ok)
	}
}

// TestRanksThatDisagree: two ranks whose cycles take 10 and 100 ms, the
// median of the two near neither: the job is the lowest rank's, one of
// two agreeing, not none (which Job once took for a cycle and failed on).
// Three ranks at 100 ms outvote it.
func TestRanksThatDisagree(t *testing.T) {
	steps := func(rank int, step time.Duration) []profiler.Record {
		j := &job{rank: rank}
		for k := range 10 {
			at := time.Duration(k) * step
			j.call(at, "AllReduce", 4*mib, -1)
			j.call(at+step/10, "Broadcast", mib, -1)
		}
		return j.recs
	}
	s := cycle.NewSink(0)
	s.Consume(steps(0, 10*ms))
	s.Consume(steps(1, 100*ms))
	res := s.Result()
	j, ok := res.Job()
	if !ok || j.Agreeing != 1 || j.Ranks != 2 || j.Rank != 0 {
		t.Fatalf("job %+v (ok %v); want rank 0's, 1 of 2 agreeing", j, ok)
	}
	near(t, "median", j.Median, 10*ms, 0)
	if text := res.Text(); !strings.HasPrefix(text, "cycle: 1 of 2 ranks repeat a cycle of 2 collectives") {
		t.Errorf("text %q", text)
	}
	for rank := 2; rank < 4; rank++ {
		s.Consume(steps(rank, 100*ms))
	}
	if j, ok := s.Result().Job(); !ok || j.Agreeing != 3 || j.Rank != 1 {
		t.Errorf("job %+v (ok %v); want ranks 1–3's, 3 of 4 agreeing", j, ok)
	} else {
		near(t, "median of three", j.Median, 100*ms, 0)
	}
}

// TestDeviceTimeOfACycle: three operations a 40 ms step whose device
// intervals are [0, 2], [1, 4] and [10, 11] ms from the step's first
// issue: 5 ms of the step with a collective on the device (the first two
// overlap). One step's last operation has no device time: that step is
// left out, not counted short. Without device times nothing is said.
func TestDeviceTimeOfACycle(t *testing.T) {
	j := &job{}
	for k := range 12 {
		at := time.Duration(k) * 40 * time.Millisecond
		for i, iv := range [][2]time.Duration{{0, 2 * ms}, {ms, 4 * ms}, {10 * ms, 11 * ms}} {
			j.call(at+time.Duration(i)*ms, "AllReduce", int64(i+1)*mib, -1)
			r := &j.recs[len(j.recs)-1]
			if k == 5 && i == 2 {
				continue
			}
			r.HasDevice, r.DeviceStart, r.DeviceEnd = true, at+iv[0], at+iv[1]
		}
	}
	s := cycle.NewSink(0)
	s.Consume(j.recs)
	res := s.Result()
	r := res.Ranks[0]
	if !r.Found || !r.DeviceKnown || r.Device != 5*ms {
		t.Fatalf("found %v, device %v (known %v); want 5ms", r.Found, r.Device, r.DeviceKnown)
	}
	if text := res.Text(); !strings.Contains(text, "; the collectives on the device 5.0 ms of it)") {
		t.Errorf("text %q", text)
	}
	for i := range j.recs {
		j.recs[i].HasDevice = false
	}
	s = cycle.NewSink(0)
	s.Consume(j.recs)
	res = s.Result()
	if r := res.Ranks[0]; !r.Found || r.DeviceKnown || strings.Contains(res.Text(), "on the device") {
		t.Errorf("without device times: %+v, %q", r, res.Text())
	}
}

// megatronStage is a middle stage of a pipeline under tensor and
// sequence parallelism, as Megatron-LM issues its collectives: a 1F1B
// step of microbatches (warm-up forwards, then a forward and a backward
// each, then the cool-down backwards), each forward and backward an
// all-gather and a reduce-scatter twice per layer on the tensor-parallel
// group, received from and sent to the neighbouring stages on the
// pipeline's, and after the last backward the data-parallel group's
// reduce-scatter of the gradients per bucket, the gradient norm's
// all-reduce and the parameters' all-gathers, then the optimizer's
// pause. It returns the rank's records and the operations in a step.
func megatronStage(steps, microbatches, layers, warmup int, step time.Duration) ([]profiler.Record, int) {
	j := &job{rank: 9}
	t0 := time.Duration(0)
	perStep := 0
	for range steps {
		at := t0
		call := func(op, group string, bytes int64, peer int32) {
			j.call(at, op, bytes, peer)
			j.recs[len(j.recs)-1].Collective.Group = group
			at += 40 * time.Microsecond
		}
		pass := func(from, to int32) {
			call("Recv", "pp", 8*mib, from)
			for range layers {
				for range 2 {
					call("AllGather", "tp", 16*mib, -1)
					call("ReduceScatter", "tp", 16*mib, -1)
				}
			}
			call("Send", "pp", 8*mib, to)
		}
		forward := func() { pass(8, 10) }
		backward := func() { pass(10, 8) }
		for range warmup {
			forward()
		}
		for range microbatches - warmup {
			forward()
			backward()
		}
		for range warmup {
			backward()
		}
		for b := range 4 {
			call("ReduceScatter", "dp", int64(100+b)*mib, -1)
		}
		call("AllReduce", "tp", 4, -1)
		for b := range 4 {
			call("AllGather", "dp", int64(100+b)*mib, -1)
		}
		if perStep == 0 {
			perStep = len(j.recs)
		}
		t0 += step
	}
	return j.recs, perStep
}

// TestLongSteps: steps of thousands of operations, as a pipeline stage
// under tensor parallelism issues, are found in the window: a middle
// stage of 32 microbatches of 12 layers (3,209 operations a step, the
// sequence repeating whole), and a tensor-parallel rank whose step is
// 1,500 all-gather and reduce-scatter pairs then the optimizer's pause
// (the sequence repeats every 2 operations, a forward pair every 100 µs,
// a backward pair every 200 µs; the step is the multiple that pauses).
func TestLongSteps(t *testing.T) {
	t.Run("pipeline-stage", func(t *testing.T) {
		recs, perStep := megatronStage(14, 32, 12, 2, 300*ms)
		if perStep != 32*2*(2+12*4)+9 {
			t.Fatalf("the generator issues %d operations a step", perStep)
		}
		s := cycle.NewSink(0)
		s.Consume(recs)
		r := s.Result().Ranks[0]
		if !r.Found || r.Length != perStep || r.Period != perStep {
			t.Fatalf("found %v: cycle of %d, period %d (%s); want %d", r.Found, r.Length, r.Period, r.Why, perStep)
		}
		if r.Kept != cycle.Window || r.Cycles != cycle.Window/perStep {
			t.Errorf("kept %d, %d cycles; want %d, %d", r.Kept, r.Cycles, cycle.Window, cycle.Window/perStep)
		}
		near(t, "median", r.Median, 300*ms, 0)
		want := map[string]int{"AllGather": 32*2*12*2 + 4, "ReduceScatter": 32*2*12*2 + 4, "Send": 64, "Recv": 64, "AllReduce": 1}
		for _, o := range r.Ops {
			if want[o.Op] != o.Count {
				t.Errorf("%s ×%d, want ×%d", o.Op, o.Count, want[o.Op])
			}
		}
	})
	t.Run("tensor-parallel", func(t *testing.T) {
		j := &job{}
		t0 := time.Duration(0)
		for range 12 {
			at := t0
			for i := range 1500 {
				layer := 100 * time.Microsecond
				if i >= 750 {
					layer *= 2
				}
				j.call(at, "AllGather", 16*mib, -1)
				j.call(at+layer/2, "ReduceScatter", 16*mib, -1)
				at += layer
			}
			t0 = at + 30*ms
		}
		s := cycle.NewSink(0)
		s.Consume(j.recs)
		r := s.Result().Ranks[0]
		if !r.Found || r.Length != 3000 || r.Period != 2 {
			t.Fatalf("found %v: cycle of %d, period %d (%s); want 3000 operations of period 2", r.Found, r.Length, r.Period, r.Why)
		}
		near(t, "median", r.Median, 255*ms, 0)
		// The first search, a TrackLag into the run, saw four steps and
		// took the pair of operations for the cycle; a later one, with
		// every operation still kept, the step: the run counts steps.
		s.Finish()
		run := s.Result().Ranks[0].Run
		if run.Cycles != 11 || run.Breaks != 0 || run.Missed != 0 {
			t.Errorf("the run: %d cycles, %d breaks, %d missed; want the 11 steps but the last, no break, none missed", run.Cycles, run.Breaks, run.Missed)
		}
		if run.Min != 255*ms || run.Max != 255*ms {
			t.Errorf("the run's cycles took %v to %v, want 255ms", run.Min, run.Max)
		}
	})
}

// TestBudget: a Sink keeps Window operations a rank while Budget lasts,
// then fewer, and FloorWindow however many ranks: a rank that came first
// gives up its oldest when others come.
func TestBudget(t *testing.T) {
	s := cycle.NewSink(0)
	first, _ := megatronStage(14, 32, 12, 2, 300*ms)
	s.Consume(first)
	if r := s.Result().Ranks[0]; r.Kept != cycle.Window {
		t.Fatalf("one rank kept %d, want %d", r.Kept, cycle.Window)
	}
	more := func(ranks int) {
		for rank := range ranks {
			s.Consume(ddp(100+rank, 2, 100*ms, ms, 1))
		}
	}
	more(31) // 32 ranks: each keeps 16,384, five of the first's steps
	perRank := cycle.Budget / 32
	if r := s.Result().Ranks[0]; r.Kept != perRank || !r.Found || r.Median != 300*ms {
		t.Fatalf("of 32 ranks, the first kept %d (found %v, %v), want %d and its cycle", r.Kept, r.Found, r.Median, perRank)
	}
	s.Consume(first[:100]) // the first rank's ring gives up its oldest as these come
	more(1032)
	if r := s.Result().Ranks[0]; r.Kept != cycle.FloorWindow || r.Seen != uint64(len(first)+100) {
		t.Fatalf("of 1064 ranks, the first kept %d of %d seen, want %d of %d", r.Kept, r.Seen, cycle.FloorWindow, len(first)+100)
	}
}

// TestBusyTimeOfACycle: a rank's steps of 100 ms, each three
// all-reduces on stream 7 timed on the device, and kernels: 30 ms on
// stream 7 of which an all-reduce covers 5 ms (a transfer on the same
// stream: not busy), 20 ms on stream 8 overlapping the first by 10 ms,
// and a copy (not computation). Busy in a cycle: 25 + 20 − 10 = 35 ms. A
// rank that traced no kernels has none; a window of kept work that
// covers only the latest cycles gives it from those; kernels that have
// not arrived yet (those of the latest steps) leave their cycles out;
// kernels of a process without collectives make no rank.
func TestBusyTimeOfACycle(t *testing.T) {
	rec := func(j *job, kind profiler.Kind, stream uint64, from, to time.Duration) {
		j.recs = append(j.recs, profiler.Record{Name: "k", Kind: kind, Rank: j.rank, Stream: stream,
			HasDevice: true, DeviceStart: from, DeviceEnd: to})
	}
	build := func(kernels int, small int) []profiler.Record {
		j := &job{}
		for k := range 20 {
			at := time.Duration(k) * 100 * ms
			for i, iv := range [][2]time.Duration{{2 * ms, 7 * ms}, {40 * ms, 45 * ms}, {60 * ms, 62 * ms}} {
				j.call(at+time.Duration(i)*ms, "AllReduce", int64(i+1)*mib, -1)
				r := &j.recs[len(j.recs)-1]
				r.Stream, r.HasDevice, r.DeviceStart, r.DeviceEnd = 7, true, at+iv[0], at+iv[1]
			}
			if k < kernels {
				rec(j, profiler.KindKernel, 7, at+2*ms, at+32*ms)
				rec(j, profiler.KindKernel, 8, at+22*ms, at+42*ms)
				rec(j, profiler.KindDevice, 9, at+50*ms, at+90*ms) // a copy
				// Within the first: no more busy time.
				for range small {
					rec(j, profiler.KindKernel, 7, at+10*ms, at+11*ms)
				}
			}
		}
		return j.recs
	}
	s := cycle.NewSink(0)
	s.Consume(build(20, 0))
	lone := &job{rank: 5}
	rec(lone, profiler.KindKernel, 1, 0, ms)
	s.Consume(lone.recs)
	res := s.Result()
	if len(res.Ranks) != 1 {
		t.Fatalf("%d ranks, want 1: kernels alone make no rank", len(res.Ranks))
	}
	r := res.Ranks[0]
	if !r.Found || r.Length != 3 || !r.BusyKnown || r.Busy != 35*ms {
		t.Fatalf("found %v (cycle of %d), busy %v (known %v); want 35ms", r.Found, r.Length, r.Busy, r.BusyKnown)
	}
	if text := res.Text(); !strings.Contains(text, "; the GPU busy 35.0 ms of it)") {
		t.Errorf("text %q", text)
	}
	if j, _ := res.Job(); !j.BusyKnown || j.Busy != 35*ms {
		t.Errorf("job busy %v (known %v)", j.Busy, j.BusyKnown)
	}
	// A window of 16 operations (5 cycles) keeps 32 intervals of work, 15
	// a step with 10 more small kernels: the last two steps' and a bit.
	s = cycle.NewSink(16)
	s.Consume(build(20, 10))
	if r := s.Result().Ranks[0]; !r.Found || !r.BusyKnown || r.Busy != 35*ms {
		t.Errorf("a window of 16: found %v, busy %v (known %v); want 35ms", r.Found, r.Busy, r.BusyKnown)
	}
	// The kernels of the first 8 steps of 20 only.
	s = cycle.NewSink(0)
	s.Consume(build(8, 0))
	if r := s.Result().Ranks[0]; !r.Found || !r.BusyKnown || r.Busy != 35*ms {
		t.Errorf("kernels of 8 steps: found %v, busy %v (known %v); want 35ms", r.Found, r.Busy, r.BusyKnown)
	}
	s = cycle.NewSink(0)
	s.Consume(build(0, 0))
	res = s.Result()
	if r := res.Ranks[0]; !r.Found || r.BusyKnown || strings.Contains(res.Text(), "GPU busy") {
		t.Errorf("without kernels: %+v, %q", r, res.Text())
	}
}

// TestNoisySteps: a DDP loop of 1,500 all-reduces of one size a step (a
// bucket per layer), its steps as long as those of two runs on one H100
// shared by two processes (ddp_steps.py --layers 1500, rank 0's step
// times after the first, and rank 1's). In the first they drift from 0.68 to 1.11 s,
// each close to the one before; in the second they vary from 0.58 to
// 1.06 s. Either way their interquartile range is a quarter of their
// median, above MaxSpread, and sums of two or three steps vary less: the
// cycle is still the step, whose every repetition starts after the same
// pause, and not two or three of them.
func TestNoisySteps(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps []float64
		p50   time.Duration
	}{
		{"drifting", []float64{0.9074, 0.9305, 0.7822, 0.7595, 0.6828, 0.8681, 1.0666, 1.1135, 1.0605, 1.0400, 1.0282, 1.0385, 1.0283}, 1028 * ms},
		{"noisy", []float64{0.7711, 0.7832, 0.8537, 0.7556, 0.8711, 0.7667, 0.5878, 0.6281, 0.5786, 0.7609, 0.9504, 0.9266, 1.0561}, 771 * ms},
		// Rank 1's of the same runs.
		{"drifting rank 1", []float64{0.8492, 0.9215, 0.8168, 0.8221, 0.6984, 0.8833, 1.0655, 1.1168, 1.0580, 1.0356, 1.0274, 1.0376, 1.0356}, 1027 * ms},
		{"noisy rank 1", []float64{0.8403, 0.7833, 0.7770, 0.7144, 0.8599, 0.7784, 0.5930, 0.6125, 0.6649, 0.7318, 0.8914, 0.9260, 1.0578}, 778 * ms},
	} {
		j := &job{}
		at := time.Duration(0)
		for range 1500 { // the first step: one bucket, then 1,500
			j.call(at, "AllReduce", 16<<10, -1)
			at += 100 * time.Microsecond
		}
		at += 500 * ms
		for _, s := range c.steps {
			d := time.Duration(s * float64(time.Second))
			// The all-reduces in the backward pass's last 40 %, the
			// optimizer and the next forward pass after them.
			for i := range 1500 {
				j.call(at+d*6/10+time.Duration(i)*d*4/10/1500, "AllReduce", 16<<10, -1)
			}
			at += d
		}
		s := cycle.NewSink(0)
		s.Consume(j.recs)
		r := s.Result().Ranks[0]
		if !r.Found || r.Length != 1500 {
			t.Errorf("%s: found %v: cycle of %d (%s); want the step's 1,500 all-reduces", c.name, r.Found, r.Length, r.Why)
			continue
		}
		near(t, c.name+" median", r.Median, c.p50, c.p50*3/100) // the script's median step, within 3 %
	}
}
