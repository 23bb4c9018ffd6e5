package importer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/internal/naming"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// kinetoEvent is one element of traceEvents. Complete ("X") events are
// imported, and duration events written as "B"/"E" pairs; the others
// (metadata, flows, instants but the allocator's, counters) are read
// past.
type kinetoEvent struct {
	Ph   string          `json:"ph"`
	Cat  string          `json:"cat"`
	Name string          `json:"name"`
	Pid  json.RawMessage `json:"pid"`
	Tid  json.RawMessage `json:"tid"`
	Ts   json.RawMessage `json:"ts"`
	Dur  json.RawMessage `json:"dur"`
	Args kinetoArgs      `json:"args"`
}

// kinetoArgs are the args Kineto writes that the import uses: the
// correlation between a runtime call and the GPU activity it launched, the
// GPU's device and stream, and the collective metadata PyTorch attaches
// to NCCL kernels (libkineto output_json.cpp, appendCollectiveArgs; the
// names are torch/csrc/profiler/util.h's kCommsName, kInMsgNelems, …).
type kinetoArgs struct {
	Correlation flexInt    `json:"correlation"`
	Device      *flexInt   `json:"device"`
	Stream      flexInt    `json:"stream"`
	Collective  flexString `json:"Collective name"`
	InNelems    *flexInt   `json:"In msg nelems"`
	OutNelems   *flexInt   `json:"Out msg nelems"`
	GroupSize   *flexInt   `json:"Group size"`
	DType       flexString `json:"dtype"`
	GroupName   flexString `json:"Process Group Name"`
	GroupRanks  flexString `json:"Process Group Ranks"`
	GroupDesc   flexString `json:"Process Group Description"`
	// Rank is a record_param_comms call's rank in its process group.
	Rank    *flexInt `json:"Rank"`
	SrcRank *flexInt `json:"Src Rank"`
	DstRank *flexInt `json:"Dst Rank"`
	Seq     *flexInt `json:"Seq"`
	// A "[memory]" instant's (profile_memory=True): the allocator's
	// device (c10::DeviceType: 0 the CPU) and its total after the event.
	DeviceType     *flexInt `json:"Device Type"`
	DeviceID       *flexInt `json:"Device Id"`
	TotalAllocated *flexInt `json:"Total Allocated"`
	TotalReserved  *flexInt `json:"Total Reserved"`
}

// flexInt reads a JSON integer, or a string holding one (older writers
// quoted some metadata).
type flexInt struct {
	V   int64
	Set bool
}

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if s == "null" || s == "" {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fv, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || fv != math.Trunc(fv) || math.Abs(fv) > 1<<62 {
			return fmt.Errorf("%s is not an integer", b)
		}
		v = int64(fv)
	}
	f.V, f.Set = v, true
	return nil
}

// flexString reads a JSON string, or any other scalar as its text.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
		return nil
	}
	if len(b) > 0 && (b[0] == '{' || b[0] == '[') {
		return fmt.Errorf("want a string, found %.20s", b)
	}
	if string(b) != "null" {
		*f = flexString(b)
	}
	return nil
}

type eventClass uint8

const (
	classSkip    eventClass = iota
	classHost               // CPU ops, annotations, Python functions
	classRuntime            // CUDA runtime/driver calls: host time, may launch GPU work
	classDevice             // kernels, memcpys, memsets: device time
)

func classify(cat string) eventClass {
	switch strings.ToLower(cat) {
	case "cpu_op", "operator", "user_annotation", "python_function", "python_function_call":
		return classHost
	case "cuda_runtime", "cuda_driver", "runtime", "driver", "xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver":
		return classRuntime
	case "kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset":
		return classDevice
	}
	return classSkip
}

// begun is a "B" event not yet ended: its offset and start (ns).
type begun struct {
	ev  kinetoEvent
	off int64
	ts  int64
}

// skipKey counts the duration events of a category not imported:
// complete events, or "B"/"E" pairs.
type skipKey struct {
	cat  string
	pair bool
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// either is one where n is 1, else many: the verb or pronoun that agrees
// with plural(n, …).
func either(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// mergeArgs sets the args an "E" event states on its "B" event's, as the
// trace-event format merges them.
func mergeArgs(dst, src *kinetoArgs) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range s.NumField() {
		if f := s.Field(i); !f.IsZero() {
			d.Field(i).Set(f)
		}
	}
}

// countingReader counts the bytes read, for the offset of a truncated file.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ParseKineto reads a Chrome trace JSON as torch.profiler's
// export_chrome_trace (Kineto) writes it: an object with "traceEvents",
// or a bare array of events. See docs/import.md for the mapping.
func ParseKineto(path string, r io.Reader) (*Profile, error) {
	sc := newChromeScanner(path, r)
	dec := sc.dec
	p := &Profile{Path: path, Format: FormatKineto}
	var (
		events   eventList
		names    = interner{} // event names and threads
		thread   []byte       // scratch: an event's pid/tid
		ev       kinetoEvent  // the event being read
		base     int64
		haveBase bool
		rank     flexInt
		groups   []processGroup
		skipped  = map[skipKey]int{}
		mems     []memSample
		// The "B" events not yet ended, per pid/tid; "E" events with none
		// open.
		open     = map[string][]begun{}
		unbegun  int
		beginEnd func(ev *kinetoEvent, off int64) error
	)
	// threadOf is ev's pid/tid.
	threadOf := func(ev *kinetoEvent) string {
		thread = append(append(append(thread[:0], ev.Pid...), '/'), ev.Tid...)
		return names.bytes(thread)
	}
	// add imports a duration event that starts at ts and lasts dur (ns):
	// a complete event, or a "B"/"E" pair (begin at off).
	add := func(ev *kinetoEvent, off int64, ts, dur int64, pair bool) error {
		class := classify(ev.Cat)
		if class == classSkip {
			skipped[skipKey{ev.Cat, pair}]++
			return nil
		}
		if dur < 0 || ts > math.MaxInt64/2 || dur > math.MaxInt64/4 || ts < -math.MaxInt64/4 {
			return sc.fail(off, fmt.Errorf("event %q: ts %s, dur %s out of range", ev.Name, ev.Ts, ev.Dur))
		}
		if ev.Name == "" {
			ev.Name = "(unnamed " + ev.Cat + ")"
		}
		events.add(newKEvent(ev, class, threadOf(ev), names, ts, ts+dur, off))
		return nil
	}
	event := func(off int64, n int) error {
		// One event value for all: the decoder refills its raw fields'
		// buffers rather than allocating four for every event.
		ev = kinetoEvent{Pid: ev.Pid[:0], Tid: ev.Tid[:0], Ts: ev.Ts[:0], Dur: ev.Dur[:0]}
		if err := dec.Decode(&ev); err != nil {
			return sc.fail(off, fmt.Errorf("event %d: %w", n, err))
		}
		if (ev.Ph == "i" || ev.Ph == "I") && ev.Name == "[memory]" {
			return memoryEvent(&ev, &mems, func(err error) error { return sc.fail(off, err) })
		}
		switch ev.Ph {
		case "X":
		case "B", "E":
			return beginEnd(&ev, off)
		default:
			return nil
		}
		if classify(ev.Cat) == classSkip {
			skipped[skipKey{ev.Cat, false}]++
			return nil
		}
		ts, err := microsToNanos(numberText(ev.Ts))
		if err != nil {
			return sc.fail(off, fmt.Errorf("event %q: ts: %w", ev.Name, err))
		}
		// A complete event states its duration: one without is malformed,
		// not an instant (the trace-event format's "i").
		dur, err := microsToNanos(numberText(ev.Dur))
		if err != nil {
			return sc.fail(off, fmt.Errorf("event %q: dur: %w", ev.Name, err))
		}
		return add(&ev, off, ts, dur, false)
	}
	// beginEnd reads a duration event written as a pair (the trace-event
	// format's "B" and "E", which Chrome-trace writers other than Kineto
	// use): an "E" ends the latest "B" still open on its pid and tid, its
	// args merged into the "B"'s.
	beginEnd = func(ev *kinetoEvent, off int64) error {
		ts, err := microsToNanos(numberText(ev.Ts))
		if err == nil && (ts > math.MaxInt64/2 || ts < -math.MaxInt64/4) {
			err = errors.New("out of range")
		}
		if err != nil {
			return sc.fail(off, fmt.Errorf("event %q (%q): ts: %w", ev.Name, ev.Ph, err))
		}
		thread := threadOf(ev)
		stack := open[thread]
		if ev.Ph == "B" {
			b := begun{*ev, off, ts}
			// Its own copies of the raw fields, which the next event's
			// decoding overwrites.
			b.ev.Pid, b.ev.Tid, b.ev.Ts, b.ev.Dur = bytes.Clone(ev.Pid), bytes.Clone(ev.Tid), bytes.Clone(ev.Ts), bytes.Clone(ev.Dur)
			open[thread] = append(stack, b)
			return nil
		}
		if len(stack) == 0 {
			unbegun++
			return nil
		}
		b := stack[len(stack)-1]
		open[thread] = stack[:len(stack)-1]
		if ts < b.ts {
			return sc.fail(off, fmt.Errorf("event %q: ends (\"E\" at ts %s) before it begins (ts %s)", b.ev.Name, ev.Ts, b.ev.Ts))
		}
		if b.ev.Cat == "" {
			b.ev.Cat = ev.Cat
		}
		mergeArgs(&b.ev.Args, &ev.Args)
		b.ev.Dur = json.RawMessage(strconv.FormatFloat(float64(ts-b.ts)/1000, 'f', -1, 64))
		return add(&b.ev, b.off, b.ts, ts-b.ts, true)
	}
	key := func(off int64, key string) error {
		switch key {
		case "baseTimeNanoseconds":
			var n json.Number
			if err := dec.Decode(&n); err != nil {
				return sc.fail(off, fmt.Errorf("baseTimeNanoseconds: %w", err))
			}
			var err error
			if base, err = strconv.ParseInt(string(n), 10, 64); err != nil || base < 0 || base > math.MaxInt64/2 {
				return sc.fail(off, fmt.Errorf("baseTimeNanoseconds %s: want nanoseconds", n))
			}
			haveBase = true
		case "distributedInfo":
			var di struct {
				Rank     flexInt         `json:"rank"`
				PGConfig json.RawMessage `json:"pg_config"`
			}
			if err := dec.Decode(&di); err != nil {
				return sc.fail(off, fmt.Errorf("distributedInfo: %w", err))
			}
			rank = di.Rank
			groups = processGroups(p, di.PGConfig)
		default:
			return sc.skip(off)
		}
		return nil
	}
	if err := sc.scan(event, key); err != nil {
		return nil, err
	}
	if !rank.Set {
		rank = rankFromCollectives(p, &events)
	}
	if rank.Set {
		if rank.V < 0 || rank.V > 1<<30 {
			return nil, sc.fail(0, fmt.Errorf("distributedInfo.rank %d is not a rank", rank.V))
		}
		p.RankKnown = true
	}
	if haveBase {
		for i := range events.len() {
			// Within what the records' times hold (Combine subtracts
			// the earliest start, which may be −2^61 ns).
			e := events.at(i)
			if e.end > math.MaxInt64/4*3-base {
				return nil, sc.fail(e.offset, fmt.Errorf("event %q: ts + dur + baseTimeNanoseconds %d out of range", e.name, base))
			}
			e.start += base
			e.end += base
		}
		for i := range mems {
			mems[i].at += base
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(skipped), func(a, b skipKey) int {
		return cmp.Or(strings.Compare(a.cat, b.cat), cmp.Compare(btoi(a.pair), btoi(b.pair)))
	}) {
		if k.pair {
			p.warnf("%s: %s of category %q not imported", path, plural(skipped[k], `"B"/"E" pair`), k.cat)
		} else {
			p.warnf("%s: %s of category %q not imported", path, plural(skipped[k], "complete event"), k.cat)
		}
	}
	if unbegun > 0 {
		p.warnf("%s: %s with no \"B\" open on its thread (pid and tid): not imported", path, plural(unbegun, `"E" event`))
	}
	unended := 0
	for _, st := range open {
		unended += len(st)
	}
	if unended > 0 {
		p.warnf("%s: %s never ended (no \"E\" after it on its thread, pid and tid): not imported", path, plural(unended, `"B" event`))
	}
	var actionStage int32
	p.Records, actionStage = kinetoRecords(p, &events, int(rank.V))
	stageRecords(p, groups, int(rank.V), rank.Set, actionStage)
	peakMemory(p, mems)
	return p, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != d {
		return fmt.Errorf("want %q, found %v", d, t)
	}
	return nil
}

// numberText is a JSON number's text, or a quoted one's; "" for null.
func numberText(raw json.RawMessage) json.Number {
	if string(raw) == "null" {
		return ""
	}
	return json.Number(bytes.Trim(raw, `"`))
}

// microsToNanos reads a Chrome trace time, microseconds with an optional
// fraction and exponent ("1234.567", "1.772e15"), as whole nanoseconds
// rounded to the nearest (half a nanosecond away from zero), without
// going through a float64, which cannot hold an absolute time to the
// nanosecond: digits past the third decimal are float noise from a tool
// that rewrote the trace ("124.45699999999999"), and cutting them would
// end a range a nanosecond early, before a child that ends with it.
func microsToNanos(n json.Number) (int64, error) { return decimalNanos(n, true) }

// microsToNanosCut reads a time of trainscope's own trace, which its
// exporter writes above the exact nanosecond, away from zero (half a
// nanosecond above before December 2026, a quarter since): cut toward
// zero, each form reads as the nanosecond written, where rounding would
// read the older form a nanosecond late.
func microsToNanosCut(n json.Number) (int64, error) { return decimalNanos(n, false) }

// decimalNanos reads microseconds as text into nanoseconds, rounded to
// the nearest or cut toward zero.
func decimalNanos(n json.Number, round bool) (int64, error) {
	s := string(n)
	if s == "" {
		return 0, errors.New("missing")
	}
	// Made only for a time that is not one (a trace holds millions of
	// times), from a copy of s, so that s does not escape and a caller's
	// conversion of the decoder's bytes needs no allocation.
	bad := func() error { return fmt.Errorf("%q is not a time in microseconds", strings.Clone(s)) }
	t := s
	neg := false
	if t[0] == '-' || t[0] == '+' {
		neg, t = t[0] == '-', t[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ReplaceAll(t, "E", "e"), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	digitsOnly := func(d string) bool {
		return strings.Trim(d, "0123456789") == ""
	}
	if whole == "" || !digitsOnly(whole) || !digitsOnly(frac) {
		return 0, bad()
	}
	// The decimal point, counted in digits of whole+frac, moved to
	// nanoseconds (three places) and by the exponent.
	digits := strings.TrimLeft(whole+frac, "0")
	point := len(whole) - (len(whole+frac) - len(digits)) + 3
	if hasExp {
		if e := strings.TrimPrefix(strings.TrimPrefix(expText, "+"), "-"); e == "" || !digitsOnly(e) {
			return 0, bad()
		}
		exp, err := strconv.ParseInt(expText, 10, 32)
		switch {
		case digits == "":
		case err != nil && strings.HasPrefix(expText, "-"), err == nil && exp < -1000:
			return 0, nil // far below a nanosecond
		case err != nil, exp > 1000:
			return 0, bad()
		default:
			point += int(exp)
		}
	}
	if digits == "" || point < 0 {
		return 0, nil
	}
	// ns is digits[:point] (zeros past the digits), rounded by digits[point].
	var ns uint64
	if point < len(digits) {
		if point > 0 {
			var err error
			if ns, err = strconv.ParseUint(digits[:point], 10, 64); err != nil {
				return 0, bad()
			}
		}
	} else {
		var err error
		if ns, err = strconv.ParseUint(digits, 10, 64); err != nil {
			return 0, bad()
		}
		// The zeros past the digits, multiplied in: digits starts with
		// one that is not 0, so 20 of them are past any uint64.
		for range point - len(digits) {
			if ns > math.MaxUint64/10 {
				return 0, bad()
			}
			ns *= 10
		}
	}
	if round && point < len(digits) && digits[point] >= '5' {
		ns++
	}
	if ns > math.MaxInt64 {
		return 0, bad()
	}
	if neg {
		return -int64(ns), nil
	}
	return int64(ns), nil
}

// kinetoRecords turns the events into records: host events nested per
// thread by containment; each GPU activity merged with the runtime call
// that launched it (same correlation) into one record whose host time is
// the launch and whose device time is the activity. A top-level range
// named as a step (torch.profiler's ProfilerStep#N, or "step N" as
// naming.StepNumber reads it) is a step range; kernels launched inside a
// range named as forward or backward work (naming.WorkOf) carry its
// phase, chunk and microbatch (labeller).
func kinetoRecords(p *Profile, events *eventList, rank int) ([]profiler.Record, int32) {
	n := events.len()
	hosts, linked := 0, 0
	for i := range n {
		e := events.at(i)
		switch {
		case e.class != classDevice:
			hosts++
		case e.corrSet:
			linked++
		}
	}
	// The GPU activities by correlation, in file order within one: a
	// sorted slice, where a map of slices took an allocation per launch.
	launches := make([]launch, 0, linked)
	for i := range n {
		if e := events.at(i); e.class == classDevice && e.corrSet {
			launches = append(launches, launch{e.corr, i})
		}
	}
	slices.SortStableFunc(launches, func(a, b launch) int { return cmp.Compare(a.corr, b.corr) })
	// launchedBy is what the runtime call of correlation c launched; a
	// correlation's activities are launched once, by its first call (a
	// later call with the same correlation, in a malformed trace, stays a
	// host range), and launched marks them.
	launched := make([]bool, n)
	launchedBy := func(c int64) []launch {
		lo, _ := slices.BinarySearchFunc(launches, c, func(l launch, c int64) int { return cmp.Compare(l.corr, c) })
		hi := lo
		for hi < len(launches) && launches[hi].corr == c {
			hi++
		}
		if lo == hi || launched[launches[lo].ev] {
			return nil
		}
		return launches[lo:hi]
	}
	// One record per event, less the activities that share a record with
	// their launch: the records are made to measure (they are most of
	// what an import holds).
	merged := 0
	for i := range n {
		if e := events.at(i); e.class == classRuntime && e.corrSet {
			if l := launchedBy(e.corr); len(l) == 1 {
				launched[l[0].ev] = true
				merged++
			}
		}
	}
	clear(launched)
	// Host side, per thread, in start order (enclosing first).
	order := make([]int, 0, hosts)
	for i := range n {
		if events.at(i).class != classDevice {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ea, eb := events.at(a), events.at(b)
		if c := strings.Compare(ea.thread, eb.thread); c != 0 {
			return c
		}
		if c := cmp.Compare(ea.start, eb.start); c != 0 {
			return c
		}
		return cmp.Compare(eb.end, ea.end)
	})
	out := make([]profiler.Record, 0, n-merged)
	nextID := uint64(1)
	type open struct {
		start, end int64
		id         uint64
		step       int32
		work       int // the innermost range named as work, in works; −1: none
		depth      int
		// python: the range and all that enclose it are the Python
		// stack's (python_function events).
		python bool
	}
	var (
		stack []open
		lab   labeller
	)
	thread := ""
	nextStep := int32(0)
	unknownDType := map[string]bool{}
	// The thread's send and receive calls (record_param_comms) since its
	// last NCCL kernel launch: what a p2p kernel launched without
	// metadata of its own sent or received (pairP2P).
	var p2pCalls []*kEvent
	batched := 0
	for _, i := range order {
		ev := events.at(i)
		if ev.thread != thread {
			thread, stack, p2pCalls = ev.thread, stack[:0], p2pCalls[:0]
		}
		if ev.class == classHost && ev.name == "record_param_comms" {
			if op := collectiveOps[strings.ToLower(string(ev.args().Collective))]; op == ccl.OpSend || op == ccl.OpRecv {
				p2pCalls = append(p2pCalls, ev)
			}
		}
		for len(stack) > 0 {
			t := stack[len(stack)-1]
			inside := ev.start >= t.start && ev.end <= t.end && (ev.start < t.end || t.start == t.end || ev.start == t.start)
			if inside {
				break
			}
			stack = stack[:len(stack)-1]
		}
		rec := profiler.Record{ID: nextID, Name: ev.name, Rank: rank, Kind: profiler.KindHost,
			Device: runtime.Device{Type: runtime.CPU}, Labels: profiler.NoLabels,
			HostStart: time.Duration(ev.start), HostEnd: time.Duration(ev.end)}
		nextID++
		work := -1
		// top: no range encloses ev but the Python stack's (with_stack's
		// python_function events, which enclose the whole loop).
		top := true
		if len(stack) > 0 {
			t := &stack[len(stack)-1]
			rec.Parent, rec.Depth = t.id, t.depth+1
			rec.Step = t.step
			work = t.work
			top = t.python
		}
		if ev.class == classHost && rec.Step == profiler.None {
			n, ok := naming.ProfilerStep(ev.name)
			if !ok && top {
				n, ok = naming.StepNumber(ev.name, profiler.StepName, nextStep)
			}
			switch {
			case !ok:
			case top:
				// The step range: top-level, as a step range is, its
				// Python callers' ranges left beside it.
				rec.Name, rec.Step = profiler.StepName, n
				if n < math.MaxInt32 { // the last step a label holds: the next would wrap
					nextStep = n + 1
				}
				rec.Parent, rec.Depth = 0, 0
				lab.steps = append(lab.steps, span{ev.start, ev.end, n})
			default:
				// ProfilerStep#N inside another range (the loop's own):
				// it labels the step, but a step range is top-level.
				rec.Step = n
				lab.steps = append(lab.steps, span{ev.start, ev.end, n})
			}
		}
		if ev.class == classHost {
			if w, ok := naming.WorkOf(ev.name); ok {
				work = len(lab.works)
				lab.works = append(lab.works, workRange{span{ev.start, ev.end, 0}, ev.thread, w})
			}
		}
		var children []launch
		if ev.class == classRuntime && ev.corrSet {
			children = launchedBy(ev.corr)
		}
		if len(children) == 1 {
			// The launch and what it launched are one range, as a range
			// recorded around a launch is in trainscope.
			d := events.at(children[0].ev)
			launched[children[0].ev] = true
			if isNCCLKernel(d.name) {
				if !pairP2P(d, p2pCalls) {
					batched++
				}
				p2pCalls = p2pCalls[:0]
			}
			deviceRecord(&rec, d, p, unknownDType)
		}
		out = append(out, rec)
		lab.add(out, len(out)-1, work)
		stack = append(stack, open{start: ev.start, end: ev.end, id: rec.ID, step: rec.Step, work: work,
			depth: rec.Depth, python: ev.python && top})
		if len(children) > 1 {
			// One launch of many activities (a CUDA graph): each is a
			// range inside the launch, with no host time of its own.
			for _, c := range children {
				d := events.at(c.ev)
				launched[c.ev] = true
				dr := profiler.Record{ID: nextID, Parent: rec.ID, Depth: rec.Depth + 1, Rank: rank, Labels: profiler.NoLabels,
					HostStart: rec.HostEnd, HostEnd: rec.HostEnd}
				dr.Step = rec.Step
				nextID++
				deviceRecord(&dr, d, p, unknownDType)
				out = append(out, dr)
				lab.add(out, len(out)-1, work)
			}
		}
	}
	// GPU activities no launch in the trace accounts for: ranges of their
	// own, with no host time.
	for i := range n {
		d := events.at(i)
		if d.class != classDevice || launched[i] {
			continue
		}
		dr := profiler.Record{ID: nextID, Rank: rank, Labels: profiler.NoLabels,
			HostStart: time.Duration(d.start), HostEnd: time.Duration(d.start)}
		nextID++
		deviceRecord(&dr, d, p, unknownDType)
		out = append(out, dr)
	}
	if batched > 0 {
		p.warnf("%s: %d point-to-point kernels each ran a batch of several sends and receives, which the trace does not tell apart: not matched with their peers", p.Path, batched)
	}
	actionStage := lab.label(p, out)
	for _, dt := range slices.Sorted(maps.Keys(unknownDType)) {
		p.warnf("%s: collectives of dtype %q: element size unknown, so their bytes and bandwidths are 0", p.Path, dt)
	}
	if n := numberCollectives(out); n > 0 {
		p.warnf("%s: %s %s no sequence number (\"Seq\"): numbered in their order per process group and step, to match them across ranks", p.Path, plural(n, "collective"), either(n, "carries", "carry"))
	}
	return out, actionStage
}

// launch is a GPU activity's correlation and its index in the events.
type launch struct {
	corr int64
	ev   int
}

// pairP2P gives NCCL kernel d, launched without metadata of its own (a
// send or receive PyTorch ran as a batch of one: "nccl:coalesced"), the
// metadata of the one send or receive call its thread made since its
// previous NCCL kernel. It reports false for a point-to-point kernel of
// several calls, which one record cannot stand for: it keeps no peer.
func pairP2P(d *kEvent, calls []*kEvent) bool {
	if d.args().Collective != "" || kernelOp(d.name) != "SendRecv" {
		return true
	}
	if len(calls) != 1 {
		return len(calls) == 0
	}
	c := calls[0].args()
	if d.meta == nil {
		d.meta = &kinetoArgs{}
	}
	a := d.meta
	a.Collective, a.InNelems, a.OutNelems, a.GroupSize, a.DType = c.Collective, c.InNelems, c.OutNelems, c.GroupSize, c.DType
	a.GroupName, a.GroupRanks, a.SrcRank, a.DstRank, a.Seq = c.GroupName, c.GroupRanks, c.SrcRank, c.DstRank, c.Seq
	return true
}

// deviceRecord makes rec the record of GPU activity d, of p's trace.
func deviceRecord(rec *profiler.Record, d *kEvent, p *Profile, unknownDType map[string]bool) {
	rec.Name = d.name
	// A kernel CUPTI traced: busy time counts it as compute. Copies and
	// memsets are device ranges outside any phase.
	rec.Kind = profiler.KindDevice
	if d.kernel {
		rec.Kind = profiler.KindKernel
	}
	rec.HasDevice = true
	rec.DeviceStart, rec.DeviceEnd = time.Duration(d.start), time.Duration(d.end)
	rec.Device = runtime.Device{Type: runtime.CUDA, Index: int(d.device)}
	rec.Stream = uint64(d.stream)
	if c, ok := collectiveOf(d, rec.Rank, unknownDType); ok {
		rec.Collective = c
		rec.Kind = profiler.KindCollective
		if !p.RankKnown && d.args().GroupRanks != "" {
			// The rank's place in the group, taken as rank 0's until
			// AssignRanks gives the trace its rank.
			if p.groupRanks == nil {
				p.groupRanks = map[uint64]string{}
			}
			p.groupRanks[rec.ID] = string(d.args().GroupRanks)
		}
		if c.Op == ccl.OpSend || c.Op == ccl.OpRecv || c.Op == "SendRecv" {
			rec.Kind = profiler.KindP2P
		}
	}
}
