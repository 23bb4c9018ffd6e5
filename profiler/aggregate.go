package profiler

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// TagOf is the report group a record belongs to: its tag where one was
// set, otherwise its step ("step 3"), otherwise "all".
func TagOf(r *Record) string {
	switch {
	case r.Tag != "":
		return r.Tag
	case r.Step >= 0:
		return "step " + strconv.Itoa(int(r.Step))
	}
	return "all"
}

// sameGroup reports whether records of tag ta and step sa and of tag tb
// and step sb have the same TagOf, without making the step's tag.
func sameGroup(ta string, sa int32, tb string, sb int32) bool {
	switch {
	case ta != "" && tb != "":
		return ta == tb
	case ta == "" && tb == "":
		return sa == sb || (sa < 0 && sb < 0)
	case ta == "":
		return isStepGroup(tb, sa)
	}
	return isStepGroup(ta, sb)
}

// isStepGroup reports whether tag is TagOf an untagged record of step.
func isStepGroup(tag string, step int32) bool {
	if step < 0 {
		return tag == "all"
	}
	var buf [16]byte
	return string(strconv.AppendInt(append(buf[:0], "step "...), int64(step), 10)) == tag
}

// NameStats aggregates the ranges of one name.
type NameStats struct {
	Name          string
	Count         int
	HostTotal     time.Duration
	DeviceTotal   time.Duration
	DeviceCount   int     // ranges with a measured device time
	HostPercent   float64 // of the group's top-level host time
	DevicePercent float64 // of the group's outermost device time
	// TransferCount counts the device-timed p2p ranges with a transfer end
	// (Collective.TransferEnd: a wrapped run's p2p over a network
	// transport), and TransferTotal sums their time from the device start
	// to the later of the device end and the transfer end.
	TransferCount int
	TransferTotal time.Duration
}

// AvgHost is the mean host time per range.
func (s NameStats) AvgHost() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.HostTotal / time.Duration(s.Count)
}

// AvgTransfer is the mean of TransferTotal per range counted in it.
func (s NameStats) AvgTransfer() time.Duration {
	if s.TransferCount == 0 {
		return 0
	}
	return s.TransferTotal / time.Duration(s.TransferCount)
}

// AvgDevice is the mean device time per device-timed range.
func (s NameStats) AvgDevice() time.Duration {
	if s.DeviceCount == 0 {
		return 0
	}
	return s.DeviceTotal / time.Duration(s.DeviceCount)
}

// Group is the summary of one rank and tag, or of several ranks' groups
// of one tag summed (MergeRanks).
type Group struct {
	Rank        int // AllRanks for several ranks summed
	Ranks       int // how many ranks' groups MergeRanks summed (0 for one rank's)
	Tag         string
	HostTotal   time.Duration // sum of the group's top-level ranges' host time
	DeviceTotal time.Duration // sum of the group's outermost device ranges' device time
	Names       []NameStats   // ordered by name
}

// AllRanks is the Rank of a group that sums several ranks' (MergeRanks).
const AllRanks = -1

// MergeRanks sums the groups of one tag across ranks: one group per tag,
// tags in order of first appearance, Rank AllRanks and Ranks the number
// of ranks summed; each name's counts and totals are added, and its
// shares are of the summed group totals, so they weigh each rank by its
// time. A job of many ranks reads from one such table what a table per
// rank spreads over hundreds of lines.
func MergeRanks(groups []Group) []Group {
	var out []Group
	tagAt := map[string]int{}
	nameAt := map[[2]string]int{} // tag, name → index in its group's Names
	for _, g := range groups {
		i, ok := tagAt[g.Tag]
		if !ok {
			i = len(out)
			tagAt[g.Tag] = i
			out = append(out, Group{Rank: AllRanks, Tag: g.Tag})
		}
		m := &out[i]
		m.Ranks++
		m.HostTotal += g.HostTotal
		m.DeviceTotal += g.DeviceTotal
		for _, n := range g.Names {
			k := [2]string{g.Tag, n.Name}
			j, ok := nameAt[k]
			if !ok {
				j = len(m.Names)
				nameAt[k] = j
				m.Names = append(m.Names, NameStats{Name: n.Name})
			}
			t := &m.Names[j]
			t.Count += n.Count
			t.HostTotal += n.HostTotal
			t.DeviceTotal += n.DeviceTotal
			t.DeviceCount += n.DeviceCount
			t.TransferCount += n.TransferCount
			t.TransferTotal += n.TransferTotal
		}
	}
	for i := range out {
		g := &out[i]
		for j := range g.Names {
			n := &g.Names[j]
			if g.HostTotal > 0 {
				n.HostPercent = 100 * float64(n.HostTotal) / float64(g.HostTotal)
			}
			if g.DeviceTotal > 0 {
				n.DevicePercent = 100 * float64(n.DeviceTotal) / float64(g.DeviceTotal)
			}
		}
		slices.SortFunc(g.Names, func(a, b NameStats) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// Summarize groups records by rank and tag (ranks ascending, tags in order
// of first appearance) and totals each name. Percentages use the group's
// top-level host time (ranges at depth 0, and those no range of their
// group encloses: Record.OuterInGroup) and its outermost device time
// (device ranges that are not Record.DeviceNested, or are
// DeviceOuterInGroup), so nested ranges are not counted twice there, and
// a group whose ranges all run inside another group's still has its
// shares. It is Summary over records at once.
func Summarize(records []Record) []Group {
	s := NewSummary()
	s.Consume(records)
	return s.Groups()
}
