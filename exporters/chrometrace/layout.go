package chrometrace

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// trace is the laid-out timeline: tracks, and the complete events in
// output order (by start time).
type trace struct {
	tracks []track
	events []event
	// anchor is, per record, the index in events of the event that flow
	// arrows bind to: its device event if it has one, else its host event.
	anchor []int32
	ranks  map[groupMember]int // (group, group rank) → rank, for args
	// rankDevice is each rank's device, named in its process; a host
	// range on another (an imported profile's CPU ops beside its GPU
	// steps) names its own in its args.
	rankDevice map[int]runtime.Device
}

// track is a thread of the trace: a host lane or a device lane of a rank.
type track struct {
	pid, tid int
	rank     int
	name     string
	process  string // the process name; set on a rank's first track
	sort     int    // thread_sort_index within the process
	key      trackKey
	lane     int
}

// trackKey says which timeline a track draws, before lanes.
type trackKey struct {
	rank   int
	class  trackClass
	device runtime.Device // device tracks only
}

type trackClass uint8

const (
	hostTrack trackClass = iota
	computeTrack
	commTrack
)

// event is one complete event.
type event struct {
	start, dur int64 // ns since the epoch
	rec        int32 // index of the record
	track      int32 // index into tracks
	device     bool  // drawn at the record's device times
	flowIn     bool
	flowOut    bool
	bindID     uint32 // flow id, 0 for none
}

func classOf(k profiler.Kind) trackClass {
	if k == profiler.KindCollective || k == profiler.KindP2P {
		return commTrack
	}
	return computeTrack
}

// item is an event while it is being laid out: small, so sorting moves
// little memory.
type item struct {
	start, dur int64
	rec        int32
	group      int32 // timeline (trackKey) before lanes; after lanes, the track
	depth      int32
	device     bool
}

// byStart orders a timeline's events so that a stack of open events can
// check nesting: by start, longer first, outer first.
func byStart(a, b *item) int {
	if c := cmp.Compare(a.start, b.start); c != 0 {
		return c
	}
	if c := cmp.Compare(b.dur, a.dur); c != 0 {
		return c
	}
	if c := cmp.Compare(a.depth, b.depth); c != 0 {
		return c
	}
	return cmp.Compare(a.rec, b.rec)
}

// layout places every record on its host track and every device-timed
// record on a device track, in lanes that keep each track's events
// properly nested, and orders the events by start time.
func layout(records []profiler.Record) trace {
	var keys []trackKey
	groupOf := map[trackKey]int32{}
	group := func(k trackKey) int32 {
		g, ok := groupOf[k]
		if !ok {
			g = int32(len(keys))
			keys = append(keys, k)
			groupOf[k] = g
		}
		return g
	}
	items := make([]item, 0, len(records)+len(records)/2)
	var lastHost, lastDev trackKey
	hostGroup, devGroup := int32(-1), int32(-1)
	for i := range records {
		r := &records[i]
		// A traced kernel without a host range has only its device
		// interval.
		if r.Kind != profiler.KindKernel || !r.HasDevice || r.HostEnd != r.HostStart {
			if k := (trackKey{rank: r.Rank, class: hostTrack}); hostGroup < 0 || k != lastHost {
				lastHost, hostGroup = k, group(k)
			}
			items = append(items, item{start: int64(r.HostStart), dur: max(0, int64(r.HostEnd-r.HostStart)),
				rec: int32(i), group: hostGroup, depth: int32(r.Depth)})
		}
		if !r.HasDevice {
			continue
		}
		if k := (trackKey{rank: r.Rank, class: classOf(r.Kind), device: r.Device}); devGroup < 0 || k != lastDev {
			lastDev, devGroup = k, group(k)
		}
		items = append(items, item{start: int64(r.DeviceStart), dur: max(0, int64(r.DeviceEnd-r.DeviceStart)),
			rec: int32(i), group: devGroup, depth: int32(r.Depth), device: true})
	}
	// By timeline, stably, then by start within each: records usually come
	// ordered by start (Snapshot's order), which the sort finds quickly.
	items = groupStable(items, len(keys), func(it *item) int32 { return it.group })
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].group == items[lo].group {
			hi++
		}
		slices.SortFunc(items[lo:hi], func(a, b item) int { return byStart(&a, &b) })
		lo = hi
	}

	// Lanes: each lane's open events contain one another, so every track
	// nests properly.
	var tr trace
	laneTracks := make([][]int32, len(keys)) // per timeline, per lane, the track
	var lanes [][]int64                      // per lane of the current timeline, the ends of its open events
	prev := int32(-1)
	for i := range items {
		it := &items[i]
		if it.group != prev {
			lanes, prev = lanes[:0], it.group
		}
		// Inside an open event if one contains it (its parent, usually),
		// else in the first empty lane, else in a new one.
		end := it.start + it.dur
		lane, empty := -1, -1
		for l := range lanes {
			open := lanes[l]
			for len(open) > 0 && open[len(open)-1] <= it.start {
				open = open[:len(open)-1]
			}
			lanes[l] = open
			if len(open) == 0 {
				if empty < 0 {
					empty = l
				}
			} else if open[len(open)-1] >= end {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = empty
		}
		if lane < 0 {
			lane = len(lanes)
			lanes = append(lanes, nil)
		}
		lanes[lane] = append(lanes[lane], end)
		g := it.group
		if lane == len(laneTracks[g]) {
			laneTracks[g] = append(laneTracks[g], int32(len(tr.tracks)))
			tr.tracks = append(tr.tracks, track{rank: keys[g].rank, key: keys[g], lane: lane})
		}
		it.group = laneTracks[g][lane]
	}
	remap := tr.nameTracks(records)
	for i := range items {
		items[i].group = remap[items[i].group]
	}

	// Output order: by start time across the whole trace, so flow arrows
	// can leave the event a reader meets first; ties by track, whose order
	// is that of pid and tid. Each track's events are already in order, so
	// this merges them.
	items = mergeTracks(groupStable(items, len(tr.tracks), func(it *item) int32 { return it.group }), len(tr.tracks))
	tr.events = make([]event, len(items))
	tr.anchor = make([]int32, len(records))
	for i := range items {
		it := &items[i]
		tr.events[i] = event{start: it.start, dur: it.dur, rec: it.rec, track: it.group, device: it.device}
		if it.device || !records[it.rec].HasDevice {
			tr.anchor[it.rec] = int32(i)
		}
	}
	return tr
}

func compareKeys(a, b trackKey) int {
	if c := cmp.Compare(a.rank, b.rank); c != 0 {
		return c
	}
	if c := cmp.Compare(a.device.Type, b.device.Type); c != 0 {
		return c
	}
	if c := cmp.Compare(a.device.Index, b.device.Index); c != 0 {
		return c
	}
	return cmp.Compare(a.class, b.class)
}

// nameTracks numbers processes and threads and names them: a process per
// rank, pid rank+1 (pid 0 is the idle process to some viewers); tids
// unique across the trace, host lanes first within a rank.
// It sorts tr.tracks and returns, per old track index, the new one.
func (tr *trace) nameTracks(records []profiler.Record) []int32 {
	order := make([]int, len(tr.tracks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := &tr.tracks[a], &tr.tracks[b]
		if c := cmp.Compare(ta.rank, tb.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(min(ta.key.class, computeTrack), min(tb.key.class, computeTrack)); c != 0 {
			return c // host lanes first
		}
		if c := compareKeys(ta.key, tb.key); c != 0 {
			return c
		}
		return cmp.Compare(ta.lane, tb.lane)
	})
	// A rank's device is its recorder's, which its host ranges carry
	// (device ranges carry their stream's).
	devices := map[int]runtime.Device{}
	hostSeen := map[int]bool{}
	for i := range records {
		r := &records[i]
		if _, ok := devices[r.Rank]; !ok || (r.Kind == profiler.KindHost && !hostSeen[r.Rank]) {
			devices[r.Rank] = r.Device
			hostSeen[r.Rank] = hostSeen[r.Rank] || r.Kind == profiler.KindHost
		}
	}
	tr.rankDevice = devices
	names := map[runtime.Device]string{}
	deviceName := func(d runtime.Device) string {
		n, ok := names[d]
		if !ok {
			n = d.String()
			names[d] = n
		}
		return n
	}
	sorted := make([]track, 0, len(tr.tracks))
	remap := make([]int32, len(tr.tracks))
	lastRank, sortIndex := 0, 0
	for i, idx := range order {
		t := tr.tracks[idx]
		if i == 0 || t.rank != lastRank {
			t.process = "rank " + strconv.Itoa(t.rank) + " (" + deviceName(devices[t.rank]) + ")"
			lastRank, sortIndex = t.rank, 0
		}
		t.pid, t.tid, t.sort = t.rank+1, i+1, sortIndex
		sortIndex++
		switch t.key.class {
		case hostTrack:
			t.name = "host"
		case computeTrack:
			t.name = deviceName(t.key.device) + " compute"
		case commTrack:
			t.name = deviceName(t.key.device) + " communication"
		}
		if t.lane > 0 {
			t.name += " (" + strconv.Itoa(t.lane+1) + ")"
		}
		remap[idx] = int32(len(sorted))
		sorted = append(sorted, t)
	}
	tr.tracks = sorted
	return remap
}

// groupStable returns items reordered by key (0 ≤ key < n), keeping the
// order within each key.
func groupStable(items []item, n int, key func(*item) int32) []item {
	start := make([]int, n+1)
	for i := range items {
		start[key(&items[i])+1]++
	}
	for k := range n {
		start[k+1] += start[k]
	}
	out := make([]item, len(items))
	for i := range items {
		k := key(&items[i])
		out[start[k]] = items[i]
		start[k]++
	}
	return out
}

// mergeTracks merges items, grouped by track (their group field) and each
// track's run in output order, into one sequence ordered by start, longer
// first, then track.
func mergeTracks(items []item, tracks int) []item {
	// The runs, and a binary heap of the tracks by their next item.
	next := make([]int, 0, tracks)
	end := make([]int, 0, tracks)
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].group == items[lo].group {
			hi++
		}
		next, end = append(next, lo), append(end, hi)
		lo = hi
	}
	less := func(a, b int) bool {
		x, y := &items[next[a]], &items[next[b]]
		if x.start != y.start {
			return x.start < y.start
		}
		if x.dur != y.dur {
			return x.dur > y.dur
		}
		return x.group < y.group
	}
	heap := make([]int, len(next))
	for i := range heap {
		heap[i] = i
	}
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(heap) {
				return
			}
			if c+1 < len(heap) && less(heap[c+1], heap[c]) {
				c++
			}
			if !less(heap[c], heap[i]) {
				return
			}
			heap[i], heap[c] = heap[c], heap[i]
			i = c
		}
	}
	for i := len(heap)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]item, 0, len(items))
	for len(heap) > 0 {
		r := heap[0]
		out = append(out, items[next[r]])
		next[r]++
		if next[r] == end[r] {
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		down(0)
	}
	return out
}
