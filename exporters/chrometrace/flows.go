package chrometrace

import (
	"cmp"
	"slices"

	"github.com/trainscope/trainscope/profiler"
)

// Point-to-point operations as profiler.Collective.Op names them.
const (
	opSend = "Send"
	opRecv = "Recv"
)

// groupMember is a rank of a process group, by group name and its rank
// within the group.
type groupMember struct {
	group string
	gid   uint64 // profiler.Collective.GroupID
	rank  int32
}

// link matches sends with receives and the participants of collectives,
// and marks flow arrows on their anchor events. It returns the number of
// arrows and of ranges left without a partner.
//
// A Send carries the group ranks of both ends (GroupRank → Peer), a Recv
// too (Peer → GroupRank). A rank issues its sends to one peer in order and
// the peer receives them in order, so the k-th Send from a to b in a group
// (by Seq) matches the k-th Recv on b from a, whatever the Seqs are (a
// ccl.ProcessGroup numbers Sends and Recvs per peer, older traces every
// operation of the rank). A collective is one call with the same Seq on
// every rank of its group.
func (tr *trace) link(records []profiler.Record) (flows, unmatched int) {
	type p2pKey struct {
		group    string
		gid      uint64
		src, dst int32
	}
	type collKey struct {
		group string
		gid   uint64
		seq   uint64
		op    string
	}
	sends := map[p2pKey][]int32{}
	recvs := map[p2pKey][]int32{}
	colls := map[collKey][]int32{}
	tr.ranks = map[groupMember]int{}
	for i := range records {
		r := &records[i]
		c := &r.Collective
		switch {
		case r.Kind == profiler.KindP2P && c.Op == opSend:
			k := p2pKey{c.Group, c.GroupID, c.GroupRank, c.Peer}
			sends[k] = append(sends[k], int32(i))
		case r.Kind == profiler.KindP2P && c.Op == opRecv:
			k := p2pKey{c.Group, c.GroupID, c.Peer, c.GroupRank}
			recvs[k] = append(recvs[k], int32(i))
		case r.Kind == profiler.KindCollective:
			k := collKey{c.Group, c.GroupID, c.Seq, c.Op}
			colls[k] = append(colls[k], int32(i))
		default:
			continue
		}
		tr.ranks[groupMember{c.Group, c.GroupID, c.GroupRank}] = r.Rank
	}
	bySeq := func(a, b int32) int {
		ra, rb := &records[a], &records[b]
		if c := cmp.Compare(ra.Collective.Seq, rb.Collective.Seq); c != 0 {
			return c
		}
		if c := cmp.Compare(ra.Rank, rb.Rank); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	// Chains of anchor events, each ordered by output position.
	var chains [][]int32
	for k, ss := range sends {
		rs := recvs[k]
		slices.SortFunc(ss, bySeq)
		slices.SortFunc(rs, bySeq)
		n := min(len(ss), len(rs))
		unmatched += len(ss) + len(rs) - 2*n
		for j := range n {
			chains = append(chains, []int32{tr.anchor[ss[j]], tr.anchor[rs[j]]})
		}
		delete(recvs, k)
	}
	for _, rs := range recvs {
		unmatched += len(rs)
	}
	for _, parts := range colls {
		if len(parts) < 2 {
			if records[parts[0]].Collective.GroupSize > 1 {
				unmatched++
			}
			continue
		}
		chain := make([]int32, len(parts))
		for j, p := range parts {
			chain[j] = tr.anchor[p]
		}
		chains = append(chains, chain)
	}
	// An arrow must leave the event met first: Perfetto binds a flow's end
	// only after its start, and draws arrows from the earlier slice anyway.
	for _, c := range chains {
		slices.Sort(c)
	}
	slices.SortFunc(chains, func(a, b []int32) int { return cmp.Compare(a[0], b[0]) })
	for i, c := range chains {
		id := uint32(i + 1)
		for j, e := range c {
			ev := &tr.events[e]
			ev.bindID = id
			ev.flowOut = j < len(c)-1
			ev.flowIn = j > 0
		}
		flows += len(c) - 1
	}
	return flows, unmatched
}
