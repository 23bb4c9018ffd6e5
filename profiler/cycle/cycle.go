package cycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Defaults of the search.
const (
	// Window is how many of each rank's latest collectives a Sink keeps
	// at most: a cycle of up to Window/MinRepeats operations can be
	// found (10,922: a pipeline stage's step under tensor parallelism,
	// its collectives per layer and microbatch).
	Window = 32768
	// Budget bounds the operations a Sink keeps over all ranks: with
	// more ranks than Budget/Window each keeps Budget/ranks, and
	// FloorWindow at least.
	Budget = 1 << 19
	// FloorWindow is how many operations each rank keeps however many
	// ranks share Budget (fewer where the Sink's window is smaller).
	FloorWindow = 4096
	// WorkPerOperation is how many device intervals (kernels, copies,
	// memsets, collectives: what busy time is made of) a rank keeps per
	// operation it keeps, for the time its GPU was busy in a cycle.
	WorkPerOperation = 2
	// MinRepeats is how many times a cycle must repeat, back to back.
	MinRepeats = 3
	// MaxSpread bounds the interquartile range of a cycle's durations,
	// as a share of their median: a step's time varies less than that.
	MaxSpread = 0.2
	// MinBoundary is how much longer than the typical gap between two
	// operations the gap that starts a cycle must be, in three cycles
	// of four at least, where the sequence alone does not say where a
	// cycle starts.
	MinBoundary = 3
	// samples bounds the durations whose quantiles are taken per
	// candidate length.
	samples = 1024
)

// op is one collective as the search needs it.
type op struct {
	sig   uint64
	start time.Duration // when the host issued it (Record.HostStart)
	bytes int64
	name  string
	// devStart, devEnd are its device interval (NCCL's kernel channels'
	// timers for a wrapped job's), on the record's clock; devEnd 0 where
	// it has none.
	devStart, devEnd time.Duration
	// line is where the operation is numbered (lineOf): its
	// communicator, and for a send or receive the pair of ranks; seq its
	// number there. line is 0 where the record names no group.
	line, seq uint64
}

// ring holds a rank's latest collectives, and its latest device work.
type ring struct {
	ops  latest[op]
	work latest[profiler.StreamWork]
	tr   tracker
}

// latest keeps the last items added, at most a window of them, and
// counts every one.
type latest[T any] struct {
	items []T
	next  int
	seen  uint64
}

func (l *latest[T]) add(x T, window int) {
	l.seen++
	if len(l.items) > window { // more ranks came: keep the latest window
		l.items = l.inserted()[len(l.items)-window:]
		l.next = 0
	}
	if len(l.items) < window {
		l.items = append(l.items, x)
		return
	}
	l.items[l.next] = x
	l.next = (l.next + 1) % window
}

// inserted returns a copy of the items in the order they came.
func (l *latest[T]) inserted() []T {
	out := make([]T, 0, len(l.items))
	out = append(out, l.items[l.next:]...)
	return append(out, l.items[:l.next]...)
}

// last returns a copy of the latest window items in the order they came.
func (l *latest[T]) last(window int) []T {
	out := l.inserted()
	return out[max(0, len(out)-window):]
}

// lastInto is last, into buf's memory where it is large enough.
func (l *latest[T]) lastInto(buf []T, window int) []T {
	buf = append(append(buf[:0], l.items[l.next:]...), l.items[:l.next]...)
	return buf[max(0, len(buf)-window):]
}

// Sink is a profiler.Sink that keeps each rank's latest collectives and
// point-to-point operations, at most a window of them per rank and Budget
// over all ranks, for Result. It is safe for concurrent use.
type Sink struct {
	mu     sync.Mutex
	window int
	ranks  map[int]*ring
	done   bool // Finish was called
	// scratch is the memory trackLocked reuses: a rank's kept
	// operations in order, and their rolling hashes.
	scratch []op
	hashes  []uint64
	// lines number each communicator's operations in cycles of the job
	// (Number), once a rank's cycle is found.
	lines map[uint64]numbering
}

// NewSink returns a Sink that keeps at most window operations per rank
// (Window where window is 0 or less), fewer with more than Budget/window
// ranks (FloorWindow at least).
func NewSink(window int) *Sink {
	if window <= 0 {
		window = Window
	}
	return &Sink{window: window, ranks: map[int]*ring{}, lines: map[uint64]numbering{}}
}

// perRank is how many operations each rank keeps with n ranks.
func (s *Sink) perRank(n int) int {
	if n*s.window <= Budget {
		return s.window
	}
	return max(Budget/n, min(s.window, FloorWindow))
}

// Consume keeps the batch's collectives and point-to-point operations,
// and the device intervals busy time counts (profiler.Record.Work).
func (s *Sink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		collective := r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P
		w, work := r.Work()
		work = work && w.End > w.Start
		if !collective && !work {
			continue
		}
		rg := s.ranks[r.Rank]
		if rg == nil {
			rg = &ring{}
			s.ranks[r.Rank] = rg
		}
		per := s.perRank(len(s.ranks))
		if work {
			rg.work.add(w, WorkPerOperation*per)
		}
		if !collective {
			continue
		}
		c := &r.Collective
		name := c.Op
		if name == "" {
			name = r.Name
		}
		g := groupHash(c)
		h := hashString(g, name)
		line := uint64(0)
		switch {
		case c.Group == "":
		case c.Peer >= 0:
			line = pairLine(g, c)
		default:
			line = max(h, 1) // lineOf: the communicator and the operation
		}
		h = hashUint(h, uint64(c.Bytes))
		h = hashUint(h, uint64(uint32(c.Peer))<<32|uint64(uint32(c.Root)))
		o := op{sig: h, start: r.HostStart, bytes: c.Bytes, name: name, line: line, seq: c.Seq}
		if r.HasDevice && r.DeviceEnd > r.DeviceStart {
			o.devStart, o.devEnd = r.DeviceStart, r.DeviceEnd
		}
		rg.ops.add(o, per)
		// Every half window, so that none leaves it uncounted, and, until
		// the cycle is found, every TrackLag of the rank's time, so that
		// it is found and numbered (Number) soon after it shows — with
		// new operations a sixteenth of those kept at least, so that the
		// search costs a few copies an operation however fast their
		// times advance.
		fresh := rg.ops.seen - rg.tr.checked
		if fresh >= uint64(max(per/2, 1)) || rg.tr.pattern == nil && o.start-rg.tr.trackedAt >= TrackLag &&
			fresh >= uint64(max(trackMin, len(rg.ops.items)/16)) {
			s.trackLocked(rg, per)
		}
	}
}

// trackLocked counts rg's cycles (Run) in its kept operations: every
// half window of operations, so none leaves the window uncounted.
func (s *Sink) trackLocked(rg *ring, per int) {
	ops := rg.ops.lastInto(s.scratch, per)
	s.scratch = ops[:0]
	if byStart := func(a, b op) int { return cmp.Compare(a.start, b.start) }; !slices.IsSortedFunc(ops, byStart) {
		slices.SortStableFunc(ops, byStart)
	}
	rg.tr.checked = rg.ops.seen
	if len(ops) == 0 {
		return
	}
	upTo := ops[len(ops)-1].start
	rg.tr.trackedAt = upTo
	if !s.done {
		upTo -= TrackLag
	}
	found := rg.tr.found
	s.hashes = rg.tr.track(ops, upTo, per, rg.ops.seen > uint64(len(ops)), s.hashes)
	if rg.tr.found != found {
		s.numberLocked(rg.tr.instance, len(rg.tr.pattern))
	}
}

// Finish says that no more operations will come: Result then counts every
// cycle kept (Run), not only those TrackLag behind the latest operation.
func (s *Sink) Finish() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// FNV-1a over a record's signature, without allocating.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return (h ^ 0xff) * fnvPrime // a separator: ("ab", "c") ≠ ("a", "bc")
}

func hashUint(h, v uint64) uint64 {
	for range 8 {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}

// OpCount is how many operations of one kind a cycle holds, and their
// bytes.
type OpCount struct {
	Op    string
	Count int
	Bytes int64
}

// Rank is what Result found of one rank.
type Rank struct {
	Rank int
	// Seen counts the rank's collectives and point-to-point operations,
	// Kept those the search looked at (the latest, up to the window).
	Seen uint64
	Kept int
	// Found reports a cycle; otherwise Why says why there is none.
	Found bool
	Why   string
	// Length is the cycle's number of operations, Period the shortest
	// repeating sequence within it (Length is a multiple of Period).
	Length, Period int
	// Ops is what one cycle holds, by operation in the order of first
	// appearance; Bytes their sum.
	Ops   []OpCount
	Bytes int64
	// Cycles is how many whole cycles the repeating stretch measured
	// holds, and Stretch its operations (of Kept).
	Cycles, Stretch int
	// The cycle's duration, from any operation to the one Length later:
	// quartiles, median and 90th percentile.
	P25, Median, P75, P90 time.Duration
	// Device is the time within a cycle some of its operations ran on the
	// device (the union of their device intervals), the median over the
	// cycles whose every operation has one; DeviceKnown is false where
	// none does.
	Device      time.Duration
	DeviceKnown bool
	// Busy is the time within a cycle the rank's GPU was busy — its
	// kernels' device time less the transfers on their streams, united
	// across streams (profiler.BusyDefinition) — the median over the
	// cycles whose device times its kept work covers; BusyKnown is false
	// where no kernel was traced or no cycle is covered.
	Busy      time.Duration
	BusyKnown bool
	// Run is every cycle of the run counted one by one, where the search
	// has found one (Sink counts them as operations arrive).
	Run Run
	// first is the index, in the operations searched, of the first
	// operation of the stretch's first whole cycle (the one after its
	// longest pause).
	first int
}

// Result searches every rank's kept operations for its cycle. It copies
// them under the Sink's lock and searches without it, so a Consume (the
// profiler's collector) never waits for a search.
func (s *Sink) Result() Result {
	type kept struct {
		rank    int
		seen    uint64
		ops     []op
		work    []profiler.StreamWork
		partial bool // work before the oldest kept was dropped
		run     Run
	}
	s.mu.Lock()
	all := make([]kept, 0, len(s.ranks))
	w := s.perRank(len(s.ranks))
	for rank, rg := range s.ranks {
		if rg.ops.seen == 0 { // device work, no collective
			continue
		}
		if rg.ops.seen != rg.tr.checked || s.done && !rg.tr.done {
			s.trackLocked(rg, w)
			rg.tr.done = s.done
		}
		work := rg.work.last(WorkPerOperation * w)
		all = append(all, kept{rank, rg.ops.seen, rg.ops.last(w), work, rg.work.seen > uint64(len(work)), rg.tr.result(rank)})
	}
	s.mu.Unlock()
	var res Result
	for _, k := range all {
		// Oldest first by issue time: the threads of a process hand
		// over their records in batches of their own.
		slices.SortStableFunc(k.ops, func(a, b op) int { return cmp.Compare(a.start, b.start) })
		r := find(k.ops, k.work, k.partial)
		r.Rank, r.Seen, r.Run = k.rank, k.seen, k.run
		res.Ranks = append(res.Ranks, r)
	}
	slices.SortFunc(res.Ranks, func(a, b Rank) int { return cmp.Compare(a.Rank, b.Rank) })
	return res
}

// find searches one rank's operations, oldest first; work is its device
// work kept, partial whether older work was dropped.
func find(ops []op, work []profiler.StreamWork, partial bool) Rank {
	r := Rank{Kept: len(ops)}
	n := len(ops)
	if n < 2*MinRepeats {
		r.Why = fmt.Sprintf("%d operations, too few to repeat %d times", n, MinRepeats)
		return r
	}
	from, m, p := longestRepeat(ops)
	if m == 0 {
		r.Why = fmt.Sprintf("the latest %d operations hold no sequence repeated %d times back to back", n, MinRepeats)
		return r
	}
	stretch := ops[from : from+m]
	gaps := make([]time.Duration, m-1)
	for i := range gaps {
		gaps[i] = stretch[i+1].start - stretch[i].start
	}
	typical := median(slices.Clone(gaps))
	for _, c := range candidates(gaps, p, m, typical) {
		// A sequence of two or more kinds of operation that repeats whole
		// is the cycle; a multiple of it, or of a sequence of one kind,
		// needs a gap of its own at the same place in every cycle (the
		// optimizer's step, the next batch) to tell it from a part.
		paused := c > p || p == 1
		b, phase := boundary(gaps, c)
		if paused && (b <= 0 || b < MinBoundary*typical) {
			continue
		}
		q, ok := steadyCycle(stretch, c, paused)
		if !ok {
			continue
		}
		r.Found, r.Length, r.Period, r.Cycles, r.Stretch = true, c, p, m/c, m
		// A cycle starts after its longest pause.
		r.first = from + (phase+1)%c
		r.P25, r.Median, r.P75, r.P90 = q[0], q[1], q[2], q[3]
		r.Ops, r.Bytes = composition(stretch[m-c:])
		r.Device, r.DeviceKnown = deviceTime(stretch, c)
		r.Busy, r.BusyKnown = busyTime(stretch, c, work, partial)
		return r
	}
	r.Period = p
	r.Why = fmt.Sprintf("%d of the latest operations repeat every %d, but no multiple of %d up to %d both takes a steady time (interquartile range within %.0f%% of the median) and starts after a gap of its own",
		m, p, p, m/MinRepeats, 100*MaxSpread)
	return r
}

// deviceTime returns the median over the whole cycles of c operations in
// stretch, of those whose every operation has a device interval, of the
// union of their intervals; false where no cycle has them all.
func deviceTime(stretch []op, c int) (time.Duration, bool) {
	var per []time.Duration
	iv := make([]op, 0, c)
	for k := 0; (k+1)*c <= len(stretch); k++ {
		iv = append(iv[:0], stretch[k*c:(k+1)*c]...)
		if slices.ContainsFunc(iv, func(o op) bool { return o.devEnd == 0 }) {
			continue
		}
		slices.SortFunc(iv, func(a, b op) int { return cmp.Compare(a.devStart, b.devStart) })
		var busy time.Duration
		from, to := iv[0].devStart, iv[0].devEnd
		for _, o := range iv[1:] {
			if o.devStart > to {
				busy += to - from
				from, to = o.devStart, o.devEnd
				continue
			}
			to = max(to, o.devEnd)
		}
		per = append(per, busy+to-from)
	}
	if len(per) == 0 {
		return 0, false
	}
	return median(per), true
}

// busyTime returns the median over the cycles of c operations in stretch
// of the time the rank's GPU was busy in each (profiler.BusyIntervals of
// work: its kernels' device time less the transfers on their streams,
// united across streams); false where work holds no computation or no
// cycle is covered. A cycle on the device runs from the device start of
// its first operation to that of the first of the next: both must have
// device times, within the computation kept (after its oldest where
// older work was dropped, partial; before the end of its latest, since
// kernels arrive later than operations while a job runs).
func busyTime(stretch []op, c int, work []profiler.StreamWork, partial bool) (time.Duration, bool) {
	first, last, computed := time.Duration(0), time.Duration(0), false
	for _, w := range work {
		if w.Activity != profiler.ActivityCompute {
			continue
		}
		if !computed {
			first, last, computed = w.Start, w.End, true
		}
		first, last = min(first, w.Start), max(last, w.End)
	}
	if !computed {
		return 0, false
	}
	busy := profiler.BusyIntervals(nil, work)
	var per []time.Duration
	for k := 0; (k+1)*c < len(stretch); k++ {
		a, b := stretch[k*c], stretch[(k+1)*c]
		if a.devEnd == 0 || b.devEnd == 0 || b.devStart <= a.devStart || partial && a.devStart < first || b.devStart > last {
			continue
		}
		per = append(per, within(busy, a.devStart, b.devStart))
	}
	if len(per) == 0 {
		return 0, false
	}
	return median(per), true
}

// within returns how much of the sorted, disjoint intervals lies in
// [lo, hi).
func within(ivs []profiler.Interval, lo, hi time.Duration) time.Duration {
	i, _ := slices.BinarySearchFunc(ivs, lo, func(iv profiler.Interval, t time.Duration) int { return cmp.Compare(iv.End, t) })
	var sum time.Duration
	for ; i < len(ivs) && ivs[i].Start < hi; i++ {
		sum += max(0, min(ivs[i].End, hi)-max(ivs[i].Start, lo))
	}
	return sum
}

// boundary returns the largest, over the places in a cycle of c
// operations, of the lower quartile of the gaps before that place in
// every cycle: large where every cycle pauses at the same place; and that
// place, the index in gaps of its first gap (the first of the operations
// after that pause is at phase+1).
func boundary(gaps []time.Duration, c int) (best time.Duration, at int) {
	vals := make([]time.Duration, 0, len(gaps)/c+1)
	for phase := range min(c, len(gaps)) {
		vals = vals[:0]
		for i := phase; i < len(gaps); i += c {
			vals = append(vals, gaps[i])
		}
		slices.Sort(vals)
		if q := vals[(len(vals)-1)/4]; q > best {
			best, at = q, phase
		}
	}
	return best, at
}

// median sorts d and returns its middle value.
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// longestRepeat returns the longest stretch of ops made of MinRepeats or
// more back-to-back repetitions of one sequence: its start, its length m
// and the sequence's length p (the shortest among stretches of that
// length; the first of them); m is 0 where there is none. For each
// length q it follows the runs of operations equal to the one q later: a
// run of r such operations is a stretch of r + q with period q.
// Operations after the stretch (a last evaluation, a barrier before the
// end) do not hide it.
//
// Only a run of need operations or more could be kept (MinRepeats-1
// periods, and longer than the best so far), and every such run holds
// one of the operations need apart from the end of the last run looked
// at: only those are compared, and a run is followed both ways from one
// that matches. Within the best stretch so far, a multiple of its period
// is known to match throughout and is not compared again. Near-linear for
// a training loop's operations (a long stretch is found early and makes
// need long), where comparing every operation for every q would take
// n²/MinRepeats.
func longestRepeat(ops []op) (start, m, p int) {
	n := len(ops)
	same := func(i, q int) bool { return ops[i].sig == ops[i+q].sig }
	for q := 1; q*MinRepeats <= n && m < n; q++ {
		need := max((MinRepeats-1)*q, m-q+1)
		for i := need - 1; i+q < n; {
			if !same(i, q) {
				i += need
				continue
			}
			lo, hi := i, i+1
			if m > 0 && q%p == 0 && i >= start && i < start+m-q {
				lo, hi = start, start+m-q // the best stretch repeats every q
			}
			for lo > 0 && same(lo-1, q) {
				lo--
			}
			for hi+q < n && same(hi, q) {
				hi++
			}
			if run := hi - lo; run >= (MinRepeats-1)*q && run+q > m {
				start, m, p = lo, run+q, q
				need = max((MinRepeats-1)*q, m-q+1)
			}
			i = hi + need
		}
	}
	return start, m, p
}

// candidates returns, in increasing order, the multiples c of p up to
// m/MinRepeats that may be a stretch's cycle: p itself where the
// sequence has two kinds of operation or more (p > 1), and those at which
// a gap of MinBoundary times the typical one recurs — boundary can pass
// only where two such gaps lie c apart (with three or more gaps at a
// place in the cycle, three in four of them that long leave two
// consecutive ones). gaps are the stretch's m-1 gaps between operations.
func candidates(gaps []time.Duration, p, m int, typical time.Duration) []int {
	var out []int
	if p > 1 {
		out = append(out, p)
	}
	words := (len(gaps) + 63) / 64
	long := make([]uint64, words)
	for i, g := range gaps {
		if g > 0 && g >= MinBoundary*typical {
			long[i/64] |= 1 << (i % 64)
		}
	}
	for c := p; c*MinRepeats <= m; c += p {
		if c == p && p > 1 {
			continue
		}
		if pairApart(long, c) {
			out = append(out, c)
		}
	}
	return out
}

// pairApart reports whether the bit set holds two bits c apart.
func pairApart(bits []uint64, c int) bool {
	w, s := c/64, uint(c%64)
	for i := 0; i+w < len(bits); i++ {
		// The bits c above bits[i]'s: words i+w and i+w+1, shifted.
		hi := bits[i+w] >> s
		if s > 0 && i+w+1 < len(bits) {
			hi |= bits[i+w+1] << (64 - s)
		}
		if bits[i]&hi != 0 {
			return true
		}
	}
	return false
}

// NoiseRatio bounds how much more a cycle's times may vary (relative to
// their median) than the times of two cycles together, where its cycles
// start after a pause of their own but vary more than MaxSpread: the sum
// of two independent times varies 1/√2 as much, relative to it, as each
// does (√2 ≈ 1.41, and some leeway for the few cycles a window holds);
// the half of a step whose halves take different times varies far more
// than the step.
const NoiseRatio = 1.6

// steadyCycle is steady, and where paused (the cycle starts after a pause
// of its own) and the times vary more than MaxSpread but less than twice
// that, whether they vary no more than NoiseRatio times as much as those
// of twice as many operations: a noisy step is the step, not two of
// them.
func steadyCycle(stretch []op, c int, paused bool) ([4]time.Duration, bool) {
	q, ok := steady(stretch, c)
	if ok || !paused || 2*c >= len(stretch) {
		return q, ok
	}
	if q[1] <= 0 {
		return q, false
	}
	spread := float64(q[2]-q[0]) / float64(q[1])
	if spread > 2*MaxSpread {
		return q, false
	}
	q2, _ := steady(stretch, 2*c)
	return q, q2[1] > 0 && spread <= NoiseRatio*float64(q2[2]-q2[0])/float64(q2[1])
}

// steady returns the quartiles and 90th percentile of the times from each
// operation of stretch to the one c later, and whether they vary within
// MaxSpread of their median.
func steady(stretch []op, c int) ([4]time.Duration, bool) {
	var q [4]time.Duration
	k := len(stretch) - c
	step := 1
	if k > samples {
		step = (k + samples - 1) / samples
	}
	d := make([]time.Duration, 0, min(k, samples))
	for i := 0; i < k; i += step {
		d = append(d, stretch[i+c].start-stretch[i].start)
	}
	slices.Sort(d)
	at := func(f float64) time.Duration { return d[int(f*float64(len(d)-1)+0.5)] }
	q = [4]time.Duration{at(0.25), at(0.5), at(0.75), at(0.9)}
	if q[1] <= 0 {
		return q, false
	}
	return q, float64(q[2]-q[0]) <= MaxSpread*float64(q[1])
}

// composition counts the operations of one cycle by kind.
func composition(cyc []op) ([]OpCount, int64) {
	var out []OpCount
	var total int64
	for _, o := range cyc {
		total += o.bytes
		i := slices.IndexFunc(out, func(c OpCount) bool { return c.Op == o.name })
		if i < 0 {
			out = append(out, OpCount{Op: o.name})
			i = len(out) - 1
		}
		out[i].Count++
		out[i].Bytes += o.bytes
	}
	return out, total
}

// Result is what the search found, per rank.
type Result struct {
	Ranks []Rank
}

// Job is the step the ranks agree on: the median of the cycles' median
// times over the largest set of ranks that take, within SameStep, the
// time of one of them. Their cycles may hold different numbers
// of operations (a pipeline's middle stages send and receive both ways,
// its first and last one way each); Length is the most common (the
// shortest among equals). ok is false where no rank has a cycle.
func (r Result) Job() (j Job, ok bool) {
	j.Ranks = len(r.Ranks)
	var found []Rank
	for _, rk := range r.Ranks {
		if rk.Found {
			found = append(found, rk)
		}
	}
	if len(found) == 0 {
		return j, false
	}
	// The time most ranks' cycles take: the rank with the most others
	// within SameStep of its own (the lowest rank among equals), and
	// those others.
	near := func(a, b time.Duration) bool {
		d := a - b
		return float64(max(d, -d)) <= SameStep*float64(b)
	}
	best, most := 0, 0
	for i, rk := range found {
		n := 0
		for _, o := range found {
			if near(o.Median, rk.Median) {
				n++
			}
		}
		if n > most {
			best, most = i, n
		}
	}
	count := map[int]int{}
	for _, rk := range found {
		if near(rk.Median, found[best].Median) {
			j.agree = append(j.agree, rk)
			count[rk.Length]++
		}
	}
	j.Agreeing = len(j.agree)
	j.MinLength, j.MaxLength = j.agree[0].Length, j.agree[0].Length
	for length, n := range count {
		if n > count[j.Length] || n == count[j.Length] && length < j.Length {
			j.Length = length
		}
		j.MinLength, j.MaxLength = min(j.MinLength, length), max(j.MaxLength, length)
	}
	first := j.agree[slices.IndexFunc(j.agree, func(rk Rank) bool { return rk.Length == j.Length })]
	j.Rank, j.Ops, j.Bytes, j.Cycles = first.Rank, first.Ops, first.Bytes, first.Cycles
	var dev, busy []time.Duration
	for _, rk := range j.agree {
		if rk.BusyKnown {
			busy = append(busy, rk.Busy)
		}
		j.P90 = max(j.P90, rk.P90)
		j.Cycles = min(j.Cycles, rk.Cycles)
		if rk.Stretch*2 < rk.Kept {
			j.Interrupted = true
		}
		if rk.DeviceKnown {
			dev = append(dev, rk.Device)
		}
	}
	j.Median = medianOf(j.agree)
	if len(dev) > 0 {
		j.Device, j.DeviceKnown = median(dev), true
	}
	if len(busy) > 0 {
		j.Busy, j.BusyKnown = median(busy), true
	}
	return j, true
}

// SameStep is how far from another rank's cycle time a rank's may be
// and still count as the same step.
const SameStep = 0.1

// medianOf is the median of the ranks' median cycle times.
func medianOf(rs []Rank) time.Duration {
	med := make([]time.Duration, 0, len(rs))
	for _, rk := range rs {
		med = append(med, rk.Median)
	}
	slices.Sort(med)
	if n := len(med); n%2 == 0 {
		return (med[n/2-1] + med[n/2]) / 2
	}
	return med[len(med)/2]
}

// Job is the step most ranks' cycles show.
type Job struct {
	// Ranks counts the ranks with operations, Agreeing those whose cycle
	// takes the step's time.
	Ranks, Agreeing int
	// Length is the most common number of operations in an agreeing
	// rank's cycle; MinLength and MaxLength the range over them.
	Length, MinLength, MaxLength int
	// Ops and Bytes are one cycle's of Rank, the lowest agreeing rank of
	// Length.
	Rank  int
	Ops   []OpCount
	Bytes int64
	// Cycles is the fewest whole cycles an agreeing rank's stretch held.
	Cycles int
	// Median is the median over the agreeing ranks of their median cycle
	// time; P90 the largest of their 90th percentiles.
	Median, P90 time.Duration
	// Device is the median over the agreeing ranks that have it of the
	// time within a cycle their operations ran on the device
	// (Rank.Device); DeviceKnown is false where none has it.
	Device      time.Duration
	DeviceKnown bool
	// Busy is the median over the agreeing ranks that have it of the time
	// within a cycle their GPU was busy (Rank.Busy); BusyKnown is false
	// where none has it.
	Busy      time.Duration
	BusyKnown bool
	// Interrupted reports that on some agreeing rank the cycle repeats
	// through less than half the operations kept: other operations come
	// between its runs, and the cycle may be a part of the step that
	// repeats within it (a microbatch's, under gradient accumulation,
	// between the step's own collectives). Note says so in words.
	Interrupted bool
	agree       []Rank
}

// Note says, for an Interrupted job, why the cycle may be a part of the
// step; "" otherwise.
func (j Job) Note() string {
	if !j.Interrupted {
		return ""
	}
	return "its repetitions fill less than half the operations kept, others between them"
}

// Text says in one line what the ranks' collectives repeat, or why no
// cycle was found; "" where no rank issued any.
func (r Result) Text() string {
	if len(r.Ranks) == 0 {
		return ""
	}
	j, ok := r.Job()
	if !ok {
		rk := r.Ranks[0]
		return fmt.Sprintf("cycle: no repeating cycle of collectives found (rank %d: %s)", rk.Rank, rk.Why)
	}
	who := fmt.Sprintf("every rank (%d) repeats", j.Ranks)
	switch {
	case j.Ranks == 1:
		who = fmt.Sprintf("rank %d repeats", j.agree[0].Rank)
	case j.Agreeing < j.Ranks:
		who = fmt.Sprintf("%d of %d ranks repeat", j.Agreeing, j.Ranks)
	}
	parts := make([]string, 0, len(j.Ops))
	for _, o := range j.Ops {
		parts = append(parts, fmt.Sprintf("%s ×%d", o.Op, o.Count))
	}
	what := fmt.Sprintf("a cycle of %d collectives (%s, %s)", j.Length, strings.Join(parts, ", "), bytesText(j.Bytes))
	if j.MinLength != j.MaxLength {
		what = fmt.Sprintf("cycles of %d to %d collectives (rank %d's %d: %s, %s)", j.MinLength, j.MaxLength, j.Rank, j.Length, strings.Join(parts, ", "), bytesText(j.Bytes))
	}
	dev := ""
	if j.DeviceKnown {
		dev = fmt.Sprintf("; the collectives on the device %s of it", durationText(j.Device))
	}
	if j.BusyKnown {
		dev += fmt.Sprintf("; the GPU busy %s of it", durationText(j.Busy))
	}
	line := fmt.Sprintf("cycle: %s %s every %s (median over %d or more cycles a rank; p90 %s%s): ",
		who, what, durationText(j.Median), j.Cycles, durationText(j.P90), dev)
	if n := j.Note(); n != "" {
		return line + "the step, or a part of it that repeats within it (a microbatch's, under gradient accumulation): " + n
	}
	return line + "the step, most likely"
}

func bytesText(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func durationText(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
