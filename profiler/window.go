package profiler

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// StepWindow chooses the steps whose records are kept in detail (for a
// timeline or a per-call log) when a run is too long to keep them all:
// fixed ranges of steps, and the last steps of the run. The window is
// the union of the two: the last steps are counted among all the run's
// steps, those in Ranges included, so on a run of at most Last steps
// every step is kept, and on a longer one none before its last Last
// outside Ranges.
type StepWindow struct {
	// Ranges are inclusive [from, to] step ranges kept whenever they
	// come.
	Ranges [][2]int
	// Last keeps the records of the run's Last highest steps: while the
	// run goes, the Last highest seen so far.
	Last int
	// All keeps every step (bounded only by MaxRecords).
	All bool
}

// DefaultStepWindow keeps steps 1–5 (the first after a warm-up step) and
// the last 5. The warm-up step 0 is kept only on a run of at most 5
// steps, where it is one of the last 5 (on a 1-step run, the only one).
var DefaultStepWindow = StepWindow{Ranges: [][2]int{{1, 5}}, Last: 5}

// ParseStepWindow reads a window: comma-separated parts, each "A-B"
// (steps A to B), "A" (one step), "last:N" (the run's last N steps,
// whether or not a range names them too) or "all"; "" is
// DefaultStepWindow.
func ParseStepWindow(s string) (StepWindow, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultStepWindow, nil
	}
	var w StepWindow
	parts := strings.Split(s, ",")
	for _, part := range parts {
		part = strings.TrimSpace(part)
		// The part named apart only where there are others.
		where := fmt.Sprintf("step window %q", s)
		if len(parts) > 1 {
			where += fmt.Sprintf(": %q", part)
		}
		switch {
		case part == "all":
			w.All = true
		case strings.HasPrefix(part, "last:"):
			n, err := strconv.Atoi(strings.TrimPrefix(part, "last:"))
			if err != nil || n < 1 {
				return StepWindow{}, fmt.Errorf("%s: want last:N with N ≥ 1", where)
			}
			w.Last = max(w.Last, n)
		default:
			lo, hi, isRange := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a {
				return StepWindow{}, fmt.Errorf("%s: want A-B (0 ≤ A ≤ B), A, last:N or all", where)
			}
			w.Ranges = append(w.Ranges, [2]int{a, b})
		}
	}
	return w, nil
}

// String is the window in ParseStepWindow's syntax.
func (w StepWindow) String() string {
	if w.All {
		return "all"
	}
	var parts []string
	for _, r := range w.Ranges {
		if r[0] == r[1] {
			parts = append(parts, strconv.Itoa(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
	}
	if w.Last > 0 {
		parts = append(parts, "last:"+strconv.Itoa(w.Last))
	}
	return strings.Join(parts, ",")
}

// KeepsAny reports whether the window keeps any of the steps first to
// last (inclusive): a run of known length whose window keeps none of its
// steps would leave its timeline and per-step tables empty.
func (w StepWindow) KeepsAny(first, last int) bool {
	if first > last {
		return false
	}
	if w.All || w.Last > 0 {
		return true
	}
	for _, r := range w.Ranges {
		if r[0] <= last && first <= r[1] {
			return true
		}
	}
	return false
}

func (w StepWindow) fixed(step int) bool {
	for _, r := range w.Ranges {
		if step >= r[0] && step <= r[1] {
			return true
		}
	}
	return false
}

// Window is a Sink that keeps the records of the steps its StepWindow
// chooses, up to maxRecords in all, and counts the rest. Records without a
// step label are kept too, within the same bound. A step the bound cut
// short (some of its records kept, some not) is left out whole: half a
// step would pass for a whole one. Where the bound is reached while the
// records of an earlier step are still coming (ranks a step or more
// apart), the latest step held is left out to make room for them, so the
// earliest steps that fit are kept. Its memory is bounded by maxRecords
// whatever the length of the run. Safe for concurrent use.
type Window struct {
	w          StepWindow
	maxRecords int

	mu      sync.Mutex
	steps   map[int][]Record // kept records by step label (None for none)
	held    []int            // the step labels of steps, ascending, None left out
	kept    int
	recent  []int // steps kept for Last, ascending
	outside uint64
	full    uint64
	// cut holds the wanted steps that had records beyond the bound; cutLo
	// and cutHi span every step that had (None when none did): a map of
	// each would grow with the run.
	cut          map[int]bool
	cutLo, cutHi int
	// lost holds the wanted steps some rank dropped ranges of while
	// recording (ConsumeLost), left out whole as cut ones are; lostLo and
	// lostHi span every such step, lostRecs counts the records of theirs
	// that came.
	lost           map[int]bool
	lostLo, lostHi int
	lostRecs       uint64
	// spare holds the records' room of steps evicted from the most
	// recent, for the next new step: a long run's steps come and go, and
	// each allocating its own was most of what the window cost.
	spare [][]Record
}

// NewWindow returns a window sink; maxRecords < 1 means 1<<18.
func NewWindow(w StepWindow, maxRecords int) *Window {
	if maxRecords < 1 {
		maxRecords = 1 << 18
	}
	return &Window{w: w, maxRecords: maxRecords, steps: map[int][]Record{}, cut: map[int]bool{}, cutLo: None, cutHi: None, lost: map[int]bool{}, lostLo: None, lostHi: None}
}

// Bound is the most records the window keeps.
func (win *Window) Bound() int { return win.maxRecords }

// Consume implements Sink.
func (win *Window) Consume(batch []Record) {
	win.mu.Lock()
	defer win.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		step := int(r.Step)
		if !win.wants(step) {
			win.outside++
			continue
		}
		if win.lost[step] {
			win.lostRecs++
			continue
		}
		if win.kept >= win.maxRecords && step != None && !win.cut[step] {
			// Ranks deliver their records a step or more apart: a later
			// step can fill the bound while an earlier one's records are
			// still coming. The earlier step is kept whole and the latest
			// one left out, not every step in flight cut short.
			win.evictAfter(step)
		}
		if win.kept >= win.maxRecords {
			win.full++
			if step != None {
				// A step with no record kept yet is cut too: room made
				// later, when older steps leave the most recent, must not
				// take the rest of it. Without All the steps wanted are
				// the fixed ranges' and the most recent, so the map stays
				// bounded; with All nothing ever makes room.
				if _, kept := win.steps[step]; kept || !win.w.All {
					win.cut[step] = true
				}
				if win.cutLo == None || step < win.cutLo {
					win.cutLo = step
				}
				win.cutHi = max(win.cutHi, step)
			}
			continue
		}
		rs, ok := win.steps[step]
		if !ok && len(win.spare) > 0 {
			rs = win.spare[len(win.spare)-1]
			win.spare = win.spare[:len(win.spare)-1]
		}
		if !ok && step != None {
			i, _ := slices.BinarySearch(win.held, step)
			win.held = slices.Insert(win.held, i, step)
		}
		win.steps[step] = append(rs, *r)
		win.kept++
	}
}

// ConsumeLost implements LostSink: a wanted step of which a rank dropped
// ranges while recording is left out whole, its records kept so far
// and those still to come, as one the bound cut short is: half a step
// would pass for a whole one.
func (win *Window) ConsumeLost(lost []Lost) {
	win.mu.Lock()
	defer win.mu.Unlock()
	for _, l := range lost {
		step := int(l.Step)
		if step == None || win.lost[step] || !win.wants(step) {
			continue
		}
		win.lost[step] = true
		if win.lostLo == None || step < win.lostLo {
			win.lostLo = step
		}
		win.lostHi = max(win.lostHi, step)
		if rs, ok := win.steps[step]; ok {
			win.kept -= len(rs)
			win.lostRecs += uint64(len(rs))
			delete(win.steps, step)
			win.unhold(step)
			if cap(rs) > 0 && len(win.spare) < max(win.w.Last, 1) {
				clear(rs)
				win.spare = append(win.spare, rs[:0])
			}
		}
	}
}

// wants reports whether records of step are kept, making room among the
// most recent steps when step is a new one. Steps of the fixed ranges
// count among the most recent too: last:N is the run's last N steps, not
// the last N outside the ranges (which on a short run would reach back
// to the warm-up step before 1-5).
func (win *Window) wants(step int) bool {
	if step == None || win.w.All {
		return true
	}
	fixed := win.w.fixed(step)
	if win.w.Last == 0 {
		return fixed
	}
	if _, ok := slices.BinarySearch(win.recent, step); ok {
		return true
	}
	if len(win.recent) >= win.w.Last && step < win.recent[0] {
		return fixed // older than every recent step kept
	}
	win.recent = append(win.recent, step)
	slices.Sort(win.recent)
	for len(win.recent) > win.w.Last {
		old := win.recent[0]
		win.recent = win.recent[1:]
		if !win.w.fixed(old) {
			rs := win.steps[old]
			win.kept -= len(rs)
			win.outside += uint64(len(rs))
			delete(win.steps, old)
			win.unhold(old)
			delete(win.cut, old)
			delete(win.lost, old)
			if cap(rs) > 0 && len(win.spare) < win.w.Last {
				clear(rs) // the records' strings and pointers go
				win.spare = append(win.spare, rs[:0])
			}
		}
	}
	return true
}

// evictAfter leaves out the latest step held when it is later than step:
// its records go, counted as beyond the bound, and it is cut, so that its
// records still to come are not kept either.
func (win *Window) evictAfter(step int) {
	if len(win.held) == 0 {
		return
	}
	last := win.held[len(win.held)-1]
	if last <= step {
		return
	}
	rs := win.steps[last]
	win.kept -= len(rs)
	win.full += uint64(len(rs))
	delete(win.steps, last)
	win.held = win.held[:len(win.held)-1]
	win.cut[last] = true
	if win.cutLo == None || last < win.cutLo {
		win.cutLo = last
	}
	win.cutHi = max(win.cutHi, last)
	if cap(rs) > 0 && len(win.spare) < max(win.w.Last, 1) {
		clear(rs)
		win.spare = append(win.spare, rs[:0])
	}
}

// unhold removes step from the steps held.
func (win *Window) unhold(step int) {
	if i, ok := slices.BinarySearch(win.held, step); ok {
		win.held = slices.Delete(win.held, i, i+1)
	}
}

// Records returns a copy of the records kept, ordered by rank, then start
// time.
func (win *Window) Records() []Record {
	win.mu.Lock()
	defer win.mu.Unlock()
	out := make([]Record, 0, win.kept)
	// Steps in order, so records that tie in sortRecords' order (rank,
	// start, depth) come out the same way every time.
	steps := slices.Sorted(maps.Keys(win.steps))
	for _, step := range steps {
		if !win.cut[step] {
			out = append(out, win.steps[step]...)
		}
	}
	sortRecords(out)
	return out
}

// WindowStats says what a Window holds and left out.
type WindowStats struct {
	Records int    // kept
	Outside uint64 // records of steps outside the window (or evicted from its most recent steps)
	Full    uint64 // records of wanted steps beyond the bound, and the rest of the steps it cut short
	Steps   []int  // step labels kept, ascending (None first when present)
	// CutFirst and CutLast span the wanted steps the bound cut short or
	// left out (None when it did not): none of their records are kept.
	CutFirst, CutLast int
	// LostFirst and LostLast span the wanted steps left out because a
	// rank dropped ranges of them while recording (None when none was),
	// and Lost counts those steps' records that came.
	LostFirst, LostLast int
	Lost                uint64
}

// Stats returns what the window holds now.
func (win *Window) Stats() WindowStats {
	win.mu.Lock()
	defer win.mu.Unlock()
	st := WindowStats{Records: win.kept, Outside: win.outside, Full: win.full, CutFirst: win.cutLo, CutLast: win.cutHi,
		LostFirst: win.lostLo, LostLast: win.lostHi, Lost: win.lostRecs}
	for s, rs := range win.steps {
		if win.cut[s] {
			st.Records -= len(rs)
			st.Full += uint64(len(rs))
			continue
		}
		st.Steps = append(st.Steps, s)
	}
	slices.Sort(st.Steps)
	return st
}

// CutText says which steps the bound left out, e.g. "steps 10–12" ("" for
// none).
func (st WindowStats) CutText() string { return spanText(st.CutFirst, st.CutLast) }

// LostText says which steps were left out for ranges dropped while
// recording, as CutText says it ("" for none). The span may hold steps
// kept between them.
func (st WindowStats) LostText() string { return spanText(st.LostFirst, st.LostLast) }

// spanText is "step N" or "steps A–B"; "" where first is None.
func spanText(first, last int) string {
	switch {
	case first == None:
		return ""
	case first == last:
		return "step " + strconv.Itoa(first)
	}
	return fmt.Sprintf("steps %d–%d", first, last)
}

// Covers describes the steps kept, e.g. "steps 1–5, 495–499" ("no steps"
// when none).
func (st WindowStats) Covers() string {
	var parts []string
	for i := 0; i < len(st.Steps); {
		if st.Steps[i] == None {
			i++
			continue
		}
		j := i
		for j+1 < len(st.Steps) && st.Steps[j+1] == st.Steps[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(st.Steps[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d–%d", st.Steps[i], st.Steps[j]))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "no steps"
	}
	if len(parts) == 1 && !strings.Contains(parts[0], "–") {
		return "step " + parts[0]
	}
	return "steps " + strings.Join(parts, ", ")
}
