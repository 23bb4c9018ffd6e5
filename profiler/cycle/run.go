package cycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/trainscope/trainscope/internal/quantile"
)

// Counting cycles over the whole run.
const (
	// QuantileAccuracy is the relative accuracy of Run's quantiles.
	QuantileAccuracy = 0.01
	// LongestKept is how many of a rank's longest cycles Run keeps.
	LongestKept = 5
	// TrackLag is how far behind a rank's latest operation its cycles
	// are counted while the run goes on: a process's threads hand over
	// their records in batches of their own, and a cycle is timed once
	// every operation in it has surely arrived. Finish counts the rest.
	TrackLag = time.Second
	// trackMin is the fewest new operations counted at once: a rank
	// whose operations come slowly is counted every TrackLag of its
	// time, but not for every operation.
	trackMin = 16
	// sketchBins bounds a rank's quantile sketch (16 KiB): at 1 % it
	// spans a ratio of about 10^17 between the shortest and longest
	// cycle, so the bound costs no accuracy.
	sketchBins = 2048
	// rollBase is the rolling hash's multiplier (odd).
	rollBase uint64 = 0x100000001b3
)

// Run is one rank's cycles over the whole run, counted one by one as its
// operations arrive, however long the run: each from the first operation
// of a cycle (the one after its longest pause) to the first of the next,
// where the next follows straight on with the same operations. The kept
// window (Window operations) only finds the cycle; Run covers every
// operation from the first cycle found on, in bounded memory.
type Run struct {
	// Cycles counts the cycles timed; From is when the first began and
	// To when the last ended (Record.HostStart's clock: time into the
	// run).
	Cycles   int
	From, To time.Duration
	// Min and Max are exact; P50, P90 and P99 are nearest-rank quantiles
	// within QuantileAccuracy; Sum is their total.
	Min, P50, P90, P99, Max, Sum time.Duration
	// Longest are the rank's longest cycles, longest first (LongestKept
	// at most).
	Longest []Cycle
	// Breaks counts the places where the sequence did not go on into
	// another cycle: other operations between two cycles (an evaluation,
	// a checkpoint's), or a sequence that changed. Missed counts the
	// times operations left the window before their cycles were counted
	// (more than half a window arrived between two counts).
	Breaks, Missed int
}

// Cycle is one cycle of a rank's run.
type Cycle struct {
	Rank            int
	Start, Duration time.Duration
}

// tracker counts a rank's cycles over the run.
type tracker struct {
	pattern []uint64 // one cycle's signatures, from its first operation
	hash    uint64   // rolling hash of pattern
	pow     uint64   // rollBase^len(pattern)
	// resume (and skip: mark) is the first operation not yet looked at
	// as a cycle's first (started: set at the first look); synced says
	// a cycle matching pattern starts there, the next to be timed.
	resume          time.Duration
	skip            int
	started, synced bool
	// lost (and lostSkip) is the first operation looked at since the
	// last cycle matched, and lostOps how many were looked at (0: none).
	lost     time.Duration
	lostSkip int
	lostOps  int
	checked  uint64 // ops.seen when last counted
	// trackedAt is the latest operation's start when last counted.
	trackedAt time.Duration
	// crowded says more than half the window had arrived within
	// TrackLag of the latest operation at the last count.
	crowded bool
	done    bool // Finish: count to the latest operation
	// provisional says the pattern is the first found and every
	// operation since the first is still kept: each count searches
	// them all again, and where the search now finds another cycle
	// (more cycles show it steadier), counts the run anew with it.
	provisional bool
	searched    int // how many operations were kept at the latest search
	// found counts the patterns set, and instance is the latest one's
	// operations as they came, and the next cycle's after them, as far as
	// they were kept (for Sink.numberLocked).
	found    int
	instance []op
	run      Run
	sketch   *ddsketch.DDSketch
}

// setPattern makes cyc the cycle counted; next is the cycle after it (as
// far as it was kept), for numbering.
func (t *tracker) setPattern(cyc, next []op) {
	t.found++
	t.instance = slices.Clone(cyc)
	t.instance = append(t.instance, next...)
	t.pattern = make([]uint64, len(cyc))
	t.hash, t.pow = 0, 1
	for i, o := range cyc {
		t.pattern[i] = o.sig
		t.hash = t.hash*rollBase + o.sig
		t.pow *= rollBase
	}
	t.synced = false
}

// track counts the cycles in ops (a rank's kept operations, oldest
// first, at most window of them) that it has not counted before, up to
// those that started at upTo; dropped says older ones were not kept.
// Without a pattern it first searches, from where it left off, for the
// cycle. It returns the memory of the rolling hashes, for the next call
// to reuse (hs).
func (t *tracker) track(ops []op, upTo time.Duration, window int, dropped bool, hs []uint64) []uint64 {
	if len(ops) == 0 {
		return hs
	}
	t.provisional = t.provisional && !dropped
	switch {
	case !t.started:
		if dropped { // operations left the window before the first look
			t.run.Missed++
		}
		t.started = true
		t.resume, t.skip = mark(ops, 0)
	case ops[0].start > t.resume:
		// Operations not yet looked at left the window: cycles were
		// missed where the cycle was known, or where more than half the
		// window arrived within TrackLag (none could have been
		// counted).
		if t.pattern != nil || t.crowded {
			t.run.Missed++
		}
		t.synced, t.lostOps = false, 0
		t.resume, t.skip = mark(ops, 0)
	}
	all, final := len(ops), ops[len(ops)-1].start
	ops = ops[:sortSearch(len(ops), func(i int) bool { return ops[i].start > upTo })]
	t.crowded = all-len(ops) > window/2
	if t.provisional && len(ops) > 0 && (all-t.searched >= max(trackMin, t.searched/4) || upTo >= final) {
		// Every operation since the first is kept (the first search
		// began at the first): a search of them all has seen more
		// cycles than the first. Searched again once a quarter more
		// have come (a few searches of the window over its filling) and
		// at the end; where it finds another cycle, the run is counted
		// anew with it.
		t.searched = all
		if r := find(ops, nil, false); r.Found && !t.isPattern(ops[r.first:r.first+r.Length]) {
			a := r.first
			t.run, t.sketch = Run{}, nil
			t.synced, t.lostOps = false, 0
			t.setPattern(ops[a:a+r.Length], ops[a+r.Length:min(a+2*r.Length, len(ops))])
			return t.count(ops, 0, window, hs)
		}
	}
	i := at(ops, t.resume, t.skip)
	if i == len(ops) {
		return hs
	}
	if t.pattern == nil {
		r := find(ops[i:], nil, false)
		if !r.Found {
			return hs
		}
		a := i + r.first
		t.setPattern(ops[a:a+r.Length], ops[a+r.Length:min(a+2*r.Length, len(ops))])
		t.provisional, t.searched = !dropped && t.found == 1, all
	}
	return t.count(ops, i, window, hs)
}

// isPattern says whether cyc's signatures are the pattern's.
func (t *tracker) isPattern(cyc []op) bool {
	if len(cyc) != len(t.pattern) {
		return false
	}
	for i, o := range cyc {
		if o.sig != t.pattern[i] {
			return false
		}
	}
	return true
}

// mark is where ops[k] stands, for at: its start and how many operations
// before it started at the same time (they keep their order in every
// window: the window is sorted stably, oldest first).
func mark(ops []op, k int) (time.Duration, int) {
	skip := 0
	for j := k - 1; j >= 0 && ops[j].start == ops[k].start; j-- {
		skip++
	}
	return ops[k].start, skip
}

// at is the index in ops of the operation mark gave start and skip for.
func at(ops []op, start time.Duration, skip int) int {
	i := sortSearch(len(ops), func(k int) bool { return ops[k].start >= start })
	for ; skip > 0 && i < len(ops) && ops[i].start == start; skip-- {
		i++
	}
	return i
}

// count counts the cycles of the pattern in ops from ops[i] on.
func (t *tracker) count(ops []op, i, window int, hs []uint64) []uint64 {
	n, c := len(ops), len(t.pattern)
	if i+c > n {
		return hs
	}
	// hs[k-i] is the rolling hash of the c signatures from ops[k].
	hs = slices.Grow(hs[:0], n-c-i+1)[:n-c-i+1]
	var h uint64
	for j := i; j < i+c; j++ {
		h = h*rollBase + ops[j].sig
	}
	hs[0] = h
	for k := i + 1; k+c <= n; k++ {
		h = h*rollBase - ops[k-1].sig*t.pow + ops[k+c-1].sig
		hs[k-i] = h
	}
	match := func(k int) bool {
		if hs[k-i] != t.hash {
			return false
		}
		for j, s := range t.pattern {
			if ops[k+j].sig != s {
				return false
			}
		}
		return true
	}
	k := i
	if t.synced && !match(k) {
		t.synced = false
	}
	for {
		if !t.synced {
			from := k
			for k+c <= n && !match(k) {
				k++
			}
			if k+c > n {
				lostAt := -1 // where the operations without a cycle began, in ops
				if t.lostOps == 0 {
					lostAt = from
					t.lost, t.lostSkip = mark(ops, from)
				}
				t.lostOps += k - from
				// After (MinRepeats+1) cycles' worth of operations
				// without one (half a window at most, so that they are
				// still kept), the job's sequence has changed: search
				// for its new cycle from the first of them.
				if t.lostOps >= min((MinRepeats+1)*c, max(window/2, 1)) {
					if lostAt < 0 {
						if ops[0].start > t.lost {
							t.run.Missed++
						}
						lostAt = at(ops, t.lost, t.lostSkip)
					}
					t.pattern, t.lostOps, t.provisional = nil, 0, false
					t.resume, t.skip = mark(ops, lostAt)
					// The new cycle is in ops[lostAt:]: counting it from
					// there goes past lostAt before any drop again.
					if r := find(ops[lostAt:], nil, false); r.Found {
						a := lostAt + r.first
						t.setPattern(ops[a:a+r.Length], ops[a+r.Length:min(a+2*r.Length, len(ops))])
						return t.count(ops, lostAt, window, hs)
					}
					return hs
				}
				t.resume, t.skip = mark(ops, min(k, n-1))
				return hs
			}
			t.synced, t.lostOps = true, 0
		}
		// ops[k] starts a cycle; it is timed once the next is seen whole.
		if k+2*c > n {
			break
		}
		if match(k + c) {
			t.add(ops[k].start, ops[k+c].start-ops[k].start)
			k += c
			continue
		}
		t.run.Breaks++
		t.synced = false
		k += c // look for the next cycle past this one's operations
	}
	t.resume, t.skip = mark(ops, k)
	return hs
}

// sortSearch is sort.Search without the import of sort beside slices.
func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// add counts one cycle.
func (t *tracker) add(start, d time.Duration) {
	r := &t.run
	if t.sketch == nil {
		// The arguments are valid constants: the error cannot happen.
		sk, err := ddsketch.LogCollapsingLowestDenseDDSketch(QuantileAccuracy, sketchBins)
		if err != nil {
			panic(err)
		}
		t.sketch = sk
	}
	if r.Cycles == 0 {
		r.From, r.Min, r.Max = start, d, d
	}
	r.Cycles++
	r.To = start + d
	r.Sum += d
	r.Min, r.Max = min(r.Min, d), max(r.Max, d)
	_ = t.sketch.Add(float64(max(d, 0)))
	if len(r.Longest) < LongestKept || d > r.Longest[len(r.Longest)-1].Duration {
		// After those as long: the earliest of equals first.
		at := slices.IndexFunc(r.Longest, func(c Cycle) bool { return c.Duration < d })
		if at < 0 {
			at = len(r.Longest)
		}
		r.Longest = slices.Insert(r.Longest, at, Cycle{Start: start, Duration: d})
		r.Longest = r.Longest[:min(len(r.Longest), LongestKept)]
	}
}

// result is the run's figures so far, for rank.
func (t *tracker) result(rank int) Run {
	r := t.run
	r.Longest = slices.Clone(r.Longest)
	for i := range r.Longest {
		r.Longest[i].Rank = rank
	}
	if r.Cycles == 0 {
		return r
	}
	q := func(p float64) time.Duration { return quantile.Duration(t.sketch, p, r.Min, r.Max) }
	r.P50, r.P90, r.P99 = q(0.5), q(0.9), q(0.99)
	return r
}

// StallFactor is how many times the run's median a cycle must take to be
// called a stall.
const StallFactor = 2

// Stalls returns the job's longest cycles of StallFactor times the run's
// median or more, longest first: from the agreeing ranks' longest, one per
// stretch of time (a synchronous job stalls on every rank at once; the
// longest rank's is kept).
func (j Job) Stalls() []Cycle {
	var all []Cycle
	for _, rk := range j.agree {
		for _, c := range rk.Run.Longest {
			if rk.Run.P50 > 0 && c.Duration >= StallFactor*rk.Run.P50 {
				all = append(all, c)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b Cycle) int { return cmp.Compare(b.Duration, a.Duration) })
	var out []Cycle
	for _, c := range all {
		if !slices.ContainsFunc(out, func(o Cycle) bool { return c.Start < o.Start+o.Duration && o.Start < c.Start+c.Duration }) {
			out = append(out, c)
		}
	}
	return out[:min(len(out), LongestKept)]
}

// Lines is Text and, where cycles were timed over the run, RunText: one
// line or two, with no newline at the end.
func (r Result) Lines() string {
	if run := r.RunText(); run != "" {
		return r.Text() + "\n" + run
	}
	return r.Text()
}

// RunText says in one line what the cycles over the whole run took, for
// the lowest agreeing rank, and the stalls; "" where no cycle was timed.
func (r Result) RunText() string {
	j, ok := r.Job()
	if !ok {
		return ""
	}
	var rk *Rank
	breaks, missed := 0, 0
	for i := range j.agree {
		a := &j.agree[i]
		breaks, missed = max(breaks, a.Run.Breaks), max(missed, a.Run.Missed)
		if rk == nil && a.Run.Cycles > 0 {
			rk = a
		}
	}
	if rk == nil {
		return ""
	}
	run := rk.Run
	line := fmt.Sprintf("cycles over the run: %d on rank %d from %s to %s, p50 %s, p90 %s, p99 %s, max %s",
		run.Cycles, rk.Rank, clockText(run.From), clockText(run.To), durationText(run.P50), durationText(run.P90), durationText(run.P99), durationText(run.Max))
	stalls := j.Stalls()
	if len(stalls) == 0 {
		line += fmt.Sprintf("; none took %d× the median or more", StallFactor)
	} else {
		parts := make([]string, len(stalls))
		for i, c := range stalls {
			parts[i] = fmt.Sprintf("%s at %s (rank %d)", durationText(c.Duration), clockText(c.Start), c.Rank)
		}
		what := "the longest"
		if len(stalls) == 1 {
			what = "one"
		}
		line += fmt.Sprintf("; %s of %d× the median or more: %s", what, StallFactor, strings.Join(parts, ", "))
	}
	if breaks > 0 {
		line += fmt.Sprintf("; the sequence broke off %s (other collectives between cycles, or a new sequence)", times(breaks))
	}
	if missed > 0 {
		line += fmt.Sprintf("; %s operations arrived faster than they were counted, and cycles were missed", times(missed))
	}
	return line
}

// RunsTable is a table of every rank's cycles over the run, one row a
// rank, as the report's step times table has for steps: how many, from
// and to when, the minimum, quantiles and maximum, breaks and misses; ""
// where no rank's cycles were timed.
func (r Result) RunsTable() string {
	if !slices.ContainsFunc(r.Ranks, func(rk Rank) bool { return rk.Run.Cycles > 0 }) {
		return ""
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Rank\tCycles\tFrom(s)\tTo(s)\tMin(ms)\tp50(ms)\tp90(ms)\tp99(ms)\tMax(ms)\tBreaks\tMissed\t")
	for _, rk := range r.Ranks {
		run := rk.Run
		if run.Cycles == 0 {
			fmt.Fprintf(tw, "%d\t0\t-\t-\t-\t-\t-\t-\t-\t%d\t%d\t\n", rk.Rank, run.Breaks, run.Missed)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t\n", rk.Rank, run.Cycles, run.From.Seconds(), run.To.Seconds(),
			ms(run.Min), ms(run.P50), ms(run.P90), ms(run.P99), ms(run.Max), run.Breaks, run.Missed)
	}
	_ = tw.Flush() // a strings.Builder does not fail
	return b.String()
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// clockText is a time into the run, to the millisecond below a minute
// and to the second above.
func clockText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.3f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}
