package importer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// producerTrainscope finds the otherData producer of trainscope's own
// traces (exporters/chrometrace writes it compact; a trace re-saved
// pretty-printed has spaces around the colon).
var producerTrainscope = regexp.MustCompile(`"producer"\s*:\s*"trainscope"`)

// ownEvent is one element of traceEvents as exporters/chrometrace writes
// it: metadata events name processes ("rank N (cpu:0)") and threads
// ("host", "cpu:0 compute", "cpu:0 communication (2)"); each record is a
// complete event on its rank's host track and, when device-timed, a
// second one on a device track.
type ownEvent struct {
	Ph   string      `json:"ph"`
	Cat  string      `json:"cat"`
	Name string      `json:"name"`
	Pid  int64       `json:"pid"`
	Tid  int64       `json:"tid"`
	Ts   json.Number `json:"ts"`
	Dur  json.Number `json:"dur"`
	Args ownArgs     `json:"args"`
}

// ownArgs are the args chrometrace writes (appendArgs), and a metadata
// event's name.
type ownArgs struct {
	Name       string       `json:"name"`
	Step       *int64       `json:"step"`
	Stage      *int64       `json:"stage"`
	Chunk      *int64       `json:"chunk"`
	Microbatch *int64       `json:"microbatch"`
	Phase      string       `json:"phase"`
	Tag        string       `json:"tag"`
	Device     string       `json:"device"` // a host range's device, where not its rank's
	HostUS     *json.Number `json:"host_us"`
	DeviceUS   *json.Number `json:"device_us"`
	Stream     *uint64      `json:"stream"`
	PeakMemory int64        `json:"peak_memory_bytes"`
	CutShort   bool         `json:"cut_short"`
	// DeviceUnfinished: a device range whose device work had not finished
	// (profiler.Record.DeviceUnfinished), on the host track only.
	DeviceUnfinished bool   `json:"device_unfinished"`
	Op               string `json:"op"`
	Bytes            int64  `json:"bytes"`
	Count            int64  `json:"count"`
	DType            string `json:"dtype"`
	Peer             *int64 `json:"peer"`
	Root             *int64 `json:"root"`
	Group            string `json:"group"`
	GroupID          string `json:"group_id"` // hexadecimal: profiler.Collective.GroupID
	GroupSize        int64  `json:"group_size"`
	GroupRank        int64  `json:"group_rank"`
	Seq              uint64 `json:"seq"`
	// TransferAfterUS: a p2p's network transfer ended this long after its
	// device interval (NCCL's proxy; profiler.Collective.TransferEnd).
	TransferAfterUS *json.Number `json:"transfer_end_after_device_us"`
}

// ownProcess is a process of the trace: a rank and its device.
type ownProcess struct {
	rank   int
	device runtime.Device
}

// ownTrack is a thread of the trace.
type ownTrack struct {
	rank   int
	host   bool
	comm   bool
	device runtime.Device
	named  bool
}

// pairKey identifies a record on both of its tracks: everything the host
// and the device event of one record share, including both durations
// (the host event's dur and device_us, the device event's host_us and
// dur), which are exact to the nanosecond.
type pairKey struct {
	rank            int
	name, cat, tag  string
	labels          profiler.Labels
	op, group       string
	gid, seq        uint64
	hostNs, devNs   int64
	stream          uint64
	haveStreamField bool
}

// hostEvent is a host-track event while the trace is read.
type hostEvent struct {
	tid int64
	rec profiler.Record
	// transferAfter is the p2p's transfer end less its device end, in ns,
	// when the trace gives one.
	transferAfter *int64
	off           int64 // of the event, for errors
}

// deviceEvent is a device-track event while the trace is read.
type deviceEvent struct {
	key        pairKey
	start, end int64
	device     runtime.Device
	comm       bool
}

// ParseTrainscope reads a trace.json that trainscope wrote
// (exporters/chrometrace: otherData.producer "trainscope") back into
// records: one per host-track event, with its device interval and stream
// from the matching device-track event, nesting (Parent, Depth) from the
// host track, DeviceNested where a device-timed ancestor encloses it,
// OuterInGroup and DeviceOuterInGroup as the recorder sets them,
// labels, collective fields, and bandwidths recomputed from the times;
// and one per traced kernel (a wrapped job's: a device event of category
// kernel with no host range), at depth 0.
// Times are on the wall clock of otherData.epoch when the trace states
// it. otherData's string members are kept in Profile.OtherData ("steps"
// says which steps the trace covers).
func ParseTrainscope(path string, r io.Reader) (*Profile, error) {
	sc := newChromeScanner(path, r)
	dec := sc.dec
	p := &Profile{Path: path, Format: FormatTrainscope, RankKnown: true, OtherData: map[string]string{}}
	tracks := map[int64]*ownTrack{}     // by tid
	processes := map[int64]ownProcess{} // by pid
	var hosts []hostEvent
	var devs []deviceEvent
	var kernels []profiler.Record // traced kernels: device events with no host range
	pending := map[int]pairKey{}  // host event index → its key, for device-timed ranges
	noStream := 0
	event := func(off int64, n int) error {
		var ev ownEvent
		if err := dec.Decode(&ev); err != nil {
			return sc.fail(off, fmt.Errorf("event %d: %w", n, err))
		}
		switch ev.Ph {
		case "M":
			if err := ownMetadata(&ev, tracks, processes); err != nil {
				return sc.fail(off, fmt.Errorf("event %d: %w", n, err))
			}
			return nil
		case "X":
		default:
			return nil // flows and anything else: not records
		}
		bad := func(format string, args ...any) error {
			return sc.fail(off, fmt.Errorf("event %d (%q): %s", n, ev.Name, fmt.Sprintf(format, args...)))
		}
		if ev.Name == "" {
			return bad("no name")
		}
		t := tracks[ev.Tid]
		if t == nil || !t.named {
			return bad("on thread %d, which no thread_name event names", ev.Tid)
		}
		if pr, ok := processes[ev.Pid]; !ok || pr.rank != t.rank {
			return bad("pid %d is not the process of rank %d's thread %d", ev.Pid, t.rank, ev.Tid)
		}
		ts, err := microsToNanosCut(ev.Ts)
		if err != nil {
			return bad("ts: %v", err)
		}
		dur, err := microsToNanosCut(ev.Dur)
		if err != nil {
			return bad("dur: %v", err)
		}
		if dur < 0 || ts < -math.MaxInt64/4 || ts > math.MaxInt64/4 || dur > math.MaxInt64/4 {
			return bad("ts %s, dur %s out of range", ev.Ts, ev.Dur)
		}
		kind, ok := kindOf(ev.Cat)
		if !ok {
			return bad("category %q is not a kind of range (host, device, collective, p2p)", ev.Cat)
		}
		labels, err := ownLabels(&ev.Args)
		if err != nil {
			return bad("%v", err)
		}
		key := pairKey{rank: t.rank, name: ev.Name, cat: ev.Cat, tag: ev.Args.Tag, labels: labels}
		var gid uint64
		if kind == profiler.KindCollective || kind == profiler.KindP2P {
			if ev.Args.GroupID != "" {
				if gid, err = strconv.ParseUint(ev.Args.GroupID, 16, 64); err != nil {
					return bad("group_id %q is not a hexadecimal communicator id", ev.Args.GroupID)
				}
			}
			key.op, key.group, key.gid, key.seq = ev.Args.Op, ev.Args.Group, gid, ev.Args.Seq
		}
		if ev.Args.Stream != nil {
			key.stream, key.haveStreamField = *ev.Args.Stream, true
		}
		if !t.host {
			if ev.Args.HostUS == nil {
				return bad("a device event without host_us")
			}
			if key.hostNs, err = microsToNanosCut(*ev.Args.HostUS); err != nil {
				return bad("host_us: %v", err)
			}
			key.devNs = dur
			if kind == profiler.KindKernel && key.hostNs == 0 {
				// A traced kernel (a wrapped job's, through CUPTI) has
				// no host range: the writer gave it only this event.
				rec := profiler.Record{Name: ev.Name, Kind: kind, Rank: t.rank, Device: t.device, Tag: ev.Args.Tag, Labels: labels,
					HostStart: time.Duration(ts), HostEnd: time.Duration(ts), HasDevice: true,
					DeviceStart: time.Duration(ts), DeviceEnd: time.Duration(ts + dur), Stream: key.stream}
				if !key.haveStreamField {
					rec.Stream = 1
					noStream++
				}
				kernels = append(kernels, rec)
				return nil
			}
			devs = append(devs, deviceEvent{key: key, start: ts, end: ts + dur, device: t.device, comm: t.comm})
			if !key.haveStreamField {
				noStream++
			}
			return nil
		}
		rec := profiler.Record{Name: ev.Name, Kind: kind, Rank: t.rank, Device: t.device, Tag: ev.Args.Tag, Labels: labels,
			HostStart: time.Duration(ts), HostEnd: time.Duration(ts + dur), PeakMemory: max(ev.Args.PeakMemory, 0),
			CutShort: ev.Args.CutShort, DeviceUnfinished: ev.Args.DeviceUnfinished}
		if kind == profiler.KindCollective || kind == profiler.KindP2P {
			rec.Collective = ownCollective(&ev.Args)
			rec.Collective.GroupID = gid
		}
		if ev.Args.Device != "" {
			if rec.Device, err = parseDevice(ev.Args.Device); err != nil {
				return bad("device: %v", err)
			}
		}
		if ev.Args.DeviceUS != nil {
			// Device-timed: its device event gives the interval. Until it
			// is found, the key rides in the record's device fields.
			if key.devNs, err = microsToNanosCut(*ev.Args.DeviceUS); err != nil {
				return bad("device_us: %v", err)
			}
			key.hostNs = dur
			rec.Stream = key.stream
		}
		he := hostEvent{tid: ev.Tid, rec: rec, off: off}
		if a := ev.Args.TransferAfterUS; a != nil && kind == profiler.KindP2P {
			ns, err := microsToNanosCut(*a)
			if err != nil {
				return bad("transfer_end_after_device_us: %v", err)
			}
			if ns < -math.MaxInt64/4 || ns > math.MaxInt64/4 { // within what dur may be (before the device's end too)
				return bad("transfer_end_after_device_us %s out of range", *a)
			}
			he.transferAfter = &ns
		}
		hosts = append(hosts, he)
		if ev.Args.DeviceUS != nil {
			pending[len(hosts)-1] = key
		}
		return nil
	}
	key := func(off int64, key string) error {
		if key != "otherData" {
			return sc.skip(off)
		}
		var other map[string]json.RawMessage
		if err := dec.Decode(&other); err != nil {
			return sc.fail(off, fmt.Errorf("otherData: %w", err))
		}
		for k, v := range other {
			var s string
			if json.Unmarshal(v, &s) == nil {
				p.OtherData[k] = s
			}
		}
		return nil
	}
	if err := sc.scan(event, key); err != nil {
		return nil, err
	}
	if p.OtherData["producer"] != "trainscope" {
		return nil, &ParseError{Path: path, Offset: 0, Err: errors.New("not a trace trainscope wrote (otherData.producer is not \"trainscope\")")}
	}
	var base int64
	if e, ok := p.OtherData["epoch"]; ok {
		t, err := time.Parse(time.RFC3339Nano, e)
		if err != nil {
			return nil, &ParseError{Path: path, Offset: 0, Err: fmt.Errorf("otherData.epoch %q: %w", e, err)}
		}
		// The events' ts and dur are each within ±2^61 ns: from an epoch
		// within 2^62 ns of 1970, every time fits in an int64.
		if latest := time.Unix(0, math.MaxInt64/2); t.Before(time.Unix(0, 0)) || t.After(latest) {
			return nil, &ParseError{Path: path, Offset: 0, Err: fmt.Errorf("otherData.epoch %q out of range (1970 to %s)", e, latest.UTC().Format(time.RFC3339))}
		}
		base = t.UnixNano()
	}
	unpairedHost, unpairedDev := pairDevice(hosts, pending, devs)
	for i := range hosts {
		if h := &hosts[i]; h.transferAfter != nil && h.rec.HasDevice {
			// On the epoch's clock here, not with the other times below:
			// 0 is no transfer end there, and the device end on the
			// epoch's clock fits in an int64, the transfer end after it
			// may not.
			end, after := int64(h.rec.DeviceEnd)+base, *h.transferAfter
			if after > 0 && end > math.MaxInt64-after {
				return nil, &ParseError{Path: path, Offset: h.off, Err: fmt.Errorf("%q: transfer_end_after_device_us %d ns out of range: the transfer would end past what 64 bits of nanoseconds since 1970 hold", h.rec.Name, after)}
			}
			h.rec.Collective.TransferEnd = time.Duration(end + after)
		}
	}
	if noStream > 0 {
		p.warnf("%s: %s %s no stream (a trace written before streams were recorded): each rank's compute and communication tracks are taken as one stream each", path, plural(noStream, "device event"), either(noStream, "carries", "carry"))
	}
	if unpairedHost > 0 {
		p.warnf("%s: %s %s no device event: kept with %s host times only", path, plural(unpairedHost, "device-timed range"), either(unpairedHost, "has", "have"), either(unpairedHost, "its", "their"))
	}
	if unpairedDev > 0 {
		p.warnf("%s: %s %s no host event: left out", path, plural(unpairedDev, "device event"), either(unpairedDev, "has", "have"))
	}
	p.Records = nestHost(hosts)
	if len(kernels) > 0 {
		// Numbered after each rank's ranges, at depth 0.
		next := map[int]uint64{}
		for i := range p.Records {
			next[p.Records[i].Rank] = max(next[p.Records[i].Rank], p.Records[i].ID)
		}
		for _, k := range kernels {
			next[k.Rank]++
			k.ID = next[k.Rank]
			p.Records = append(p.Records, k)
		}
	}
	for i := range p.Records {
		r := &p.Records[i]
		r.HostStart += time.Duration(base)
		r.HostEnd += time.Duration(base)
		if r.HasDevice {
			r.DeviceStart += time.Duration(base)
			r.DeviceEnd += time.Duration(base)
		}
		if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
			d := r.HostDuration()
			if r.HasDevice {
				d = r.DeviceDuration()
			}
			r.AlgBandwidth = profiler.AlgBandwidth(r.Collective.Bytes, d.Seconds())
			r.BusBandwidth = r.AlgBandwidth * r.Collective.BusFactor
		}
	}
	return p, nil
}

// ownMetadata reads a process_name or thread_name event.
func ownMetadata(ev *ownEvent, tracks map[int64]*ownTrack, processes map[int64]ownProcess) error {
	switch ev.Name {
	case "process_name":
		// "rank N (device)"
		rest, ok := strings.CutPrefix(ev.Args.Name, "rank ")
		num, dev, ok2 := strings.Cut(rest, " (")
		rank, err := strconv.Atoi(num)
		d, derr := parseDevice(strings.TrimSuffix(dev, ")"))
		if !ok || !ok2 || err != nil || rank < 0 || !strings.HasSuffix(dev, ")") || derr != nil {
			return fmt.Errorf("process %d is named %q, not \"rank N (device)\"", ev.Pid, ev.Args.Name)
		}
		processes[ev.Pid] = ownProcess{rank, d}
	case "thread_name":
		pr, ok := processes[ev.Pid]
		if !ok {
			return fmt.Errorf("thread %d of process %d, which no process_name event names", ev.Tid, ev.Pid)
		}
		name := ev.Args.Name
		// A lane beyond the first: "host (2)".
		if i := strings.LastIndex(name, " ("); i >= 0 && strings.HasSuffix(name, ")") {
			if _, err := strconv.Atoi(name[i+2 : len(name)-1]); err == nil {
				name = name[:i]
			}
		}
		t := &ownTrack{rank: pr.rank, named: true}
		switch {
		case name == "host":
			// A rank's host ranges carry its recorder's device.
			t.host, t.device = true, pr.device
		case strings.HasSuffix(name, " compute"), strings.HasSuffix(name, " communication"):
			dev, class, _ := strings.Cut(name, " ")
			t.comm = class == "communication"
			d, err := parseDevice(dev)
			if err != nil {
				return fmt.Errorf("thread %q: %w", ev.Args.Name, err)
			}
			t.device = d
		default:
			return fmt.Errorf("thread %d is named %q: not a host, compute or communication track", ev.Tid, ev.Args.Name)
		}
		tracks[ev.Tid] = t
	}
	return nil
}

// parseDevice reads runtime.Device.String's "cpu:0".
// parseDevice reads "cuda:1"; index -1 is a device not known, as a
// wrapped run's operations carry where NCCL did not say which GPU.
func parseDevice(s string) (runtime.Device, error) {
	typ, idx, ok := strings.Cut(s, ":")
	t, err := runtime.ParseDeviceType(typ)
	n, nerr := strconv.Atoi(idx)
	if !ok || err != nil || nerr != nil || n < -1 {
		return runtime.Device{}, fmt.Errorf("%q is not a device (type:index)", s)
	}
	return runtime.Device{Type: t, Index: n}, nil
}

func kindOf(cat string) (profiler.Kind, bool) {
	for k := profiler.KindHost; k <= profiler.KindKernel; k++ {
		if k.String() == cat {
			return k, true
		}
	}
	return 0, false
}

// ownLabels reads the pipeline labels; an absent one is profiler.None.
func ownLabels(a *ownArgs) (profiler.Labels, error) {
	l := profiler.NoLabels
	get := func(name string, v *int64, limit int64) (int64, error) {
		if v == nil {
			return profiler.None, nil
		}
		if *v < 0 || *v > limit {
			return 0, fmt.Errorf("%s %d out of range", name, *v)
		}
		return *v, nil
	}
	step, err := get("step", a.Step, math.MaxInt32)
	if err != nil {
		return l, err
	}
	mb, err := get("microbatch", a.Microbatch, math.MaxInt32)
	if err != nil {
		return l, err
	}
	stage, err := get("stage", a.Stage, math.MaxInt16)
	if err != nil {
		return l, err
	}
	chunk, err := get("chunk", a.Chunk, math.MaxInt16)
	if err != nil {
		return l, err
	}
	l.Step, l.Microbatch, l.Stage, l.Chunk = int32(step), int32(mb), int16(stage), int16(chunk)
	if a.Phase != "" {
		found := false
		for ph := profiler.Forward; ph <= profiler.Comm; ph++ {
			if ph.String() == a.Phase {
				l.Phase, found = ph, true
			}
		}
		if !found {
			return l, fmt.Errorf("phase %q is not one of forward, backward, optimizer, comm", a.Phase)
		}
	}
	return l, nil
}

func ownCollective(a *ownArgs) profiler.Collective {
	c := profiler.Collective{Op: a.Op, Bytes: max(a.Bytes, 0), Count: max(a.Count, 0), DType: a.DType, Peer: -1, Root: -1,
		Group: a.Group, GroupSize: int32(min(max(a.GroupSize, 0), math.MaxInt32)), GroupRank: int32(min(max(a.GroupRank, 0), math.MaxInt32)), Seq: a.Seq}
	if a.Peer != nil && *a.Peer >= 0 && *a.Peer <= math.MaxInt32 {
		c.Peer = int32(*a.Peer)
	}
	if a.Root != nil && *a.Root >= 0 && *a.Root <= math.MaxInt32 {
		c.Root = int32(*a.Root)
	}
	c.BusFactor = ccl.BusFactor(c.Op, int(c.GroupSize))
	return c
}

// pairDevice gives each device-timed host event the device event with
// its key: the k-th of a key in the file (by device start) goes with the
// k-th host event of that key (by host start). It returns how many of
// each side found no partner.
func pairDevice(hosts []hostEvent, pending map[int]pairKey, devs []deviceEvent) (unpairedHost, unpairedDev int) {
	queue := map[pairKey][]int{}
	for i := range hosts {
		if k, ok := pending[i]; ok {
			queue[k] = append(queue[k], i)
		}
	}
	for _, d := range devs {
		q := queue[d.key]
		if len(q) == 0 {
			unpairedDev++
			continue
		}
		r := &hosts[q[0]].rec
		queue[d.key] = q[1:]
		r.HasDevice = true
		r.DeviceStart, r.DeviceEnd = time.Duration(d.start), time.Duration(d.end)
		r.Device = d.device
		if !d.key.haveStreamField {
			// Without streams, each track class stands for one stream.
			r.Stream = 1
			if d.comm {
				r.Stream = 2
			}
		}
	}
	for _, q := range queue {
		unpairedHost += len(q)
	}
	return unpairedHost, unpairedDev
}

// nestHost numbers the records per rank and nests them on their host
// track by containment, as the writer laid them out (each track's events
// nest properly, in file order by start, enclosing first). A collective
// or point-to-point range encloses nothing: the calls of a group
// (GroupStart…GroupEnd) all end at its end, so a Recv posted after its
// Send lies within the Send's host interval without being inside it.
func nestHost(hosts []hostEvent) []profiler.Record {
	type open struct {
		start, end time.Duration
		id         uint64
		device     bool // this range or one enclosing it is device-timed
		group      string
		// groupDevice: this range or one enclosing it in its report
		// group is device-timed.
		groupDevice bool
	}
	stacks := map[int64][]open{}
	nextID := map[int]uint64{}
	out := make([]profiler.Record, 0, len(hosts))
	for _, h := range hosts {
		r := h.rec
		stack := stacks[h.tid]
		for len(stack) > 0 {
			t := stack[len(stack)-1]
			if r.HostStart >= t.start && r.HostEnd <= t.end && (r.HostStart < t.end || t.start == t.end || r.HostStart == t.start) {
				break
			}
			stack = stack[:len(stack)-1]
		}
		nextID[r.Rank]++
		r.ID = nextID[r.Rank]
		r.Depth = len(stack)
		inDevice := false
		if len(stack) > 0 {
			top := stack[len(stack)-1]
			r.Parent, inDevice = top.id, top.device
		}
		r.DeviceNested = r.HasDevice && inDevice
		// The report group's outermost ranges, as the recorder marks
		// them (Record.OuterInGroup, DeviceOuterInGroup).
		group, inGroupDevice := profiler.TagOf(&r), false
		r.OuterInGroup = len(stack) > 0
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i].group == group {
				r.OuterInGroup, inGroupDevice = false, stack[i].groupDevice
				break
			}
		}
		r.DeviceOuterInGroup = r.DeviceNested && !inGroupDevice
		stacks[h.tid] = stack
		if r.Kind != profiler.KindCollective && r.Kind != profiler.KindP2P {
			stacks[h.tid] = append(stack, open{start: r.HostStart, end: r.HostEnd, id: r.ID, device: inDevice || r.HasDevice,
				group: group, groupDevice: inGroupDevice || r.HasDevice})
		}
		out = append(out, r)
	}
	return out
}
