package pipeline

import (
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/pipeline/schedule"
)

// channel is the ordered link from one stage to another.
type channel struct{ from, to int }

// replayEager runs every stage's batches with eager sends: ops run one at a
// time in issue order, a send never waits, a receive waits for the next
// message on its link. It returns an error on a deadlock or when a receive
// gets a message meant for another one.
func replayEager(all [][][]p2pOp) error {
	type cursor struct{ batch, op int }
	pos := make([]cursor, len(all))
	queues := map[channel][]transfer{}
	for {
		progress, done := false, true
		for st, bs := range all {
			for pos[st].batch < len(bs) {
				b := bs[pos[st].batch]
				if pos[st].op == len(b) {
					pos[st] = cursor{batch: pos[st].batch + 1}
					continue
				}
				op := b[pos[st].op]
				if op.send {
					ch := channel{st, op.peer}
					queues[ch] = append(queues[ch], op.transfer)
				} else {
					ch := channel{op.peer, st}
					q := queues[ch]
					if len(q) == 0 {
						break
					}
					if q[0] != op.transfer {
						return fmt.Errorf("stage %d receives %+v from stage %d, which sent %+v", st, op.transfer, op.peer, q[0])
					}
					queues[ch] = q[1:]
				}
				pos[st].op++
				progress = true
			}
			if pos[st].batch < len(bs) {
				done = false
			}
		}
		if done {
			return nil
		}
		if !progress {
			return fmt.Errorf("deadlock with eager sends at batches %v", pos)
		}
	}
}

// replayRendezvous runs every stage's batches with rendezvous semantics: a
// send and its receive complete together, only while both are in the
// batch their ranks are executing; a batch ends when all its ops have
// completed. The k-th send from a to b matches the k-th receive at b from
// a, as in NCCL; the matched transfers must be the same.
func replayRendezvous(all [][][]p2pOp) error {
	cur := make([]int, len(all))
	done := make([][]bool, len(all)) // per op of the current batch
	// seq[st][batch][op] is the op's index on its link.
	seq := make([][][]int, len(all))
	for st, bs := range all {
		count := map[channel]int{}
		seq[st] = make([][]int, len(bs))
		for i, b := range bs {
			for _, op := range b {
				ch := channel{st, op.peer}
				if !op.send {
					ch = channel{op.peer, st}
				}
				key := ch
				if !op.send {
					key = channel{-1 - ch.from, ch.to} // separate counters for receives
				}
				seq[st][i] = append(seq[st][i], count[key])
				count[key]++
			}
		}
	}
	reset := func(st int) {
		if cur[st] < len(all[st]) {
			done[st] = make([]bool, len(all[st][cur[st]]))
		}
	}
	for st := range all {
		reset(st)
	}
	for {
		progress, finished := false, true
		for st, bs := range all {
			if cur[st] >= len(bs) {
				continue
			}
			finished = false
			b := bs[cur[st]]
			for i, op := range b {
				if done[st][i] || !op.send {
					continue
				}
				peer := op.peer
				if cur[peer] >= len(all[peer]) {
					continue
				}
				for j, pop := range all[peer][cur[peer]] {
					if pop.send || pop.peer != st || done[peer][j] || seq[peer][cur[peer]][j] != seq[st][cur[st]][i] {
						continue
					}
					if pop.transfer != op.transfer {
						return fmt.Errorf("stage %d's send %+v matches stage %d's receive %+v", st, op.transfer, peer, pop.transfer)
					}
					done[st][i], done[peer][j] = true, true
					progress = true
				}
			}
		}
		for st, bs := range all {
			if cur[st] >= len(bs) {
				continue
			}
			all := true
			for _, d := range done[st] {
				all = all && d
			}
			if all {
				cur[st]++
				reset(st)
				progress = true
			}
		}
		if finished {
			return nil
		}
		if !progress {
			return fmt.Errorf("deadlock with rendezvous sends at batches %v", cur)
		}
	}
}

func stageBatches(t *testing.T, s *schedule.Schedule) [][][]p2pOp {
	t.Helper()
	rounds, err := planRounds(s)
	if err != nil {
		t.Fatal(err)
	}
	all := make([][][]p2pOp, len(rounds))
	for st, rs := range rounds {
		if len(rs) != len(rounds[0]) {
			t.Fatalf("stage %d has %d rounds, stage 0 %d", st, len(rs), len(rounds[0]))
		}
		for _, rd := range rs {
			all[st] = append(all[st], rd.batch)
		}
	}
	return all
}

func TestPlanReplays(t *testing.T) {
	for p := 1; p <= 5; p++ {
		for v := 1; v <= 3; v++ {
			for m := 1; m <= 12; m++ {
				for _, name := range []string{Schedule1F1B, ScheduleGPipe} {
					cfg := Config{Stages: p, Chunks: v, Microbatches: m, Schedule: name}
					s, err := cfg.schedule()
					if err != nil {
						continue // interleaved needs m a multiple of p
					}
					all := stageBatches(t, s)
					if err := replayEager(all); err != nil {
						t.Errorf("%s p=%d v=%d m=%d: %v", name, p, v, m, err)
					}
					if err := replayRendezvous(all); err != nil {
						t.Errorf("%s p=%d v=%d m=%d: %v", name, p, v, m, err)
					}
				}
			}
		}
	}
}

// The replays can fail: without batching, 1F1B deadlocks under rendezvous
// sends (both neighbours send first), and swapped messages are caught.
func TestPlanReplaysDetectProblems(t *testing.T) {
	s, err := schedule.Interleaved1F1B(2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	all := stageBatches(t, s)
	unbatched := make([][][]p2pOp, len(all))
	for st, bs := range all {
		for _, b := range bs {
			for _, op := range b {
				unbatched[st] = append(unbatched[st], []p2pOp{op})
			}
		}
	}
	if err := replayRendezvous(unbatched); err == nil {
		t.Error("unbatched 1F1B replayed without deadlock under rendezvous sends")
	}
	if err := replayEager(unbatched); err != nil {
		t.Errorf("unbatched 1F1B with eager sends: %v", err)
	}

	swapped := stageBatches(t, s)
	var sends []*p2pOp
	for _, b := range swapped[0] {
		for i := range b {
			if b[i].send {
				sends = append(sends, &b[i])
			}
		}
	}
	sends[0].transfer, sends[1].transfer = sends[1].transfer, sends[0].transfer
	if err := replayEager(swapped); err == nil {
		t.Error("eager replay accepted swapped sends")
	}
	if err := replayRendezvous(swapped); err == nil {
		t.Error("rendezvous replay accepted swapped sends")
	}
}

// Every stage runs its actions in the schedule's order, each after its
// input has arrived in an earlier round (or was made on the same rank in an
// earlier round).
func TestPlanRoundsOrder(t *testing.T) {
	for _, c := range []struct {
		name    string
		p, v, m int
	}{
		{Schedule1F1B, 2, 2, 8}, {Schedule1F1B, 4, 1, 6}, {Schedule1F1B, 3, 3, 6},
		{ScheduleGPipe, 2, 2, 5}, {ScheduleGPipe, 1, 3, 2}, {Schedule1F1B, 1, 2, 3},
	} {
		cfg := Config{Stages: c.p, Chunks: c.v, Microbatches: c.m, Schedule: c.name}
		s, err := cfg.schedule()
		if err != nil {
			t.Fatal(err)
		}
		rounds, err := planRounds(s)
		if err != nil {
			t.Fatal(err)
		}
		ready := map[transfer]int{} // round from which a transfer can be used
		for _, rs := range rounds {
			for r, rd := range rs {
				for _, op := range rd.batch {
					if !op.send {
						ready[op.transfer] = r + 1
					}
				}
				if rd.action != nil && rd.action.send != nil && c.p == 1 {
					ready[*rd.action.send] = r + 1
				}
			}
		}
		for st, rs := range rounds {
			var got []schedule.Action
			for r, rd := range rs {
				if rd.action == nil {
					continue
				}
				got = append(got, rd.action.Action)
				if in := rd.action.recv; in != nil {
					at, ok := ready[*in]
					if !ok || at > r {
						t.Errorf("%s p=%d v=%d m=%d stage %d: %v runs in round %d, its input is ready from round %d (received: %v)",
							c.name, c.p, c.v, c.m, st, rd.action.Action, r, at, ok)
					}
				}
			}
			if want := s.Actions(st); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s p=%d v=%d m=%d stage %d runs %v, schedule says %v", c.name, c.p, c.v, c.m, st, got, want)
			}
		}
	}
}
