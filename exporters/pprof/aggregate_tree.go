package pprof

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// The Aggregate's state: records placed into (stack, labels) samples as
// their ancestors arrive, per rank a slab of the records still waiting or
// still needed, and the profile built from the samples.

// aggState is everything an Aggregate holds; Profile works on a copy.
type aggState struct {
	ranks    map[int]*rankTree
	lastRank int
	last     *rankTree

	names    []string // location i+1 is names[i]'s
	nameIDs  map[string]int32
	stacks   []aggStack
	stackIDs map[aggStack]int32

	labelKeys []labelKey
	labelIDs  map[labelKey]int32
	lastLabel int32
	lastKey   labelKey

	samples   []aggSample
	sampleIDs map[[2]int32]int32

	start, end time.Duration
	records    uint64
	orphans    uint64
	steps      uint64 // steps given to AddStep

	jobs []placeJob // scratch for place
}

type placeJob struct{ slot, parent int32 }

// aggStack is a stack: a name on top of another stack (-1 for none).
type aggStack struct{ leaf, above int32 }

type aggSample struct {
	stack, label        int32
	host, device, count int64
	wall                int64 // step_time
}

// rankTree is one rank's records that are waiting for an ancestor or may
// still get descendants. Nodes live in a slab indexed by slot, free of
// pointers, so the garbage collector does not scan them.
type rankTree struct {
	nodes []aggNode
	free  []int32
	byID  map[uint64]int32 // record ID → slot
	// waitFor maps the ID of a range not placed yet to the first of the
	// records waiting for it (a doubly linked list through the nodes).
	waitFor map[uint64]int32
	waitQ   fifo // waiting records, oldest first
	doneQ   fifo // placed records, oldest first
	roots   uint64
	waiting int
}

type aggNode struct {
	id, parent   uint64
	host, device int64
	gen          uint64 // roots when it started waiting, or when it was placed
	name, label  int32
	sample       int32 // -1 while waiting
	devSample    int32 // the sample of the nearest device-timed range at or above it, -1 for none
	stack        int32
	prev, next   int32 // siblings waiting for the same parent
	serial       uint32
	hasDevice    bool
}

// fifo is a queue of slots; an entry whose serial no longer matches its
// slot's is stale (the slot was freed) and skipped.
type fifo struct {
	buf  []fifoEntry
	head int
}

type fifoEntry struct {
	slot   int32
	serial uint32
}

func (q *fifo) push(e fifoEntry) {
	if q.head > 0 && q.head >= len(q.buf)/2 {
		n := copy(q.buf, q.buf[q.head:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, e)
}

func (q *fifo) len() int { return len(q.buf) - q.head }

func (q *fifo) front() fifoEntry { return q.buf[q.head] }

func (q *fifo) pop() { q.head++ }

// compact keeps the entries for which live returns true, in order.
func (q *fifo) compact(live func(fifoEntry) bool) {
	buf := q.buf[:0]
	for _, e := range q.buf[q.head:] {
		if live(e) {
			buf = append(buf, e)
		}
	}
	q.buf, q.head = buf, 0
}

func (q fifo) clone() fifo { return fifo{buf: slices.Clone(q.buf[q.head:])} }

func newAggState() *aggState {
	return &aggState{
		ranks:     make(map[int]*rankTree),
		nameIDs:   make(map[string]int32),
		stackIDs:  make(map[aggStack]int32),
		labelIDs:  make(map[labelKey]int32),
		lastLabel: -1,
		sampleIDs: make(map[[2]int32]int32),
	}
}

func (s *aggState) clone() *aggState {
	c := *s
	c.ranks = make(map[int]*rankTree, len(s.ranks))
	for r, rt := range s.ranks {
		c.ranks[r] = &rankTree{
			nodes: slices.Clone(rt.nodes), free: slices.Clone(rt.free),
			byID: maps.Clone(rt.byID), waitFor: maps.Clone(rt.waitFor),
			waitQ: rt.waitQ.clone(), doneQ: rt.doneQ.clone(),
			roots: rt.roots, waiting: rt.waiting,
		}
	}
	c.last, c.jobs = nil, nil
	c.names, c.nameIDs = slices.Clone(s.names), maps.Clone(s.nameIDs)
	c.stacks, c.stackIDs = slices.Clone(s.stacks), maps.Clone(s.stackIDs)
	c.labelKeys, c.labelIDs = slices.Clone(s.labelKeys), maps.Clone(s.labelIDs)
	c.samples, c.sampleIDs = slices.Clone(s.samples), maps.Clone(s.sampleIDs)
	return &c
}

func (s *aggState) rank(r int) *rankTree {
	if s.last != nil && s.lastRank == r {
		return s.last
	}
	rt, ok := s.ranks[r]
	if !ok {
		rt = &rankTree{byID: make(map[uint64]int32), waitFor: make(map[uint64]int32)}
		s.ranks[r] = rt
	}
	s.last, s.lastRank = rt, r
	return rt
}

func (s *aggState) name(n string) int32 {
	if id, ok := s.nameIDs[n]; ok {
		return id
	}
	id := int32(len(s.names))
	s.names = append(s.names, n)
	s.nameIDs[n] = id
	return id
}

func (s *aggState) label(r *profiler.Record) int32 {
	// The step is left out: it would make the samples grow with the run.
	k := labelKey{rank: r.Rank, step: profiler.None, stage: r.Stage, chunk: r.Chunk, mb: r.Microbatch, phase: r.Phase, tag: r.Tag}
	if s.lastLabel >= 0 && k == s.lastKey {
		return s.lastLabel
	}
	id, ok := s.labelIDs[k]
	if !ok {
		id = int32(len(s.labelKeys))
		s.labelKeys = append(s.labelKeys, k)
		s.labelIDs[k] = id
	}
	s.lastLabel, s.lastKey = id, k
	return id
}

func (s *aggState) stack(leaf, above int32) int32 {
	k := aggStack{leaf, above}
	if id, ok := s.stackIDs[k]; ok {
		return id
	}
	id := int32(len(s.stacks))
	s.stacks = append(s.stacks, k)
	s.stackIDs[k] = id
	return id
}

func (s *aggState) sample(stack, label int32) int32 {
	k := [2]int32{stack, label}
	if id, ok := s.sampleIDs[k]; ok {
		return id
	}
	id := int32(len(s.samples))
	s.samples = append(s.samples, aggSample{stack: stack, label: label})
	s.sampleIDs[k] = id
	return id
}

// add takes one record: placed at once when it is top-level or its
// parent is placed, else left waiting for its parent.
func (s *aggState) add(r *profiler.Record, cfg aggregateConfig) {
	if s.records == 0 {
		s.start, s.end = r.HostStart, r.HostEnd
	}
	s.start, s.end = min(s.start, r.HostStart), max(s.end, r.HostEnd)
	s.records++
	rt := s.rank(r.Rank)
	slot := rt.alloc()
	n := &rt.nodes[slot]
	*n = aggNode{
		id: r.ID, parent: r.Parent, host: int64(r.HostEnd - r.HostStart),
		name: s.name(r.Name), label: s.label(r), sample: -1, devSample: -1, stack: -1,
		prev: -1, next: -1, serial: n.serial, hasDevice: r.HasDevice,
	}
	if r.HasDevice {
		n.device = int64(r.DeviceEnd - r.DeviceStart)
	}
	rt.byID[r.ID] = slot
	switch p, ok := rt.byID[r.Parent]; {
	case r.Parent == 0 || r.Parent == r.ID:
		if r.Parent == 0 {
			rt.roots++
		}
		s.place(rt, slot, -1)
	case ok && rt.nodes[p].sample >= 0:
		s.place(rt, slot, p)
	default:
		rt.wait(slot)
	}
	s.trim(rt, cfg)
}

// held is the number of records the rank holds, waiting or placed.
func (rt *rankTree) held() int { return len(rt.nodes) - len(rt.free) }

func (rt *rankTree) alloc() int32 {
	if n := len(rt.free); n > 0 {
		slot := rt.free[n-1]
		rt.free = rt.free[:n-1]
		return slot
	}
	rt.nodes = append(rt.nodes, aggNode{})
	return int32(len(rt.nodes) - 1)
}

// wait links the record at slot into the list of those waiting for its
// parent.
func (rt *rankTree) wait(slot int32) {
	n := &rt.nodes[slot]
	n.gen = rt.roots
	if head, ok := rt.waitFor[n.parent]; ok {
		n.next = head
		rt.nodes[head].prev = slot
	}
	rt.waitFor[n.parent] = slot
	rt.waiting++
	rt.waitQ.push(fifoEntry{slot, n.serial})
}

// unwait takes the waiting record at slot out of its parent's list.
func (rt *rankTree) unwait(slot int32) {
	n := &rt.nodes[slot]
	switch {
	case n.prev >= 0:
		rt.nodes[n.prev].next = n.next
	case n.next >= 0:
		rt.waitFor[n.parent] = n.next
	default:
		delete(rt.waitFor, n.parent)
	}
	if n.next >= 0 {
		rt.nodes[n.next].prev = n.prev
	}
	n.prev, n.next = -1, -1
	rt.waiting--
}

// place gives the record at slot its stack under the placed record at
// parent (-1 for none) and adds its values — its own to its sample, minus
// its host time from its parent's sample and minus its device time from
// that of its nearest device-timed ancestor, which makes the values self
// times as Build's — then places the records that were waiting for it.
func (s *aggState) place(rt *rankTree, slot, parent int32) {
	jobs := append(s.jobs[:0], placeJob{slot, parent})
	for len(jobs) > 0 {
		j := jobs[len(jobs)-1]
		jobs = jobs[:len(jobs)-1]
		n := &rt.nodes[j.slot]
		above := int32(-1)
		if j.parent >= 0 {
			above = rt.nodes[j.parent].stack
		}
		n.stack = s.stack(n.name, above)
		n.sample = s.sample(n.stack, n.label)
		sm := &s.samples[n.sample]
		sm.count++
		sm.host += n.host
		sm.device += n.device
		if j.parent >= 0 {
			p := &rt.nodes[j.parent]
			s.samples[p.sample].host -= n.host
			n.devSample = p.devSample
			if n.hasDevice && p.devSample >= 0 {
				s.samples[p.devSample].device -= n.device
			}
		}
		if n.hasDevice {
			n.devSample = n.sample
		}
		n.gen = rt.roots
		rt.doneQ.push(fifoEntry{j.slot, n.serial})
		if c, ok := rt.waitFor[n.id]; ok && rt.byID[n.id] == j.slot {
			delete(rt.waitFor, n.id)
			for c >= 0 {
				cn := &rt.nodes[c]
				next := cn.next
				cn.prev, cn.next = -1, -1
				rt.waiting--
				jobs = append(jobs, placeJob{c, j.slot})
				c = next
			}
		}
	}
	s.jobs = jobs[:0]
}

// giveUpOldest takes the oldest waiting record and places the outermost
// of its waiting ancestors (itself when its parent has not arrived) at
// the root of its own stack, and with it the records waiting for it.
func (s *aggState) giveUpOldest(rt *rankTree) {
	for rt.waitQ.len() > 0 {
		e := rt.waitQ.front()
		n := &rt.nodes[e.slot]
		if n.serial != e.serial || n.sample >= 0 {
			rt.waitQ.pop()
			continue // placed since, or freed
		}
		slot := rt.waitingRoot(e.slot)
		if slot == e.slot {
			rt.waitQ.pop()
		}
		rt.unwait(slot)
		s.orphans++
		s.place(rt, slot, -1)
		return
	}
}

// waitingRoot follows the parents of the waiting record at slot while
// they have arrived (and so are waiting too), and returns the last one:
// the record whose own parent is missing. Malformed parent links can
// make a cycle; the walk ends after maxWalk steps.
func (rt *rankTree) waitingRoot(slot int32) int32 {
	const maxWalk = 1024
	for range maxWalk {
		p, ok := rt.byID[rt.nodes[slot].parent]
		if !ok || p == slot || rt.nodes[p].sample >= 0 {
			return slot
		}
		slot = p
	}
	return slot
}

// trim keeps a rank's records within the window and the node bound.
func (s *aggState) trim(rt *rankTree, cfg aggregateConfig) {
	for rt.waitQ.len() > 0 {
		e := rt.waitQ.front()
		n := &rt.nodes[e.slot]
		if n.serial != e.serial || n.sample >= 0 {
			rt.waitQ.pop()
			continue
		}
		if n.gen+cfg.window >= rt.roots && rt.waiting <= cfg.maxNodes/2 {
			break
		}
		s.giveUpOldest(rt)
	}
	// Entries of records placed since they started waiting stay queued
	// until they reach the front, which a live waiting record can hold
	// for as long as no top-level range arrives (a range that is its own
	// parent is placed as top-level without counting as one): drop them
	// once they outnumber the bound, so the queue stays within it.
	if rt.waitQ.len() > cfg.maxNodes {
		rt.waitQ.compact(func(e fifoEntry) bool {
			n := &rt.nodes[e.slot]
			return n.serial == e.serial && n.sample < 0
		})
	}
	for rt.doneQ.len() > 0 {
		e := rt.doneQ.front()
		n := &rt.nodes[e.slot]
		if n.serial != e.serial {
			rt.doneQ.pop()
			continue
		}
		// The bound counts the slots held, not the IDs mapped: a record
		// whose ID a later one reused (malformed or merged input) is out
		// of byID but still held until it is freed here.
		if n.gen+cfg.window > rt.roots && rt.held() <= cfg.maxNodes {
			break
		}
		rt.doneQ.pop()
		if rt.byID[n.id] == e.slot {
			delete(rt.byID, n.id)
		}
		n.serial++
		rt.free = append(rt.free, e.slot)
	}
}

// profile builds the profile of the placed records.
func (s *aggState) profile(cfg config) *profile.Profile {
	m := rangesMapping()
	fns := make([]*profile.Function, len(s.names))
	locs := make([]*profile.Location, len(s.names))
	for i, name := range s.names {
		id := uint64(i + 1)
		fns[i] = &profile.Function{ID: id, Name: name, SystemName: name}
		locs[i] = &profile.Location{ID: id, Mapping: m, Line: []profile.Line{{Function: fns[i]}}}
	}
	p := header(m, fns, locs, s.start, s.end, cfg)
	p.Comments = slices.Insert(p.Comments, 2,
		"whole run: samples that differ only in their step are summed, so samples carry no step label")
	stacks := make([][]*profile.Location, len(s.stacks))
	var stackOf func(i int32) []*profile.Location
	stackOf = func(i int32) []*profile.Location {
		if stacks[i] == nil {
			st := s.stacks[i]
			var rest []*profile.Location
			if st.above >= 0 {
				rest = stackOf(st.above)
			}
			stacks[i] = append(append(make([]*profile.Location, 0, len(rest)+1), locs[st.leaf]), rest...)
		}
		return stacks[i]
	}
	type labels struct {
		str  map[string][]string
		num  map[string][]int64
		unit map[string][]string
	}
	sets := make([]labels, len(s.labelKeys))
	for i, k := range s.labelKeys {
		sets[i] = labels{k.strLabels(), k.numLabels(), k.numUnits()}
	}
	if s.steps > 0 {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: StepTime, Unit: "nanoseconds"})
		p.DefaultSampleType = StepTime
		p.Comments = append(p.Comments,
			"step_time (the default): each rank's step wall time split by what used it at each instant — computation (the busy definition) by phase and chunk, transfers by operation (a collective's wait for its last rank beneath it), and idle time as [idle: bubble] inside the step's span of forward and backward work (\"waiting for input\" beneath it where the rank recorded a wait) and [idle: other] outside it; a rank's frames add up to its step time",
			"host_time, device_time and ranges: the range nesting, as above; at device depth 1 the kernels inside an action have host time only")
	}
	p.Sample = make([]*profile.Sample, len(s.samples))
	for i, sm := range s.samples {
		ls := &sets[sm.label]
		v := []int64{sm.host, sm.device, sm.count}
		if s.steps > 0 {
			v = append(v, sm.wall)
		}
		p.Sample[i] = &profile.Sample{
			Location: stackOf(sm.stack),
			Value:    v,
			Label:    ls.str, NumLabel: ls.num, NumUnit: ls.unit,
		}
	}
	return p
}

// addStep adds a step's wall-time split (analysis.Rank.Time) as step_time
// samples, rooted at the step range's name.
func (s *aggState) addStep(st *analysis.Step) {
	s.steps++
	root := s.stack(s.name(profiler.StepName), -1)
	for i := range st.Ranks {
		r := &st.Ranks[i]
		for _, sl := range r.Time {
			stack := root
			for _, frame := range stepFrames(sl) {
				stack = s.stack(s.name(frame), stack)
			}
			stage := sl.Stage
			if stage == profiler.None {
				stage = r.Stage
			}
			k := labelKey{rank: r.Rank, step: profiler.None, stage: int16(stage), chunk: int16(sl.Chunk), mb: int32(sl.Microbatch), phase: sl.Phase}
			id, ok := s.labelIDs[k]
			if !ok {
				id = int32(len(s.labelKeys))
				s.labelKeys = append(s.labelKeys, k)
				s.labelIDs[k] = id
			}
			s.samples[s.sample(stack, id)].wall += int64(sl.Time)
		}
	}
}

// stepFrames names a slice's frames beneath the step, outermost first.
func stepFrames(sl analysis.Slice) []string {
	switch sl.Use {
	case analysis.UseCompute:
		phase := sl.Phase.String()
		if phase == "" {
			phase = "compute"
		}
		if sl.Chunk == profiler.None {
			return []string{phase}
		}
		return []string{phase, "chunk " + strconv.Itoa(sl.Chunk)}
	case analysis.UseTransfer:
		f := []string{"transfer"}
		if sl.Op != "" {
			f = append(f, sl.Op)
		}
		if sl.Waiting {
			f = append(f, "waiting for the last rank")
		}
		return f
	}
	frame := "[idle: other]"
	if sl.Use == analysis.UseBubble {
		frame = "[idle: bubble]"
	}
	if sl.Waiting {
		return []string{frame, "waiting for input"}
	}
	return []string{frame}
}
