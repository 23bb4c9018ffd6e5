package profiler

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync"
)

// Summary keeps the report's tables up to date as records arrive. It is a
// Sink: register it with Profiler.AddSink before the run and it sees every
// record, also those beyond the profiler's record bound (WithMaxRecords),
// so its tables cover the whole run however long it is.
//
// Groups returns what Summarize returns for the same records in the same
// order. A Summary keeps one entry per rank, tag and range name and a peak
// per rank, nothing per record: its memory is bounded by the number of
// distinct (rank, tag, name), whatever the number of records. With the
// default grouping (TagOf) untagged records are grouped per step, so the
// entries grow with the steps; WithSummaryTag puts every record in one
// group per rank.
//
// Consume and the accessors may be called from different goroutines.
type Summary struct {
	mu      sync.Mutex
	fixed   bool   // every record counts under tag
	tag     string // the fixed tag
	groups  []summaryGroup
	groupOf map[summaryGroupKey]int32
	entries []summaryEntry
	entryOf map[summaryEntryKey]int32
	peaks   map[int]int64
	records int

	// The tag of the latest untagged record's step, so grouping by step
	// allocates a tag string only when the step changes.
	stepTagOf  int32
	stepTagStr string
}

type summaryGroupKey struct {
	rank int
	tag  string
}

type summaryEntryKey struct {
	rank      int
	tag, name string
}

type summaryGroup struct {
	Group
	entries []int32 // indices into Summary.entries
}

type summaryEntry struct {
	group int32
	NameStats
}

// SummaryOption configures NewSummary.
type SummaryOption interface{ applySummary(*Summary) }

type summaryOptionFunc func(*Summary)

func (f summaryOptionFunc) applySummary(s *Summary) { f(s) }

// WithSummaryTag counts every record under tag, whatever its own tag and
// step: one table per rank for the whole run (profile-run's "all steps").
func WithSummaryTag(tag string) SummaryOption {
	return summaryOptionFunc(func(s *Summary) { s.fixed, s.tag = true, tag })
}

// NewSummary returns an empty summary.
func NewSummary(opts ...SummaryOption) *Summary {
	s := &Summary{
		groupOf:   make(map[summaryGroupKey]int32),
		entryOf:   make(map[summaryEntryKey]int32),
		peaks:     make(map[int]int64),
		stepTagOf: None,
	}
	for _, o := range opts {
		if o != nil {
			o.applySummary(s)
		}
	}
	return s
}

// tagOf is TagOf(r), or the fixed tag; it allocates only for a step other
// than the previous record's.
func (s *Summary) tagOf(r *Record) string {
	switch {
	case s.fixed:
		return s.tag
	case r.Tag != "":
		return r.Tag
	case r.Step >= 0:
		if r.Step != s.stepTagOf {
			s.stepTagOf, s.stepTagStr = r.Step, "step "+strconv.Itoa(int(r.Step))
		}
		return s.stepTagStr
	}
	return "all"
}

// Consume adds a batch of records. It implements Sink and keeps nothing
// of the batch.
func (s *Summary) Consume(batch []Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records += len(batch)
	for i := range batch {
		r := &batch[i]
		tag := s.tagOf(r)
		e, ok := s.entryOf[summaryEntryKey{r.Rank, tag, r.Name}]
		if !ok {
			e = s.newEntry(r.Rank, tag, r.Name)
		}
		ent := &s.entries[e]
		g := &s.groups[ent.group].Group
		ent.Count++
		ent.HostTotal += r.HostDuration()
		if r.HasDevice {
			d := r.DeviceDuration()
			ent.DeviceCount++
			ent.DeviceTotal += d
			if !r.DeviceNested || (r.DeviceOuterInGroup && !s.fixed) {
				g.DeviceTotal += d
			}
			if te := r.Collective.TransferEnd; te != 0 {
				ent.TransferCount++
				ent.TransferTotal += max(r.DeviceEnd, te) - r.DeviceStart
			}
		}
		// With a fixed tag the group is the rank's: only the ranges
		// at depth 0 are outermost in it.
		if r.Depth == 0 || (r.OuterInGroup && !s.fixed) {
			g.HostTotal += r.HostDuration()
		}
		if r.PeakMemory > 0 && r.PeakMemory > s.peaks[r.Rank] {
			s.peaks[r.Rank] = r.PeakMemory
		}
	}
}

func (s *Summary) newEntry(rank int, tag, name string) int32 {
	gk := summaryGroupKey{rank, tag}
	g, ok := s.groupOf[gk]
	if !ok {
		g = int32(len(s.groups))
		s.groups = append(s.groups, summaryGroup{Group: Group{Rank: rank, Tag: tag}})
		s.groupOf[gk] = g
	}
	e := int32(len(s.entries))
	s.entries = append(s.entries, summaryEntry{group: g, NameStats: NameStats{Name: name}})
	s.entryOf[summaryEntryKey{rank, tag, name}] = e
	s.groups[g].entries = append(s.groups[g].entries, e)
	return e
}

// Groups returns the tables so far: one group per rank and tag, ranks
// ascending, tags in order of first appearance, names in order, with the
// shares of the group's top-level host time and outermost device time
// worked out — what Summarize returns for the same records.
func (s *Summary) Groups() []Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	order := make([]int32, len(s.groups))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(s.groups[a].Rank, s.groups[b].Rank) })
	out := make([]Group, 0, len(order))
	for _, gi := range order {
		sg := &s.groups[gi]
		g := sg.Group
		g.Names = make([]NameStats, 0, len(sg.entries))
		for _, e := range sg.entries {
			ns := s.entries[e].NameStats
			if g.HostTotal > 0 {
				ns.HostPercent = 100 * float64(ns.HostTotal) / float64(g.HostTotal)
			}
			if g.DeviceTotal > 0 {
				ns.DevicePercent = 100 * float64(ns.DeviceTotal) / float64(g.DeviceTotal)
			}
			g.Names = append(g.Names, ns)
		}
		slices.SortFunc(g.Names, func(a, b NameStats) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, g)
	}
	return out
}

// Peaks returns each rank's highest device memory mark (Record.PeakMemory)
// in bytes, as WriteReport takes it.
func (s *Summary) Peaks() map[int]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.peaks)
}

// Records returns how many records the summary has counted.
func (s *Summary) Records() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records
}

// Entries returns how many (rank, tag, name) entries the summary holds:
// what its memory grows with.
func (s *Summary) Entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
