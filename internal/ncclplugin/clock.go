package ncclplugin

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// hostClock places the plugin's CLOCK_MONOTONIC nanoseconds on a
// profiler's clock (durations since its Epoch). Go's monotonic clock
// reading, which time.Since uses, is CLOCK_MONOTONIC on Linux minus an
// offset fixed at process start, so one pair of readings taken together
// gives the mapping for the whole run: both clocks run at the same rate
// and neither jumps. The pair with the shortest gap of several is kept;
// its error is half that gap (well under a microsecond).
type hostClock struct {
	base time.Duration // time since Epoch at the sample
	mono int64         // CLOCK_MONOTONIC ns at the same moment
}

func monotonicNow() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return ts.Nano(), nil
}

func newHostClock(epoch time.Time) (hostClock, error) {
	var best hostClock
	gap := time.Duration(1<<63 - 1)
	for range 8 {
		a := time.Since(epoch)
		m, err := monotonicNow()
		if err != nil {
			return hostClock{}, err
		}
		b := time.Since(epoch)
		if b-a < gap {
			gap = b - a
			best = hostClock{base: a + (b-a)/2, mono: m}
		}
	}
	return best, nil
}

// at maps a CLOCK_MONOTONIC reading (ns) onto the profiler's clock.
func (c hostClock) at(monoNs int64) time.Duration {
	return c.base + time.Duration(monoNs-c.mono)
}

// bounds are bounds on a GPU's %globaltimer-to-CLOCK_MONOTONIC offset
// (ns): upper the least of the samples that bound it from above, lower
// the greatest of those that bound it from below, lowerOp the operation
// that gave lower.
type bounds struct {
	upper, lower       int64
	haveUpper, haveLow bool
	lowerOp            opRef
}

// opRef is what a clock conflict's description says of an operation.
type opRef struct {
	comm       uint64
	rank, peer int32
	fn, nch    uint8
}

func refOf(r Record) opRef {
	return opRef{comm: r.Comm, rank: r.Rank, peer: r.Peer, fn: r.Func, nch: r.NChannels}
}

func (b *bounds) addUpper(d int64) {
	if !b.haveUpper || d < b.upper {
		b.upper, b.haveUpper = d, true
	}
}

func (b *bounds) addLower(d int64, r opRef) {
	if !b.haveLow || d > b.lower {
		b.lower, b.haveLow, b.lowerOp = d, true, r
	}
}

func (b *bounds) merge(o bounds) {
	if o.haveUpper {
		b.addUpper(o.upper)
	}
	if o.haveLow {
		b.addLower(o.lower, o.lowerOp)
	}
}

// crossing is how far lower exceeds upper, 0 where it does not or one is
// missing.
func (b *bounds) crossing() int64 {
	if !b.haveUpper || !b.haveLow || b.lower <= b.upper {
		return 0
	}
	return b.lower - b.upper
}

// complete reports whether b has both bounds, crossed by no more than
// clockSlack: an estimate of its own.
func (b *bounds) complete() bool {
	return b.haveUpper && b.haveLow && b.crossing() <= int64(clockSlack)
}

// offset is the upper bound, or the lower where they cross: no device
// time then precedes its launch.
func (b *bounds) offset() (int64, bool) {
	switch {
	case b.crossing() > 0:
		return b.lower, true
	case b.haveUpper:
		return b.upper, true
	}
	return 0, false
}

// stepAfter is how many operations must agree on a GPU clock offset that
// contradicts the one in use before it replaces it: a step of the GPU's
// %globaltimer against CLOCK_MONOTONIC.
const stepAfter = 4

// offsetEstimate is the GPU-globaltimer-to-CLOCK_MONOTONIC offset of one
// GPU of a process (%globaltimer of two GPUs need not agree). Every proxy
// report bounds it from above (the proxy sees a channel start or stop
// after it happened: seen − gpu ≥ offset), and every operation bounds it
// from below (its kernel cannot start before the host began enqueueing
// it: hostStart − gpuStart ≤ offset). The estimate is the least upper
// bound seen so far; if a lower bound exceeds it the clocks are not what
// this assumes, and the lower bound is used so that no device time
// precedes its launch.
//
// %globaltimer can step (the driver sets it again). A sample that
// contradicts the bounds in use by more than clockSlack — an upper bound
// below their lower, a lower bound above their upper, or an operation
// whose every channel started, on them, well before its enqueue — starts
// a second estimate, next, of the samples from then on. Once stepAfter
// operations have agreed with it, it replaces the bounds in use (a step,
// counted); a sample it cannot hold first (its bounds cross) ends it, and
// its samples go into the bounds in use, but for the lower bounds of
// operations the bounds in use took for stale (their communicators are
// distrusted then, as any whose channels ran before their operation).
type offsetEstimate struct {
	device int32 // CUDA ordinal, -1 unknown
	cur    bounds
	// next gathers the samples since one contradicted cur (stepping);
	// soundLow those of its lower bounds that came from operations cur
	// did not take for stale; nextOps the operations next took.
	next     bounds
	soundLow bounds
	stepping bool
	nextOps  int
	// suspects are the communicators of the operations next took that cur
	// took for stale; distrust those of a next that ended without being
	// taken, for the process to distrust (takeDistrusted).
	suspects, distrust []commRank
	steps              int
	// conflict says cur's bounds crossed by more than clockSlack; note
	// describes the operation that made them.
	conflict bool
	note     string
}

func newOffsetEstimate(device int32) *offsetEstimate { return &offsetEstimate{device: device} }

func (o *offsetEstimate) start() {
	o.stepping, o.next, o.soundLow, o.nextOps = true, bounds{}, bounds{}, 0
	o.suspects = o.suspects[:0]
}

// drop ends next without taking it: its samples go into cur (its lower
// bounds only where cur took their operations for sound).
func (o *offsetEstimate) drop() {
	if o.next.haveUpper {
		o.cur.addUpper(o.next.upper)
	}
	o.cur.merge(o.soundLow)
	o.distrust = append(o.distrust, o.suspects...)
	o.stepping, o.next, o.soundLow, o.nextOps = false, bounds{}, bounds{}, 0
	o.suspects = o.suspects[:0]
	o.check()
}

// took counts an operation next took, and takes next once enough have.
func (o *offsetEstimate) took() {
	o.nextOps++
	if o.nextOps >= stepAfter && o.next.complete() {
		o.cur, o.steps = o.next, o.steps+1
		o.stepping, o.next, o.soundLow, o.nextOps = false, bounds{}, bounds{}, 0
		o.suspects = o.suspects[:0]
	}
}

// check notes a conflict of cur's bounds.
func (o *offsetEstimate) check() {
	if !o.conflict && o.cur.crossing() > int64(clockSlack) {
		o.conflict, o.note = true, o.describe(o.cur)
	}
}

func (o *offsetEstimate) describe(b bounds) string {
	r := Record{Comm: b.lowerOp.comm, Rank: b.lowerOp.rank, Peer: b.lowerOp.peer, Func: b.lowerOp.fn, NChannels: b.lowerOp.nch}
	dev := "unknown"
	if o.device >= 0 {
		dev = fmt.Sprint(o.device)
	}
	return fmt.Sprintf("rank %d's %s (peer or root %d, %d channels, communicator %016x) enqueued %v after its first kernel channel started (CUDA device %s)",
		r.Rank, r.Op(), r.Peer, r.NChannels, r.Comm, time.Duration(b.crossing()), dev)
}

// merged is cur and next together.
func (o *offsetEstimate) merged() bounds {
	m := o.cur
	m.merge(o.next)
	return m
}

// observe takes a proxy report: the GPU time gpu reported at CLOCK_MONOTONIC seen.
func (o *offsetEstimate) observe(seen, gpu uint64) {
	if seen == 0 || gpu == 0 {
		return
	}
	d := int64(seen) - int64(gpu)
	switch {
	case o.stepping:
		o.next.addUpper(d)
		if o.next.crossing() > int64(clockSlack) {
			o.drop()
		}
	case o.cur.haveLow && d < o.cur.lower-int64(clockSlack):
		o.start()
		o.next.addUpper(d)
	default:
		o.cur.addUpper(d)
	}
}

// observeAll takes the proxy reports of an operation's channels.
func (o *offsetEstimate) observeAll(chans map[uint8]Record) {
	for _, ch := range chans {
		o.observe(ch.SeenStart, ch.GPUStart)
		o.observe(ch.SeenStop, ch.GPUStop)
	}
}

// bound takes operation r, whose first kernel channel started at GPU
// time gpuStart: it cannot have started before r was enqueued. chans are
// its channels.
func (o *offsetEstimate) bound(r Record, gpuStart uint64, chans map[uint8]Record) {
	d, ref := int64(r.HostStart)-int64(gpuStart), refOf(r)
	if !o.stepping {
		if !o.cur.haveUpper || d <= o.cur.upper+int64(clockSlack) {
			o.cur.addLower(d, ref)
			o.check()
			return
		}
		o.start()
	}
	o.observeAll(chans)
	if !o.stepping {
		// Its channels ended next: cur takes it.
		o.cur.addLower(d, ref)
		o.check()
		return
	}
	o.next.addLower(d, ref)
	o.soundLow.addLower(d, ref)
	if o.next.crossing() > int64(clockSlack) {
		o.drop()
		return
	}
	o.took()
}

// early reports whether every channel of chans that has a start started,
// placed with cur, more than staleChannel before host, and whether some
// did.
func (o *offsetEstimate) early(chans map[uint8]Record, host uint64) (all, some bool) {
	if !o.cur.haveUpper {
		return false, false
	}
	all = true
	for _, ch := range chans {
		if ch.GPUStart == 0 {
			continue
		}
		if int64(ch.GPUStart)+o.cur.upper < int64(host)-int64(staleChannel) {
			some = true
		} else {
			all = false
		}
	}
	return all && some, some
}

// Verdicts on an operation whose every channel started, on cur, before
// it was enqueued (stepBack).
const (
	stepNo    = iota // stale timers: distrust its communicator
	stepNew          // the first such: host-only, its communicator not yet distrusted
	stepTaken        // it agrees with next: timed with next
)

// stepBack takes operation r, every channel of which (chans; the first
// started at GPU time gpuStart) started before its enqueue on cur: a
// step of the GPU's clock back against CLOCK_MONOTONIC, or timers that
// hold another kernel's times. It joins next, or starts it; a step moves
// every timer of the GPU alike, and next's bounds cross as soon as two
// operations read stale timers by different amounts.
func (o *offsetEstimate) stepBack(r Record, gpuStart uint64, chans map[uint8]Record) int {
	first := !o.stepping
	if first {
		o.start()
	}
	o.observeAll(chans)
	if !o.stepping {
		return stepNo
	}
	o.next.addLower(int64(r.HostStart)-int64(gpuStart), refOf(r))
	if o.next.crossing() > int64(clockSlack) {
		o.drop()
		return stepNo
	}
	if cr := (commRank{r.Comm, r.Rank}); len(o.suspects) < stepAfter && !slices.Contains(o.suspects, cr) {
		o.suspects = append(o.suspects, cr)
	}
	o.took()
	if first {
		return stepNew
	}
	return stepTaken
}

// takeDistrusted returns the communicators to distrust, once.
func (o *offsetEstimate) takeDistrusted() []commRank {
	d := o.distrust
	o.distrust = nil
	return d
}

// offset is the offset to time an operation with: cur's, or while next
// gathers, next's where it is an estimate of its own that cur and it
// together contradict, else theirs together.
func (o *offsetEstimate) offset() (int64, bool) {
	if !o.stepping {
		return o.cur.offset()
	}
	m := o.merged()
	if o.next.complete() && m.crossing() > int64(clockSlack) {
		return o.next.offset()
	}
	return m.offset()
}

// conflicted reports whether the bounds crossed by more than clockSlack,
// or do so now with next not yet taken, and describes the operation that
// made them.
func (o *offsetEstimate) conflicted() (bool, string) {
	if o.conflict {
		return true, o.note
	}
	if m := o.merged(); o.stepping && m.crossing() > int64(clockSlack) {
		return true, o.describe(m)
	}
	return false, ""
}
