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

// NameStats aggregates the ranges of one name.
type NameStats struct {
	Name          string
	Count         int
	HostTotal     time.Duration
	DeviceTotal   time.Duration
	DeviceCount   int     // ranges with a measured device time
	HostPercent   float64 // of the group's top-level host time
	DevicePercent float64 // of the group's outermost device time
}

// AvgHost is the mean host time per range.
func (s NameStats) AvgHost() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.HostTotal / time.Duration(s.Count)
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
	HostTotal   time.Duration // sum of top-level ranges' host time
	DeviceTotal time.Duration // sum of outermost device ranges' device time
	Names       []NameStats   // ordered by name
}

// Summarize groups records by rank and tag (ranks ascending, tags in order
// of first appearance) and totals each name. Percentages use the group's
// top-level host time and its outermost device time (device ranges with no
// device-timed ancestor), so nested ranges are not counted twice there.
func Summarize(records []Record) []Group {
	type key struct {
		rank int
		tag  string
	}
	type rid struct {
		rank int
		id   uint64
	}
	byID := make(map[rid]*Record, len(records))
	for i := range records {
		byID[rid{records[i].Rank, records[i].ID}] = &records[i]
	}
	hasDeviceAncestor := func(r *Record) bool {
		for p := r.Parent; p != 0; {
			a, ok := byID[rid{r.Rank, p}]
			if !ok {
				return false
			}
			if a.HasDevice {
				return true
			}
			p = a.Parent
		}
		return false
	}
	var order []key
	groups := map[key]*Group{}
	names := map[key]map[string]*NameStats{}
	for i := range records {
		r := &records[i]
		k := key{r.Rank, TagOf(r)}
		g, ok := groups[k]
		if !ok {
			g = &Group{Rank: k.rank, Tag: k.tag}
			groups[k], names[k] = g, map[string]*NameStats{}
			order = append(order, k)
		}
		ns, ok := names[k][r.Name]
		if !ok {
			ns = &NameStats{Name: r.Name}
			names[k][r.Name] = ns
		}
		ns.Count++
		ns.HostTotal += r.HostDuration()
		if r.HasDevice {
			ns.DeviceCount++
			ns.DeviceTotal += r.DeviceDuration()
			if !hasDeviceAncestor(r) {
				g.DeviceTotal += r.DeviceDuration()
			}
		}
		if r.Depth == 0 {
			g.HostTotal += r.HostDuration()
		}
	}
	slices.SortStableFunc(order, func(a, b key) int { return cmp.Compare(a.rank, b.rank) })
	out := make([]Group, 0, len(order))
	for _, k := range order {
		g := groups[k]
		for _, ns := range names[k] {
			if g.HostTotal > 0 {
				ns.HostPercent = 100 * float64(ns.HostTotal) / float64(g.HostTotal)
			}
			if g.DeviceTotal > 0 {
				ns.DevicePercent = 100 * float64(ns.DeviceTotal) / float64(g.DeviceTotal)
			}
			g.Names = append(g.Names, *ns)
		}
		slices.SortFunc(g.Names, func(a, b NameStats) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, *g)
	}
	return out
}
