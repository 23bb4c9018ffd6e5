package importer

import (
	"strconv"
	"strings"
)

// kEvent is a duration event of a Kineto trace, as kinetoRecords needs
// it. A trace of a long run holds millions, all held until the last is
// read (a launch and what it launched may lie anywhere in the file), so it
// keeps no more than the records are made of: its names interned, the
// GPU activity's device and stream read out of its args, and the rest of
// its args only where it carries a collective's metadata.
type kEvent struct {
	name   string // interned
	thread string // "pid/tid", interned
	// start and end are ns on the file's clock (before
	// baseTimeNanoseconds); offset is the event's byte offset.
	start, end, offset int64
	corr               int64 // args.correlation, where corrSet
	// device and stream are a GPU activity's: args.device (else its pid
	// read as a number, else 0) and args.stream, neither below 0.
	device, stream int64
	// meta holds the args that describe a collective or a rank's place
	// in its group (kinetoArgs.hasMeta); nil where the event has none.
	meta    *kinetoArgs
	class   eventClass
	corrSet bool
	kernel  bool // a kernel (category "kernel"), not a copy or memset
	python  bool // a Python function (with_stack's python_function)
}

// noMeta is the metadata of an event that carries none: read, never
// written (pairP2P gives an event metadata of its own).
var noMeta kinetoArgs

// args is the event's collective metadata, zero where it has none.
func (e *kEvent) args() *kinetoArgs {
	if e.meta == nil {
		return &noMeta
	}
	return e.meta
}

// hasMeta reports whether a holds any of the args collectiveOf, pairP2P
// and rankFromCollectives read (correlation, device and stream are kept
// in the event itself; the allocator's totals are read while parsing).
func (a *kinetoArgs) hasMeta() bool {
	return a.Collective != "" || a.InNelems != nil || a.OutNelems != nil || a.GroupSize != nil || a.DType != "" ||
		a.GroupName != "" || a.GroupRanks != "" || a.GroupDesc != "" ||
		a.Rank != nil || a.SrcRank != nil || a.DstRank != nil || a.Seq != nil
}

// newKEvent makes the event of ev, of class class, from ts to end (ns).
func newKEvent(ev *kinetoEvent, class eventClass, thread string, names interner, start, end, off int64) kEvent {
	e := kEvent{class: class, name: names.string(ev.Name), thread: thread,
		start: start, end: end, offset: off,
		corr: ev.Args.Correlation.V, corrSet: ev.Args.Correlation.Set,
		// Any case, as classify reads it: the first Kineto traces say "Kernel".
		kernel: strings.EqualFold(ev.Cat, "kernel"),
		python: strings.HasPrefix(strings.ToLower(ev.Cat), "python_function")}
	if class == classDevice {
		if ev.Args.Device != nil {
			e.device = ev.Args.Device.V
		} else if v, err := strconv.ParseInt(string(ev.Pid), 10, 64); err == nil {
			e.device = v
		}
		e.device = max(e.device, 0)
		e.stream = max(ev.Args.Stream.V, 0)
	}
	if ev.Args.hasMeta() {
		meta := ev.Args
		e.meta = &meta
	}
	return e
}

// eventBlock is how many events an eventList block holds.
const eventBlock = 1 << 12

// eventList holds a trace's events in blocks of eventBlock: one slice
// grown by append copies every event each time it grows, and holds the
// old copy and up to a quarter of unused room meanwhile.
type eventList struct {
	blocks [][]kEvent
	n      int
}

func (l *eventList) len() int { return l.n }

// at is event i; the pointer stays valid as events are added.
func (l *eventList) at(i int) *kEvent { return &l.blocks[i/eventBlock][i%eventBlock] }

func (l *eventList) add(e kEvent) {
	if l.n%eventBlock == 0 {
		l.blocks = append(l.blocks, make([]kEvent, 0, eventBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = append(*b, e)
	l.n++
}

// interner hands out one copy of each string: a trace names the same
// kernels, operators and threads on every step, and the records share
// their names.
type interner map[string]string

// string is s's copy.
func (in interner) string(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}

// bytes is b as a string: the copy, where there is one, without
// allocating.
func (in interner) bytes(b []byte) string {
	if v, ok := in[string(b)]; ok {
		return v
	}
	s := string(b)
	in[s] = s
	return s
}
