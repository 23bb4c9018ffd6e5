package profiler

import (
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

// Group is the summary of one rank and tag.
type Group struct {
	Rank        int
	Tag         string
	HostTotal   time.Duration // sum of the group's top-level ranges' host time
	DeviceTotal time.Duration // sum of the group's outermost device ranges' device time
	Names       []NameStats   // ordered by name
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
