package analysis

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// synthShape is one step of a synthetic tensor- and pipeline-parallel job,
// for TestAgainstReference and the per-step benchmarks: stages × tp ranks,
// the ranks of a stage one tensor-parallel group. Per chunk and
// microbatch every stage runs a forward and then (in GPipe order) a
// backward of layers layers, each of kernels compute kernels with gap of
// idle after each, then (tp > 1) an all-reduce of its group; a stage
// hands each microbatch on to the next (back to the previous, in the
// backward) by a send and a receive between ranks of the same group
// rank. Every rank then runs its optimizer and, with world, an
// all-reduce of all ranks. Each rank keeps its own clock, so stages
// overlap as a pipeline does and a rank's lateness passes on through its
// sends and collectives.
type synthShape struct {
	stages, tp      int
	chunks, mbs     int
	layers, kernels int
	world           bool
	// kernel is a kernel's length, jitter the most added to it at random;
	// gap the idle after each kernel, xfer a transfer's length once both
	// sides are there. Every time is a multiple of unit (ties and
	// sub-microsecond distances come with a small one).
	kernel, jitter, gap, xfer, unit time.Duration
	// asyncSend: a sender goes on once its send is posted, without
	// waiting for the receive (else it waits for the transfer's end).
	asyncSend bool
	// waits: a receiving rank records its wait for the data on its
	// compute stream too (a communication-phase device range), as the
	// trainer does.
	waits bool
	// traced: the computation is a wrapped job's traced kernels, labelled
	// with their stage alone, spread over streams streams (1 where 0)
	// where they overlap.
	traced  bool
	streams int
}

func (s synthShape) ranks() int { return s.stages * s.tp }

// records makes one step (label step) of the shape, every rank's records in
// the order they were made, rank after rank.
func (s synthShape) records(rng *rand.Rand, step int) []profiler.Record {
	n := s.ranks()
	t := make([]time.Duration, n)
	ids := make([]uint64, n)
	per := make([][]profiler.Record, n)
	seq := map[string]uint64{}
	q := func(d time.Duration) time.Duration { return d / s.unit * s.unit }
	add := func(r profiler.Record) {
		ids[r.Rank]++
		r.ID = ids[r.Rank]
		r.Device = runtime.Device{Type: runtime.CPU, Index: r.Rank}
		r.Step = int32(step)
		r.HostEnd = r.HostStart + s.unit
		per[r.Rank] = append(per[r.Rank], r)
	}
	stageOf := func(r int) int { return r / s.tp }
	kernels := make([]int, n)
	kernel := func(r, c, mb int, ph profiler.Phase) {
		d := q(s.kernel + time.Duration(rng.Int64N(int64(s.jitter)+1)))
		rec := profiler.Record{Name: ph.String(), Depth: 1, Kind: profiler.KindDevice, Rank: r, Stream: 1,
			Labels:    profiler.Labels{Stage: int16(stageOf(r)), Chunk: int16(c), Microbatch: int32(mb), Phase: ph},
			HostStart: t[r], HasDevice: true, DeviceStart: t[r], DeviceEnd: t[r] + d}
		if s.traced {
			rec.Name, rec.Kind, rec.Stream = "kernel", profiler.KindKernel, uint64(1+kernels[r]%max(s.streams, 1))
			rec.Chunk, rec.Microbatch, rec.Phase = profiler.None, profiler.None, profiler.PhaseNone
			d /= time.Duration(max(s.streams, 1))
		}
		kernels[r]++
		add(rec)
		t[r] += d + q(s.gap)
	}
	// allReduce is one collective of ranks, each arriving when it is free
	// and leaving a transfer after the last arrival (give or take).
	allReduce := func(group string, ranks []int, c, mb int) {
		k := seq[group]
		seq[group]++
		last := time.Duration(0)
		for _, r := range ranks {
			last = max(last, t[r])
		}
		for i, r := range ranks {
			end := last + q(s.xfer+time.Duration(rng.Int64N(int64(s.unit)*2+1)))
			add(profiler.Record{Name: "AllReduce", Depth: 2, Kind: profiler.KindCollective, Rank: r, Stream: 2,
				Labels:    profiler.Labels{Stage: int16(stageOf(r)), Chunk: int16(c), Microbatch: int32(mb), Phase: profiler.Comm},
				HostStart: t[r], HasDevice: true, DeviceStart: t[r], DeviceEnd: end,
				Collective: profiler.Collective{Op: "AllReduce", Group: group, GroupSize: int32(len(ranks)), GroupRank: int32(i), Peer: -1, Root: -1, Seq: k}})
			t[r] = end
		}
	}
	p2p := func(from, to, c, mb int) {
		group := "pp" + strconv.Itoa(min(stageOf(from), stageOf(to))) + "." + strconv.Itoa(from%s.tp)
		gf, gt := int32(0), int32(1)
		if stageOf(from) > stageOf(to) {
			gf, gt = 1, 0
		}
		end := max(t[from], t[to]) + q(s.xfer)
		for _, x := range []struct {
			op       string
			r        int
			me, peer int32
		}{{"Send", from, gf, gt}, {"Recv", to, gt, gf}} {
			add(profiler.Record{Name: x.op, Depth: 2, Kind: profiler.KindP2P, Rank: x.r, Stream: 2,
				Labels:    profiler.Labels{Stage: int16(stageOf(x.r)), Chunk: int16(c), Microbatch: int32(mb), Phase: profiler.Comm},
				HostStart: t[x.r], HasDevice: true, DeviceStart: t[x.r], DeviceEnd: end,
				Collective: profiler.Collective{Op: x.op, Group: group, GroupSize: 2, GroupRank: x.me, Peer: x.peer, Root: -1, Seq: seq[group]}})
			seq[group]++
		}
		if s.waits {
			add(profiler.Record{Name: "wait", Depth: 1, Kind: profiler.KindDevice, Rank: to, Stream: 1,
				Labels:    profiler.Labels{Stage: int16(stageOf(to)), Chunk: int16(c), Microbatch: int32(mb), Phase: profiler.Comm},
				HostStart: t[to], HasDevice: true, DeviceStart: t[to], DeviceEnd: end})
		}
		t[to] = end
		if s.asyncSend {
			t[from] += s.unit
		} else {
			t[from] = end
		}
	}
	stage := func(st, c, mb int, ph profiler.Phase) {
		ranks := make([]int, s.tp)
		for i := range ranks {
			ranks[i] = st*s.tp + i
		}
		for range s.layers {
			for _, r := range ranks {
				for range s.kernels {
					kernel(r, c, mb, ph)
				}
			}
			if s.tp > 1 {
				allReduce("tp"+strconv.Itoa(st), ranks, c, mb)
			}
		}
	}
	for c := range s.chunks {
		for mb := range s.mbs {
			for st := range s.stages {
				stage(st, c, mb, profiler.Forward)
				if st+1 < s.stages {
					for i := range s.tp {
						p2p(st*s.tp+i, (st+1)*s.tp+i, c, mb)
					}
				}
			}
		}
		for mb := range s.mbs {
			for st := s.stages - 1; st >= 0; st-- {
				stage(st, c, mb, profiler.Backward)
				if st > 0 {
					for i := range s.tp {
						p2p(st*s.tp+i, (st-1)*s.tp+i, c, mb)
					}
				}
			}
		}
	}
	all := make([]int, n)
	for r := range n {
		all[r] = r
		d := q(s.kernel)
		add(profiler.Record{Name: "optimizer", Depth: 1, Kind: profiler.KindDevice, Rank: r, Stream: 1,
			Labels:    profiler.Labels{Stage: int16(stageOf(r)), Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Optimizer},
			HostStart: t[r], HasDevice: true, DeviceStart: t[r], DeviceEnd: t[r] + d})
		t[r] += d
	}
	if s.world && n > 1 {
		allReduce("world", all, profiler.None, profiler.None)
	}
	var out []profiler.Record
	end := time.Duration(0)
	for r := range n {
		end = max(end, t[r])
	}
	for r := range n {
		ids[r]++
		out = append(out, profiler.Record{ID: ids[r], Name: profiler.StepName, Rank: r, Device: runtime.Device{Type: runtime.CPU, Index: r},
			Labels:    profiler.Labels{Step: int32(step), Stage: int16(stageOf(r)), Chunk: profiler.None, Microbatch: profiler.None},
			HostStart: 0, HostEnd: end + s.unit})
		out = append(out, per[r]...)
	}
	return out
}
