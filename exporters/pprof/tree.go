package pprof

import (
	"time"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/profiler"
)

// tree is what Build and Write derive from the records: per record its
// interned stack, its interned label set and its self times, plus the
// shared tables. Per-record data is kept in flat pointer-free slices, so
// a profile of millions of ranges costs the garbage collector nothing.
type tree struct {
	parent     []int32 // index of the parent record, -1 for none
	stackOf    []int32 // index into stacks
	labelOf    []int32 // index into labelKeys
	hostSelf   []int64 // ns: own host time minus the children's
	deviceSelf []int64 // ns: own device time minus the nearest device-timed descendants'

	mapping   *profile.Mapping
	functions []*profile.Function
	locations []*profile.Location // locations[i].ID == i+1
	locByName map[string]*profile.Location

	stacks   [][]*profile.Location // leaf first
	stackIDs map[stackKey]int32
	chain    []int32 // scratch for stack resolution

	labelKeys []labelKey
	labelIDs  map[labelKey]int32

	start, end time.Duration // earliest host start, latest host end
}

type stackKey struct {
	leaf   uint64 // location ID
	parent int32  // stack index, -1 for none
}

// labelKey is the part of a record that becomes sample labels.
type labelKey struct {
	rank  int
	step  int32
	stage int16
	chunk int16
	mb    int32
	phase profiler.Phase
	tag   string
}

// Marks in stackOf while resolving.
const (
	unresolved = -1
	inProgress = -2
)

func newTree(records []profiler.Record) *tree {
	n := len(records)
	t := &tree{
		parent:     link(records),
		stackOf:    make([]int32, n),
		labelOf:    make([]int32, n),
		hostSelf:   make([]int64, n),
		deviceSelf: make([]int64, n),
		mapping:    rangesMapping(),
		locByName:  make(map[string]*profile.Location),
		stackIDs:   make(map[stackKey]int32),
		labelIDs:   make(map[labelKey]int32),
	}
	for i := range t.stackOf {
		t.stackOf[i] = unresolved
	}
	// One pass over the records, which are large: reading each once is
	// what keeps this fast.
	lastLabel := int32(-1)
	var lastKey labelKey
	t.start, t.end = records[0].HostStart, records[0].HostEnd
	for i := range records {
		r := &records[i]
		// Resolving the stack first also cuts any cycle in the parent
		// links of malformed input, so the ancestor walk below ends.
		t.resolve(records, int32(i))
		t.start, t.end = min(t.start, r.HostStart), max(t.end, r.HostEnd)
		k := labelKey{rank: r.Rank, step: r.Step, stage: r.Stage, chunk: r.Chunk, mb: r.Microbatch, phase: r.Phase, tag: r.Tag}
		if lastLabel < 0 || k != lastKey {
			lastLabel, lastKey = t.label(k), k
		}
		t.labelOf[i] = lastLabel

		host := int64(r.HostEnd - r.HostStart)
		t.hostSelf[i] += host
		p := t.parent[i]
		if p >= 0 {
			t.hostSelf[p] -= host
		}
		if !r.HasDevice {
			continue
		}
		dev := int64(r.DeviceEnd - r.DeviceStart)
		t.deviceSelf[i] += dev
		for p >= 0 && !records[p].HasDevice {
			p = t.parent[p]
		}
		if p >= 0 {
			t.deviceSelf[p] -= dev
		}
	}
	return t
}

// link returns the index of each record's parent, -1 where the record is
// top-level or its parent is absent. A range is identified by its rank and
// ID, as in profiler.Summarize.
func link(records []profiler.Record) []int32 {
	// A recorder numbers its ranges from 1 without gaps, so per rank a
	// slice indexed by ID is smaller and faster than a map; a rank whose
	// IDs are sparse (a filtered slice of records) gets a map.
	type rankIndex struct {
		maxID uint64
		count int
		dense []int32
		ids   map[uint64]int32
	}
	ranks := map[int]*rankIndex{}
	var last *rankIndex
	lastRank := 0
	lookup := func(rank int) *rankIndex {
		if last != nil && rank == lastRank {
			return last
		}
		ri := ranks[rank]
		if ri == nil {
			ri = &rankIndex{}
			ranks[rank] = ri
		}
		last, lastRank = ri, rank
		return ri
	}
	for i := range records {
		ri := lookup(records[i].Rank)
		ri.maxID = max(ri.maxID, records[i].ID)
		ri.count++
	}
	for _, ri := range ranks {
		if ri.maxID <= uint64(4*ri.count+1024) {
			ri.dense = make([]int32, ri.maxID+1)
			for j := range ri.dense {
				ri.dense[j] = -1
			}
		} else {
			ri.ids = make(map[uint64]int32, ri.count)
		}
	}
	for i := range records {
		ri := lookup(records[i].Rank)
		if ri.dense != nil {
			ri.dense[records[i].ID] = int32(i)
		} else {
			ri.ids[records[i].ID] = int32(i)
		}
	}
	parent := make([]int32, len(records))
	for i := range records {
		parent[i] = -1
		id := records[i].Parent
		if id == 0 || id == records[i].ID {
			continue
		}
		ri := lookup(records[i].Rank)
		if ri.dense != nil {
			if id < uint64(len(ri.dense)) {
				parent[i] = ri.dense[id]
			}
		} else if p, ok := ri.ids[id]; ok {
			parent[i] = p
		}
	}
	return parent
}

// resolve sets the stack of record i and of its unresolved ancestors.
func (t *tree) resolve(records []profiler.Record, i int32) {
	if t.stackOf[i] >= 0 {
		return
	}
	chain := t.chain[:0]
	j := i
	for j >= 0 {
		s := t.stackOf[j]
		if s >= 0 {
			break
		}
		if s == inProgress {
			// A cycle: the range that closed it becomes a root.
			t.parent[chain[len(chain)-1]] = -1
			j = -1
			break
		}
		t.stackOf[j] = inProgress
		chain = append(chain, j)
		j = t.parent[j]
	}
	above := int32(-1)
	if j >= 0 {
		above = t.stackOf[j]
	}
	for k := len(chain) - 1; k >= 0; k-- {
		c := chain[k]
		above = t.stack(t.location(records[c].Name), above)
		t.stackOf[c] = above
	}
	t.chain = chain
}

// stack interns the stack made of leaf on top of the stack above.
func (t *tree) stack(leaf *profile.Location, above int32) int32 {
	k := stackKey{leaf.ID, above}
	if s, ok := t.stackIDs[k]; ok {
		return s
	}
	var rest []*profile.Location
	if above >= 0 {
		rest = t.stacks[above]
	}
	st := make([]*profile.Location, 0, len(rest)+1)
	st = append(append(st, leaf), rest...)
	s := int32(len(t.stacks))
	t.stacks = append(t.stacks, st)
	t.stackIDs[k] = s
	return s
}

// rangesMapping is the one mapping every location belongs to. It says
// that functions are already named, so pprof does not look for a binary
// to symbolise them with.
func rangesMapping() *profile.Mapping {
	return &profile.Mapping{ID: 1, File: "trainscope", HasFunctions: true}
}

// location returns the location of a range name, one per distinct name,
// holding one line of the name's own function.
func (t *tree) location(name string) *profile.Location {
	if l, ok := t.locByName[name]; ok {
		return l
	}
	id := uint64(len(t.locations) + 1)
	f := &profile.Function{ID: id, Name: name, SystemName: name}
	l := &profile.Location{ID: id, Mapping: t.mapping, Line: []profile.Line{{Function: f}}}
	t.functions = append(t.functions, f)
	t.locations = append(t.locations, l)
	t.locByName[name] = l
	return l
}

func (t *tree) label(k labelKey) int32 {
	if id, ok := t.labelIDs[k]; ok {
		return id
	}
	id := int32(len(t.labelKeys))
	t.labelKeys = append(t.labelKeys, k)
	t.labelIDs[k] = id
	return id
}

// strLabels and numLabels are the labels of k as pprof's maps hold them.
func (k labelKey) strLabels() map[string][]string {
	if k.phase == profiler.PhaseNone && k.tag == "" {
		return nil
	}
	m := map[string][]string{}
	if k.phase != profiler.PhaseNone {
		m[LabelPhase] = []string{k.phase.String()}
	}
	if k.tag != "" {
		m[LabelTag] = []string{k.tag}
	}
	return m
}

// numUnit is the unit of every numeric label. pprof drops a numeric
// label whose value is 0 unless it has a unit, and rank 0, stage 0, chunk
// 0, microbatch 0 and step 0 matter; an unknown unit leaves values unscaled and
// -tagfocus=rank=1 still matches.
const numUnit = "index"

func (k labelKey) numUnits() map[string][]string {
	m := map[string][]string{}
	for key := range k.numLabels() {
		m[key] = []string{numUnit}
	}
	return m
}

func (k labelKey) numLabels() map[string][]int64 {
	m := map[string][]int64{LabelRank: {int64(k.rank)}}
	if k.stage >= 0 {
		m[LabelStage] = []int64{int64(k.stage)}
	}
	if k.chunk >= 0 {
		m[LabelChunk] = []int64{int64(k.chunk)}
	}
	if k.mb >= 0 {
		m[LabelMicrobatch] = []int64{int64(k.mb)}
	}
	if k.step >= 0 {
		m[LabelStep] = []int64{int64(k.step)}
	}
	return m
}
