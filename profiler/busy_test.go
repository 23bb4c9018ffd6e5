package profiler_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/pipeline/schedule"
	"github.com/trainscope/trainscope/profiler"
)

// simRun is a step of a pipeline schedule laid out as records, with the
// busy time each rank must come out with, known from the construction.
type simRun struct {
	records  []profiler.Record
	wantBusy map[int]time.Duration
	wantWall map[int]time.Duration
}

// simulatedStep lays out one step of sched as the records a profiled
// trainer would produce, each stage a rank with a compute stream and a
// communication stream:
//
//   - load_batch (not computation) for load on the compute stream;
//   - every action of the schedule's simulation, shifted by load, as a
//     forward or backward range on the compute stream;
//   - the compute stream's wait before an action that waits for its input
//     (a communication-phase range);
//   - a Send of xfer at the end of each forward that has a successor,
//     inside the forward and on the compute stream (a backend that copies
//     on the caller's stream): transfer, so not busy;
//   - a Send of xfer after each backward, on the communication stream,
//     overlapping whatever computes next: still busy;
//   - the gradient all-reduce (wait on the compute stream, collective on the
//     communication stream), then the optimizer's opt of computation;
//   - tail of host time after the device work, ending the step.
//
// Each rank's busy time is then the simulation's busy time, less xfer per
// forward with a successor, plus opt.
func simulatedStep(t *testing.T, sched *schedule.Schedule, fwd, bwd, load, xfer, allreduce, opt, tail time.Duration) simRun {
	t.Helper()
	tl, err := schedule.Simulate(sched, schedule.UniformCost(float64(fwd), float64(bwd)))
	if err != nil {
		t.Fatal(err)
	}
	p, v := sched.Stages(), sched.Chunks()
	run := simRun{wantBusy: map[int]time.Duration{}, wantWall: map[int]time.Duration{}}
	makespan := time.Duration(tl.Makespan)
	wall := load + makespan + allreduce + opt + tail
	for st := range p {
		compute, comm := uint64(2*st+1), uint64(2*st+2)
		var id uint64
		add := func(parent uint64, depth int, name string, kind profiler.Kind, ph profiler.Phase, stream uint64, s, e time.Duration) uint64 {
			id++
			l := profiler.NoLabels
			l.Step, l.Stage, l.Phase = 0, int16(st), ph
			r := profiler.Record{ID: id, Parent: parent, Depth: depth, Name: name, Kind: kind, Rank: st, Labels: l,
				HostStart: s, HostEnd: e}
			if kind != profiler.KindHost {
				r.Stream, r.HasDevice, r.DeviceStart, r.DeviceEnd = stream, true, s, e
			}
			run.records = append(run.records, r)
			return id
		}
		step := add(0, 0, profiler.StepName, profiler.KindHost, profiler.PhaseNone, 0, 0, wall)
		add(step, 1, "load_batch", profiler.KindDevice, profiler.PhaseNone, compute, 0, load)
		busy := time.Duration(tl.Busy[st]) + opt
		free := load
		for _, sp := range tl.Spans[st] {
			s, e := load+time.Duration(sp.Start), load+time.Duration(sp.End)
			if s > free {
				add(step, 1, "recv", profiler.KindDevice, profiler.Comm, compute, free, s)
			}
			free = e
			vs := sched.VirtualStage(st, sp.Action.Chunk)
			if sp.Action.Kind == schedule.Forward {
				a := add(step, 1, "forward", profiler.KindDevice, profiler.Forward, compute, s, e)
				if vs < p*v-1 {
					add(a, 2, "Send", profiler.KindP2P, profiler.Forward, compute, e-xfer, e)
					busy -= xfer
				}
				continue
			}
			add(step, 1, "backward", profiler.KindDevice, profiler.Backward, compute, s, e)
			if vs > 0 {
				add(step, 1, "Send", profiler.KindP2P, profiler.Backward, comm, e, e+xfer)
			}
		}
		end := load + makespan
		if end > free {
			add(step, 1, "recv", profiler.KindDevice, profiler.Comm, compute, free, end)
		}
		add(step, 1, "allreduce_grads", profiler.KindDevice, profiler.Comm, compute, end, end+allreduce)
		add(step, 1, "AllReduce", profiler.KindCollective, profiler.Comm, comm, end, end+allreduce)
		o := add(step, 1, "optimizer", profiler.KindDevice, profiler.Optimizer, compute, end+allreduce, end+allreduce+opt)
		add(o, 2, "sgd", profiler.KindDevice, profiler.Optimizer, compute, end+allreduce, end+allreduce+opt)
		run.wantBusy[st], run.wantWall[st] = busy, wall
	}
	return run
}

func TestBusyOnSimulatedSchedules(t *testing.T) {
	for _, c := range []struct {
		name    string
		p, v, m int
		gpipe   bool
	}{
		{"1f1b pp2", 2, 1, 4, false},
		{"1f1b pp4", 4, 1, 8, false},
		{"interleaved pp4 vpp2", 4, 2, 8, false},
		{"gpipe pp4", 4, 1, 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sched *schedule.Schedule
			var err error
			if c.gpipe {
				sched, err = schedule.GPipe(c.p, c.v, c.m)
			} else {
				sched, err = schedule.Interleaved1F1B(c.p, c.v, c.m)
			}
			if err != nil {
				t.Fatal(err)
			}
			run := simulatedStep(t, sched, 300*us, 600*us, 50*us, 40*us, 120*us, 70*us, 30*us)
			check := func(how string, got []profiler.RankSteps) {
				t.Helper()
				if len(got) != c.p {
					t.Fatalf("%s: %d ranks, want %d", how, len(got), c.p)
				}
				ideal := schedule.IdealBubbleFraction(c.p, c.v, c.m)
				for _, rs := range got {
					if rs.Busy != run.wantBusy[rs.Rank] || rs.Wall != run.wantWall[rs.Rank] || rs.Steps != 1 || rs.Stage != rs.Rank {
						t.Errorf("%s: rank %d: busy %v wall %v steps %d stage %d; want busy %v wall %v, 1 step, stage %d",
							how, rs.Rank, rs.Busy, rs.Wall, rs.Steps, rs.Stage, run.wantBusy[rs.Rank], run.wantWall[rs.Rank], rs.Rank)
					}
					// Uniform costs: no rank can idle less than the schedule forces.
					if rs.IdleFraction() < ideal {
						t.Errorf("%s: rank %d idles %.4f of the step, below the ideal bubble %.4f", how, rs.Rank, rs.IdleFraction(), ideal)
					}
				}
			}
			check("in order", profiler.StepBreakdown(run.records))

			// Any order within a batch.
			shuffled := append([]profiler.Record(nil), run.records...)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			check("shuffled", profiler.StepBreakdown(shuffled))

			// Over several batches, the step ranges in the last one, as the
			// profiler delivers them: the accountant gives the same answer.
			var rest, steps []profiler.Record
			for _, r := range shuffled {
				if r.Depth == 0 {
					steps = append(steps, r)
				} else {
					rest = append(rest, r)
				}
			}
			a := profiler.NewStepAccountant()
			got := map[int]profiler.RankSteps{}
			emit := func(st profiler.StepTime) {
				got[st.Rank] = profiler.RankSteps{Rank: st.Rank, Stage: st.Stage, Steps: 1, Wall: st.Wall(), Busy: st.Busy}
			}
			for i := 0; i < len(rest); i += 7 {
				for j := i; j < min(i+7, len(rest)); j++ {
					if a.Add(&rest[j]) {
						t.Fatalf("record %s arrived late with no step accounted", rest[j].Name)
					}
				}
				a.Finish(emit, nil)
				if len(got) != 0 {
					t.Fatalf("a step was accounted before its step range arrived")
				}
			}
			for i := range steps {
				a.Add(&steps[i])
			}
			a.Finish(emit, nil)
			var list []profiler.RankSteps
			for r := range c.p {
				list = append(list, got[r])
			}
			check("batched", list)
		})
	}
}

// Busy time against a brute-force count on a microsecond grid, over random
// layouts of compute, transfers and waits on two streams.
func TestBusyAgainstGrid(t *testing.T) {
	const lo, hi = 10, 90 // the step, in µs
	acts := []struct {
		kind profiler.Kind
		ph   profiler.Phase
	}{
		{profiler.KindDevice, profiler.Forward},
		{profiler.KindDevice, profiler.Backward},
		{profiler.KindDevice, profiler.Optimizer},
		{profiler.KindDevice, profiler.Comm},      // wait
		{profiler.KindP2P, profiler.Forward},      // transfer
		{profiler.KindCollective, profiler.Comm},  // transfer
		{profiler.KindDevice, profiler.PhaseNone}, // neither
		{profiler.KindHost, profiler.Forward},     // host only: neither
	}
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		var compute, other [2][100]bool
		recs := []profiler.Record{{ID: 1, Name: profiler.StepName, Labels: profiler.NoLabels, HostStart: lo * us, HostEnd: hi * us}}
		recs[0].Step = 3
		for i := range 14 {
			a := acts[rng.IntN(len(acts))]
			s := rng.IntN(95)
			e := min(s+1+rng.IntN(25), 100)
			stream := rng.IntN(2)
			l := profiler.NoLabels
			l.Step, l.Phase = 3, a.ph
			r := profiler.Record{ID: uint64(i + 2), Parent: 1, Depth: 1 + rng.IntN(2), Name: fmt.Sprint("r", i), Kind: a.kind, Labels: l,
				HostStart: time.Duration(s) * us, HostEnd: time.Duration(e) * us}
			if a.kind != profiler.KindHost {
				r.Stream, r.HasDevice, r.DeviceStart, r.DeviceEnd = uint64(stream+1), true, time.Duration(s)*us, time.Duration(e)*us
			}
			recs = append(recs, r)
			for m := s; m < e; m++ {
				switch {
				case a.kind == profiler.KindHost || a.ph == profiler.PhaseNone:
				case a.kind == profiler.KindDevice && a.ph != profiler.Comm:
					compute[stream][m] = true
				default:
					other[stream][m] = true
				}
			}
		}
		n := 0
		for m := lo; m < hi; m++ {
			if compute[0][m] && !other[0][m] || compute[1][m] && !other[1][m] {
				n++
			}
		}
		got := profiler.StepBreakdown(recs)
		if len(got) != 1 || got[0].Busy != time.Duration(n)*us || got[0].Wall != (hi-lo)*us {
			t.Errorf("seed %d: %+v, want busy %dµs of %dµs", seed, got, n, hi-lo)
		}
	}
}

func TestActivity(t *testing.T) {
	dev := func(kind profiler.Kind, ph profiler.Phase) *profiler.Record {
		r := &profiler.Record{Kind: kind, HasDevice: true, DeviceEnd: us}
		r.Phase = ph
		return r
	}
	hostOnly := dev(profiler.KindDevice, profiler.Forward)
	hostOnly.HasDevice = false
	for _, c := range []struct {
		r    *profiler.Record
		want profiler.Activity
	}{
		{dev(profiler.KindDevice, profiler.Forward), profiler.ActivityCompute},
		{dev(profiler.KindDevice, profiler.Backward), profiler.ActivityCompute},
		{dev(profiler.KindDevice, profiler.Optimizer), profiler.ActivityCompute},
		{dev(profiler.KindDevice, profiler.Comm), profiler.ActivityWait},
		{dev(profiler.KindDevice, profiler.PhaseNone), profiler.ActivityNone},
		{dev(profiler.KindP2P, profiler.Forward), profiler.ActivityTransfer},
		{dev(profiler.KindCollective, profiler.Optimizer), profiler.ActivityTransfer},
		{hostOnly, profiler.ActivityNone},
		{&profiler.Record{Kind: profiler.KindHost}, profiler.ActivityNone},
	} {
		if got := c.r.Activity(); got != c.want {
			t.Errorf("%v %v (device %v): %v, want %v", c.r.Kind, c.r.Phase, c.r.HasDevice, got, c.want)
		}
	}
}

func TestBusyIntervals(t *testing.T) {
	ms := func(a, b int) profiler.Interval {
		return profiler.Interval{Start: time.Duration(a) * time.Millisecond, End: time.Duration(b) * time.Millisecond}
	}
	work := []profiler.StreamWork{
		{Stream: 1, Activity: profiler.ActivityCompute, Interval: ms(0, 10)},
		{Stream: 1, Activity: profiler.ActivityTransfer, Interval: ms(3, 5)}, // not computing meanwhile
		{Stream: 1, Activity: profiler.ActivityWait, Interval: ms(9, 12)},
		{Stream: 2, Activity: profiler.ActivityCompute, Interval: ms(8, 14)},
		{Stream: 2, Activity: profiler.ActivityNone, Interval: ms(20, 30)},     // ignored
		{Stream: 3, Activity: profiler.ActivityTransfer, Interval: ms(12, 20)}, // another stream: no effect
	}
	orig := append([]profiler.StreamWork(nil), work...)
	got := profiler.BusyIntervals(nil, work)
	want := []profiler.Interval{ms(0, 3), ms(5, 14)}
	if !slices.Equal(got, want) {
		t.Errorf("BusyIntervals = %v, want %v", got, want)
	}
	if !slices.Equal(work, orig) {
		t.Errorf("BusyIntervals modified its input")
	}
}

// BusyIntervals reuses its working room from call to call (a pool): calls
// on other goroutines, with other work, in between or at once, change
// nothing of what each returns.
func TestBusyIntervalsConcurrent(t *testing.T) {
	ms := func(a, b int) profiler.Interval {
		return profiler.Interval{Start: time.Duration(a) * time.Millisecond, End: time.Duration(b) * time.Millisecond}
	}
	cases := []struct {
		work []profiler.StreamWork
		want []profiler.Interval
	}{
		{
			// Two streams, each with compute cut by its own transfer.
			work: []profiler.StreamWork{
				{Stream: 1, Activity: profiler.ActivityCompute, Interval: ms(0, 10)},
				{Stream: 1, Activity: profiler.ActivityTransfer, Interval: ms(3, 5)},
				{Stream: 2, Activity: profiler.ActivityCompute, Interval: ms(20, 30)},
				{Stream: 2, Activity: profiler.ActivityWait, Interval: ms(22, 28)},
			},
			want: []profiler.Interval{ms(0, 3), ms(5, 10), ms(20, 22), ms(28, 30)},
		},
		{
			// One stream, compute only, overlapping.
			work: []profiler.StreamWork{
				{Stream: 7, Activity: profiler.ActivityCompute, Interval: ms(40, 50)},
				{Stream: 7, Activity: profiler.ActivityCompute, Interval: ms(45, 60)},
			},
			want: []profiler.Interval{ms(40, 60)},
		},
		{work: nil, want: nil},
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := cases[(g+i)%len(cases)]
				if got := profiler.BusyIntervals(nil, c.work); !slices.Equal(got, c.want) {
					select {
					case errs <- fmt.Sprintf("goroutine %d call %d: %v, want %v", g, i, got, c.want):
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
