package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Collective is one collective call matched across its ranks: the
// records of one group with one sequence number (profiler.Collective's
// Group and Seq, equal on every rank for one call).
type Collective struct {
	Group string
	// GroupID tells apart communicators of one name
	// (profiler.Collective.GroupID); 0 where names are unique.
	GroupID uint64
	Seq     uint64
	Op      string
	Size    int // ranks in the group
	// Members are the ranks that recorded it, in order of arrival.
	Members []Member
	// Complete reports that every rank of the group recorded it, each
	// once, with the same operation, in an interval that does not end
	// before it starts; otherwise Problem says what is wrong and the
	// figures below are zero.
	Complete bool
	Problem  string
	// Skew is the last arrival less the first; Last is the rank that
	// arrived last (the waiting it caused passes on to the ranks it was
	// itself waiting on, if any: see Rank.Caused).
	Skew time.Duration
	Last int
	// Transfer is the time from the last arrival to the first departure:
	// the part of the call that moved data, once everyone was there.
	Transfer time.Duration
}

// Member is one rank's part in a collective. Arrive and Leave are its
// device interval (the host interval for a range timed on the host only);
// Wait is the time from its arrival to the last rank's, Transfer the rest
// of its time in the call (Leave − max(Arrive, last arrival)).
type Member struct {
	Rank           int
	Arrive, Leave  time.Duration
	Wait, Transfer time.Duration
}

// collKey identifies a collective across ranks: its group (by name, and
// by communicator where names repeat: Collective.GroupID) and sequence
// number.
type collKey struct {
	group string
	gid   uint64
	seq   uint64
}

// groupName is how a problem line names a group: by name, with its
// communicator where one is given (names may repeat).
func groupName(name string, gid uint64) string {
	if gid == 0 {
		return name
	}
	return fmt.Sprintf("%s [communicator %016x]", name, gid)
}

type p2pKey struct {
	group    string
	gid      uint64
	from, to int32 // group ranks
}

// match groups the step's collectives by group and sequence number and
// pairs its sends with their receives.
func match(items []item) ([]Collective, P2P) {
	byKey := map[collKey][]*item{}
	sends, recvs := map[p2pKey][]*item{}, map[p2pKey][]*item{}
	for i := range items {
		it := &items[i]
		if it.coll == nil {
			continue
		}
		c := it.coll
		switch {
		case it.kind == profiler.KindCollective:
			k := collKey{c.group, c.gid, c.seq}
			byKey[k] = append(byKey[k], it)
		case c.op == "Send":
			k := p2pKey{c.group, c.gid, c.grank, c.peer}
			sends[k] = append(sends[k], it)
		case c.op == "Recv":
			k := p2pKey{c.group, c.gid, c.peer, c.grank}
			recvs[k] = append(recvs[k], it)
		}
	}
	keys := make([]collKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b collKey) int {
		if c := cmp.Compare(a.group, b.group); c != 0 {
			return c
		}
		if c := cmp.Compare(a.gid, b.gid); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	out := make([]Collective, 0, len(keys))
	for _, k := range keys {
		out = append(out, collective(k, byKey[k]))
	}
	var p P2P
	for k, s := range sends {
		n := min(len(s), len(recvs[k]))
		p.Matched += n
		p.Unmatched += len(s) - n
	}
	for k, r := range recvs {
		p.Unmatched += len(r) - min(len(r), len(sends[k]))
	}
	return out, p
}

func collective(k collKey, its []*item) Collective {
	c := Collective{Group: k.group, GroupID: k.gid, Seq: k.seq, Op: its[0].coll.op, Size: int(its[0].coll.size), Last: profiler.None}
	seen := map[int]bool{}
	for _, it := range its {
		sp := it.span()
		c.Members = append(c.Members, Member{Rank: it.rank, Arrive: sp.Start, Leave: sp.End})
		switch {
		case c.Problem != "":
		case it.coll.op != c.Op:
			c.Problem = fmt.Sprintf("rank %d called %s, others %s", it.rank, it.coll.op, c.Op)
		case int(it.coll.size) != c.Size:
			c.Problem = fmt.Sprintf("rank %d saw %d ranks in the group, others %d", it.rank, it.coll.size, c.Size)
		case seen[it.rank]:
			c.Problem = fmt.Sprintf("rank %d recorded it twice", it.rank)
		case sp.End < sp.Start:
			// A malformed record: it left before it arrived. Its arrival
			// would set the skew and the others' waits, its departure a
			// clock offset, and neither is a time the rank was there.
			c.Problem = fmt.Sprintf("rank %d's record of it ends before it starts", it.rank)
		}
		seen[it.rank] = true
	}
	// Members arriving at the same instant go in rank order, so that
	// which of them is the last arrival does not depend on the order the
	// records came in.
	slices.SortFunc(c.Members, func(a, b Member) int {
		if c := cmp.Compare(a.Arrive, b.Arrive); c != 0 {
			return c
		}
		return cmp.Compare(a.Rank, b.Rank)
	})
	if c.Problem == "" && len(c.Members) != c.Size {
		var have []int
		for _, m := range c.Members {
			have = append(have, m.Rank)
		}
		slices.Sort(have)
		c.Problem = fmt.Sprintf("%d of %d ranks recorded it (ranks %s); its skew and waits are unknown", len(c.Members), c.Size, intList(have))
	}
	if c.Problem != "" {
		return c
	}
	c.Complete = true
	first, last := c.Members[0], c.Members[len(c.Members)-1]
	c.Skew, c.Last = last.Arrive-first.Arrive, last.Rank
	leave := c.Members[0].Leave
	for i := range c.Members {
		m := &c.Members[i]
		m.Wait = last.Arrive - m.Arrive
		m.Transfer = max(m.Leave-max(m.Arrive, last.Arrive), 0)
		leave = min(leave, m.Leave)
	}
	c.Transfer = max(leave-last.Arrive, 0)
	return c
}
