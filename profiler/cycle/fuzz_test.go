package cycle_test

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// FuzzResult: whatever operations arrive — ranks, kinds, sizes, times in
// any order, equal or far apart — Result, Job and Text neither panic nor
// say a cycle without one: a found rank's cycle has a length, a positive
// median and whole cycles, and a job agrees with at least one rank. The
// cycles counted over the run, in batches of 5 with searches between
// them, are ordered (minimum ≤ quantiles ≤ maximum) and never overlap:
// they sum to no more than the time from the rank's first operation to
// its last. Number never panics, and numbers each line's operations
// in the order of their sequence numbers. Each 4 bytes of input are an operation: its rank (0–3), its
// kind (one of 4), its size class, and the time since the previous one
// in ms.
func FuzzResult(f *testing.F) {
	f.Add([]byte{0, 0, 1, 10, 0, 1, 2, 5, 0, 0, 1, 10, 0, 1, 2, 5, 0, 0, 1, 10, 0, 1, 2, 5, 0, 0, 1, 10, 0, 1, 2, 5})
	f.Add([]byte{0, 0, 1, 10, 1, 0, 1, 100, 0, 0, 1, 10, 1, 0, 1, 100, 0, 0, 1, 10, 1, 0, 1, 100, 0, 0, 1, 10, 1, 0, 1, 100})
	// Rank 0's cycle takes 20 ms, then rank 1's 200 ms: the two agree on
	// no time.
	var apart []byte
	for k := range 16 {
		rank, gap := byte(0), byte(10)
		if k >= 8 {
			rank, gap = 1, 100
		}
		apart = append(apart, rank, byte(k%2), 1, gap)
	}
	f.Add(apart)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 3, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := []string{"AllReduce", "AllGather", "Send", "Recv"}
		var recs []profiler.Record
		at := time.Duration(0)
		seqs := map[[2]int]uint64{}
		for i := 0; i+4 <= len(data); i += 4 {
			at += time.Duration(data[i+3]) * time.Millisecond
			op := ops[data[i+1]%4]
			peer := int32(-1)
			kind := profiler.KindCollective
			if op == "Send" || op == "Recv" {
				peer, kind = 1, profiler.KindP2P
			}
			key := [2]int{int(data[i] % 4), int(data[i+1] % 4)}
			seqs[key] += 1 + uint64(data[i+2]>>7) // now and then one elsewhere
			recs = append(recs, profiler.Record{Name: op, Kind: kind, Rank: int(data[i] % 4), HostStart: at,
				Collective: profiler.Collective{Op: op, Bytes: int64(data[i+2]) << 10, Peer: peer, Root: -1, Group: "g", Seq: seqs[key]}})
		}
		s := cycle.NewSink(16)
		first, last := map[int]time.Duration{}, map[int]time.Duration{}
		for i, r := range recs {
			if _, ok := first[r.Rank]; !ok {
				first[r.Rank] = r.HostStart
			}
			last[r.Rank] = r.HostStart
			if i%5 == 4 || i == len(recs)-1 {
				s.Consume(recs[i-i%5 : i+1])
			}
			if i%40 == 39 {
				s.Result()
			}
		}
		s.Finish()
		res := s.Result()
		type line struct {
			rank int
			op   string
		}
		lastNumber := map[line]int64{}
		for _, r := range recs { // each line's sequence numbers ascend
			n, ok := s.Number(&r)
			if !ok {
				continue
			}
			l := line{r.Rank, r.Collective.Op}
			if m, seen := lastNumber[l]; seen && n < m {
				t.Fatalf("rank %d %s seq %d numbered %d after %d", r.Rank, r.Collective.Op, r.Collective.Seq, n, m)
			}
			lastNumber[l] = n
		}
		for _, r := range res.Ranks {
			run := r.Run
			if run.Cycles < 0 || run.Cycles > 0 && (run.Min < 0 || run.Min > run.P50 || run.P50 > run.P90 || run.P90 > run.P99 || run.P99 > run.Max ||
				run.Max > run.Sum || run.From > run.To || run.Sum > last[r.Rank]-first[r.Rank]) {
				t.Fatalf("rank %d: run %+v over %v", r.Rank, run, last[r.Rank]-first[r.Rank])
			}
		}
		_ = res.Lines()
		for _, r := range res.Ranks {
			if r.Found && (r.Length < 1 || r.Median <= 0 || r.Cycles < cycle.MinRepeats || r.Length%r.Period != 0) {
				t.Fatalf("rank %d: found a cycle of %d (period %d), median %v, %d cycles", r.Rank, r.Length, r.Period, r.Median, r.Cycles)
			}
			if !r.Found && r.Why == "" {
				t.Fatalf("rank %d: no cycle and no reason", r.Rank)
			}
		}
		if j, ok := res.Job(); ok && (j.Agreeing < 1 || j.Agreeing > j.Ranks || j.Median <= 0 || j.MinLength > j.Length || j.Length > j.MaxLength) {
			t.Fatalf("job %+v", j)
		}
		if text := res.Text(); (text == "") != (len(res.Ranks) == 0) {
			t.Fatalf("text %q for %d ranks", text, len(res.Ranks))
		}
	})
}
