package cycle_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// numberedJob is two ranks of a job that marks no steps: two broadcasts
// on "dp" first (sequence numbers 0 and 1), then a step every 100 ms of
// three all-reduces on "dp" and a transfer from rank 0 to rank 1 on
// "pp", and a kernel on each rank. Each record's ID is 1000·step + its
// place in the step (steps from 1; 0 for the broadcasts), so a test knows
// every record's step without asking the code under test.
func numberedJob(steps int) []profiler.Record { return numberedJobLate(steps, 0) }

// numberedJobLate is numberedJob with rank 1's receive late by recvLate
// (its longest pause before the receive, not before the step).
func numberedJobLate(steps int, recvLate time.Duration) []profiler.Record {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	coll := func(rank int, id uint64, at time.Duration, c profiler.Collective) {
		kind := profiler.KindCollective
		if c.Peer >= 0 {
			kind = profiler.KindP2P
		}
		c.GroupSize, c.GroupRank = 2, int32(rank)
		recs = append(recs, profiler.Record{ID: id, Name: c.Op, Kind: kind, Rank: rank, Labels: profiler.NoLabels,
			HostStart: at, HostEnd: at + ms(1), Collective: c})
	}
	for rank := range 2 {
		for j := range 2 {
			coll(rank, uint64(j+1), ms(float64(10*j)), profiler.Collective{Op: "Broadcast", Group: "dp", Bytes: 64, Peer: -1, Root: 0, Seq: uint64(j)})
		}
	}
	for s := 1; s <= steps; s++ {
		for rank := range 2 {
			t0 := ms(100*float64(s) + 0.3*float64(rank))
			for j := range 3 {
				coll(rank, uint64(1000*s+j), t0+ms(float64(10*j)), profiler.Collective{Op: "AllReduce", Group: "dp",
					Bytes: int64(1 << (20 + j)), Peer: -1, Root: -1, Seq: uint64(2 + 3*(s-1) + j)})
			}
			c := profiler.Collective{Op: "Send", Group: "pp", Bytes: 4096, Peer: 1, Root: -1, Seq: uint64(s - 1)}
			at := t0 + ms(30)
			if rank == 1 {
				c.Op, c.Peer = "Recv", 0
				at += recvLate
			}
			coll(rank, uint64(1000*s+3), at, c)
			recs = append(recs, profiler.Record{ID: uint64(1000*s + 4), Name: "gemm", Kind: profiler.KindKernel, Rank: rank,
				Labels: profiler.NoLabels, HostStart: t0 + ms(5), HostEnd: t0 + ms(5), HasDevice: true, DeviceStart: t0 + ms(6), DeviceEnd: t0 + ms(9)})
		}
	}
	return recs
}

// Every rank numbers the same operation alike, a step's operations
// (from the first after its pause) share a number, consecutive steps
// count up by one, and the number is how many cycles of three the
// communicator's operations before the step make: step s follows
// 2 + 3(s−1) of them, ⌊(3s−1)/3⌋ = s−1 cycles (the two broadcasts do not
// make one).
func TestNumberAgreesAcrossRanks(t *testing.T) {
	const steps = 40
	s := cycle.NewSink(0)
	recs := numberedJob(steps)
	first := 0 // the first step numbered
	for i := 0; i < len(recs); i += 7 {
		s.Consume(recs[i:min(i+7, len(recs))])
		for _, r := range recs[:min(i+7, len(recs))] {
			if r.ID >= 1000 && r.Kind != profiler.KindKernel {
				if _, ok := s.Number(&r); ok && first == 0 {
					first = int(r.ID / 1000)
				}
			}
		}
	}
	// The cycle is found once a few steps are TrackLag behind the latest.
	if first == 0 || first > 20 {
		t.Fatalf("the first step numbered while the records came: %d, want 1 to 20", first)
	}
	for _, r := range recs {
		n, ok := s.Number(&r)
		step := int64(r.ID / 1000)
		switch {
		case r.Kind == profiler.KindKernel:
			if ok {
				t.Errorf("a kernel numbered %d", n)
			}
		case step == 0: // a broadcast: in no cycle
			if ok {
				t.Errorf("broadcast seq %d numbered %d", r.Collective.Seq, n)
			}
		case !ok || n != step-1:
			t.Errorf("rank %d %s seq %d of step %d numbered %d, %v", r.Rank, r.Collective.Op, r.Collective.Seq, step, n, ok)
		}
	}
	// A record of no group, or not an operation, has none.
	if _, ok := s.Number(&profiler.Record{Kind: profiler.KindCollective, Collective: profiler.Collective{Op: "AllReduce", Peer: -1}}); ok {
		t.Error("a collective of no group numbered")
	}
	// Nor does a communicator no cycle holds.
	other := profiler.Record{Kind: profiler.KindCollective, Collective: profiler.Collective{Op: "AllReduce", Group: "tp", Peer: -1, Seq: 5}}
	if _, ok := s.Number(&other); ok {
		t.Error("a communicator outside the cycle numbered")
	}
}

// NCCL numbers each function of a communicator apart, and the plugin's
// collector passes its number on as 16·n plus the function's code: the
// all-reduces' numbers advance by 48 a step here, by 1 in the trainer's
// numbering of every operation of a group. Both number the steps alike.
func TestNumberNCCLSequence(t *testing.T) {
	recs := numberedJob(40)
	for i := range recs {
		if c := &recs[i].Collective; c.Op == "AllReduce" {
			c.Seq = (c.Seq-2)<<4 | 2
		} else if c.Op == "Broadcast" {
			c.Seq = c.Seq<<4 | 4
		}
	}
	s := cycle.NewSink(0)
	for i := 0; i < len(recs); i += 7 {
		s.Consume(recs[i:min(i+7, len(recs))])
	}
	s.Finish()
	numbered := 0
	for _, r := range recs {
		n, ok := s.Number(&r)
		if step := int64(r.ID / 1000); ok && step > 0 {
			numbered++
			if n != step-1 {
				t.Errorf("rank %d %s seq %d of step %d numbered %d", r.Rank, r.Collective.Op, r.Collective.Seq, step, n)
			}
		}
	}
	if numbered < 2*4*20 {
		t.Errorf("%d of 320 operations numbered, want the last 20 steps' at least", numbered)
	}
}

// Where the ranks' cycles begin at different operations (rank 1 pauses
// before its receive, rank 0 before the step's first all-reduce), the
// ranks still number every operation alike: the first cycle found
// numbers each communicator for all.
func TestNumberAgreesWhereCyclesBeginApart(t *testing.T) {
	recs := numberedJobLate(40, 55*time.Millisecond)
	s := cycle.NewSink(0)
	for i := 0; i < len(recs); i += 7 {
		s.Consume(recs[i:min(i+7, len(recs))])
	}
	s.Finish()
	type key struct {
		group string
		seq   uint64
	}
	seen := map[key]int64{}
	counted := 0
	for _, r := range recs {
		n, ok := s.Number(&r)
		if !ok || r.ID < 1000 {
			continue
		}
		k := key{r.Collective.Group, r.Collective.Seq}
		if m, dup := seen[k]; dup {
			counted++
			if m != n {
				t.Errorf("%s seq %d numbered %d on one rank and %d on the other", k.group, k.seq, m, n)
			}
		}
		seen[k] = n
	}
	if counted != 4*40 {
		t.Errorf("%d operations numbered on both ranks, want %d", counted, 4*40)
	}
}
