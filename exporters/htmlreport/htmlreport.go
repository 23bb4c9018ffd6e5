package htmlreport

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
)

var (
	//go:embed page.html.tmpl
	pageText string
	//go:embed style.css
	styleText string
	//go:embed page.js
	scriptText string

	page = template.Must(template.New("page").Parse(pageText))
)

// Input is what a page shows.
type Input struct {
	// Title names the run: its directory, say.
	Title string
	// Covers says which steps the records are ("steps 1–5, 15–19"); the
	// page repeats it, since a run keeps the records of some steps only.
	Covers string
	// Records are the records to draw and analyse; they must carry step
	// labels to be drawn.
	Records []profiler.Record
	// Notes are shown under the title: what reading the records warned of.
	Notes []string
	// SeveralClocks says the records are not on one clock (an import
	// that left some files' clocks as recorded): the collectives section
	// then shows departures without claiming one clock.
	SeveralClocks bool
	// SharedDevices, where set, says how the ranks shared their devices
	// ("2 ranks sharing 1 cuda device"): the analysis's stage balance
	// says what that does to a stage's computation
	// (analysis.WithSharedDevices).
	SharedDevices string
	// Environment, where set, says what the run ran on, in a line under
	// the title (jsonsummary.Environment.Text).
	Environment string
}

// Stats says what a page holds.
type Stats struct {
	Steps   int // charts drawn, one per step
	Windows int // charts drawn of operations without steps (a wrapped run's)
	// Forward and Backward count the blocks drawn: an action inside
	// another with other labels, drawn as a thinner bar on its block, is
	// one too; the ranges inside an action with its labels (its kernels)
	// are part of its block.
	Forward, Backward int
	Transfers         int // collective and point-to-point blocks drawn
	Bubbles           int // shaded gaps (a pixel wide or more)
	// Kernels counts the traced kernels drawn (a wrapped run's), and
	// KernelBoxes the boxes they were drawn as: kernels less than a pixel
	// apart share one.
	Kernels, KernelBoxes int
}

// ErrNoSteps is returned when no record carries a step label and no
// collective or point-to-point operation is there to draw instead.
var ErrNoSteps = errors.New("htmlreport: no records with a step label")

// windowOps is how many operations a chart of a run without steps
// draws (as a wrapped run's NCCL operations are), and maxWindows how many
// such charts: the run's first operations, its middle ones and its last.
const (
	windowOps  = 64
	maxWindows = 3
)

// Layout, in pixels.
const (
	chartWidth = 1100 // the time axis
	labelWidth = 70   // rank and lane labels
	laneHeight = 16   // one chunk lane
	xferHeight = 7    // one transfer lane
	rankGap    = 10
	axisHeight = 16
	topTimes   = 15 // rows of the top ranges table
	// insetMargin is how far an action's bar lies inside the block of
	// the action enclosing it, above and below.
	insetMargin = 4
)

// maxXferLanes bounds a rank's transfer lanes: overlapping transfers past
// it share lanes, so that a group of thousands posted together does not
// make a row thousands of lanes high.
const maxXferLanes = 16

// Write writes the page of in to w.
//
// Records without steps the analysis can account (a wrapped run's NCCL
// operations, an imported Kineto trace's) make a page of their own: charts
// of the run's first, middle and last operations, a row per rank, and the
// collectives matched across ranks (analysis.CallSink).
func Write(w io.Writer, in Input) (Stats, error) {
	steps := analysis.Analyze(in.Records)
	sum := analysis.Summarize(steps)
	if sum.Complete == 0 {
		// No step the analysis could account (none labelled, or none with
		// its step ranges, as an imported Kineto trace's): the operations.
		st, err := writeOps(w, in)
		if !errors.Is(err, ErrNoSteps) || len(steps) == 0 {
			return st, err
		}
	}
	var st Stats
	// Notes clipped: the page's own notes are appended to them, not to
	// whatever the caller keeps past them in the same array.
	v := view{Title: in.Title, Covers: in.Covers, Environment: in.Environment, Notes: slices.Clip(in.Notes), CSS: template.CSS(styleText), JS: template.JS(scriptText), Steps: true}
	byStep := map[int][]*profiler.Record{}
	ranks := map[int]bool{}
	ids := map[recKey]*profiler.Record{} // a nested action's enclosing ranges, in whatever step
	maxMB := -1
	for i := range in.Records {
		r := &in.Records[i]
		if r.ID != 0 {
			ids[recKey{r.Rank, r.ID}] = r
		}
		if r.Step == profiler.None {
			continue
		}
		byStep[int(r.Step)] = append(byStep[int(r.Step)], r)
		ranks[r.Rank] = true
		if isFwdBwd(r) || phaseKernel(r) {
			maxMB = max(maxMB, int(r.Microbatch))
		}
	}
	v.Ranks = len(ranks)
	v.palette(maxMB + 1)
	if p := sum.Pipeline; p.Stages > 0 && !math.IsNaN(p.Ideal) {
		v.Shape = fmt.Sprintf("%d stages × %d chunks × %d microbatches, ideal bubble %.1f%%", p.Stages, p.Chunks, p.Microbatches, 100*p.Ideal)
	}
	for i := range steps {
		c, ok := chart(&steps[i], byStep[steps[i].Step], ids, &st, false)
		if ok {
			v.Charts = append(v.Charts, c)
		}
	}
	v.StepCount = len(v.Charts)
	st.Steps = len(v.Charts)
	var text bytes.Buffer
	if err := analysis.WriteReport(&text, sum, analysis.WithSharedDevices(in.SharedDevices)); err != nil {
		return Stats{}, err
	}
	v.Analysis = text.String()
	v.stepTable(steps)
	v.Top = topRanges(in.Records)
	if err := execute(w, &v); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// Drawable reports whether Write has something to draw of records: a
// record with a step label, or a collective or point-to-point operation.
// Where it has not, Write returns ErrNoSteps.
func Drawable(records []profiler.Record) bool {
	for i := range records {
		if r := &records[i]; r.Step != profiler.None || isTransfer(r) {
			return true
		}
	}
	return false
}

// writeOps writes the page of records without steps.
func writeOps(w io.Writer, in Input) (Stats, error) {
	var ops []*profiler.Record
	ranks := map[int]bool{}
	for i := range in.Records {
		if r := &in.Records[i]; isTransfer(r) {
			ops = append(ops, r)
			ranks[r.Rank] = true
		}
	}
	if len(ops) == 0 {
		return Stats{}, ErrNoSteps
	}
	slices.SortStableFunc(ops, func(a, b *profiler.Record) int { return cmp.Compare(interval(a).Start, interval(b).Start) })
	var st Stats
	v := view{Title: in.Title, Covers: in.Covers, Environment: in.Environment, Notes: slices.Clip(in.Notes), CSS: template.CSS(styleText), JS: template.JS(scriptText), Ranks: len(ranks)}
	if v.Covers == "" {
		v.Covers = fmt.Sprintf("%d operations without steps", len(ops))
	}
	v.palette(0)
	// The windows: the first windowOps operations by start, the middle
	// ones and the last, each drawn with every operation that starts
	// within its time range — those whose starts tie with its first or
	// last one's, so that ties make no window more than twice windowOps
	// operations, nor draw one an earlier window drew.
	starts := []int{0}
	if n := len(ops); n > windowOps {
		starts = append(starts, max(n/2-windowOps/2, windowOps), n-windowOps)
	}
	starts = slices.Compact(starts)
	var rows []analysis.Rank
	for _, r := range slices.Sorted(maps.Keys(ranks)) {
		rows = append(rows, analysis.Rank{Rank: r, Stage: profiler.None})
	}
	drawnTo := -1
	for wi, from := range starts[:min(len(starts), maxWindows)] {
		from = max(from, drawnTo+1)
		to := min(from+windowOps, len(ops)) - 1
		if from > to {
			continue
		}
		// ops is sorted by start: those starting within [lo, hi] are
		// the ones from..to and those tied with either end.
		lo, hi := interval(ops[from]).Start, interval(ops[to]).Start
		for from > max(drawnTo+1, 0) && from > to-windowOps-windowOps/2+1 && interval(ops[from-1]).Start >= lo {
			from--
		}
		for to < len(ops)-1 && to < from+2*windowOps-1 && interval(ops[to+1]).Start <= hi {
			to++
		}
		s := analysis.Step{Step: wi, Ranks: rows, Straggler: profiler.None}
		c, ok := chart(&s, ops[from:to+1], nil, &st, true)
		if !ok {
			continue
		}
		c.Heading = fmt.Sprintf("operations %d–%d of %d", from+1, to+1, len(ops))
		c.Wall = fmt.Sprintf("%s ms from the first one's start to the last one's end", msF(c.span))
		v.Charts = append(v.Charts, c)
		drawnTo = to
	}
	st.Windows = len(v.Charts)
	v.StepCount = len(v.Charts)
	// One trace is one clock (a wrapped run's host, or an import that
	// aligned its files before writing it), unless it says otherwise.
	clock := analysis.WithOneClock()
	if in.SeveralClocks {
		clock = nil
	}
	calls := analysis.NewCallSink(clock)
	calls.Consume(in.Records)
	calls.Flush()
	var text bytes.Buffer
	if err := analysis.WriteReport(&text, calls.Summary()); err != nil {
		return Stats{}, err
	}
	// The step the operations' cycle suggests, as the run's summary says
	// it (package cycle).
	cyc := cycle.NewSink(0)
	cyc.Consume(in.Records)
	if line := cyc.Result().Text(); line != "" {
		fmt.Fprintf(&text, "\n%s\n", line)
	}
	v.Analysis = text.String()
	v.Top = topRanges(in.Records)
	if err := execute(w, &v); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// execute writes the page of v to w, as UTF-8 throughout: a name that is
// not (a run directory's: a file name is any bytes) has U+FFFD for its
// bytes that are not, as the page's charset says.
func execute(w io.Writer, v *view) error {
	var buf bytes.Buffer
	if err := page.Execute(&buf, v); err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	if _, err := w.Write(bytes.ToValidUTF8(buf.Bytes(), []byte("\uFFFD"))); err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	return nil
}

// view is the template's data.
type view struct {
	// Steps is set for a page of steps, unset for one of operations
	// without steps (a wrapped run's).
	Steps                bool
	Title, Covers, Shape string
	Environment          string
	Notes                []string
	Ranks, StepCount     int
	CSS                  template.CSS
	Palette              template.CSS
	JS                   template.JS
	Legend               []swatch
	Charts               []chartView
	Analysis             string
	StageHeads           []int
	StepRows             []stepRow
	Top                  []topRow
}

type swatch struct {
	MB       int
	Fwd, Bwd template.CSS
}

type chartView struct {
	Step                 int
	Heading              string // "step N", or the operations a window holds
	Wall, Problems       string
	span                 float64 // nanoseconds
	Width, Height, AxisY int
	Ticks                []tick
	Rows                 []rowView
}

type tick struct {
	X, Y  string
	Label string
}

type rowView struct {
	Rank          int
	LabelY, SubY  string
	Sub           string
	Wall          box
	Lanes         []laneLabel
	Bubbles       []box
	Blocks        []block
	laneY, xferY0 float64
}

type laneLabel struct {
	X, Y, Label string
}

type box struct {
	X, Y, W, H string
	Title      string
}

type block struct {
	box
	Class  string
	MB     string
	Label  string
	LX, LY string
}

type stepRow struct {
	Step, Complete, Span, Ideal, Straggler, Problems string
	Stages                                           []string
}

type topRow struct {
	Name, Kind, Ranks, Count, Host, HostPct, Device, DevicePct, AvgHost, AvgDevice string
}

// hue of microbatch mb: the golden angle apart, so neighbours differ
// however many there are.
func hue(mb int) int { return mb * 137 % 360 }

// paletteSize bounds the microbatch colours: a page's styles and legend
// grow with it, and a label's value (a run that numbers its microbatches
// across steps) must not make them grow. Past it, colours repeat;
// highlighting a microbatch (data-mb) still tells them apart.
const paletteSize = 64

// mbClass is the colour class of microbatch mb.
func mbClass(mb int) string {
	return "m" + strconv.Itoa((mb%paletteSize+paletteSize)%paletteSize)
}

func (v *view) palette(n int) {
	if n > paletteSize {
		v.Notes = append(v.Notes, fmt.Sprintf("microbatches up to %d: their colours repeat every %d (hover a block to pick out its microbatch)", n-1, paletteSize))
		n = paletteSize
	}
	var css strings.Builder
	for mb := range n {
		h := hue(mb)
		fwd := fmt.Sprintf("hsl(%d,70%%,72%%)", h)
		bwd := fmt.Sprintf("hsl(%d,60%%,42%%)", h)
		fmt.Fprintf(&css, ".m%d.fwd{fill:%s}.m%d.bwd{fill:%s}", mb, fwd, mb, bwd)
		v.Legend = append(v.Legend, swatch{MB: mb, Fwd: template.CSS(fwd), Bwd: template.CSS(bwd)})
	}
	v.Palette = template.CSS(css.String())
}

// isAction reports device-timed forward, backward or optimizer work,
// nested in another device-timed range or not. Work without a microbatch
// label counts too: the analysis counts it as work, so it must not show
// as bubble.
func isAction(r *profiler.Record) bool {
	return r.HasDevice && r.Kind == profiler.KindDevice &&
		(r.Phase == profiler.Forward || r.Phase == profiler.Backward || r.Phase == profiler.Optimizer)
}

// isFwdBwd reports forward or backward work among the actions.
func isFwdBwd(r *profiler.Record) bool {
	return isAction(r) && (r.Phase == profiler.Forward || r.Phase == profiler.Backward)
}

// actionKey is what tells an action's own ranges from another action's:
// the ranges inside a forward with its phase, chunk and microbatch (its
// kernels, with every kernel device-timed) are parts of it.
type actionKey struct {
	phase profiler.Phase
	chunk int16
	mb    int32
}

func keyOf(r *profiler.Record) actionKey { return actionKey{r.Phase, r.Chunk, r.Microbatch} }

// recKey names a record: IDs are unique per rank's recorder.
type recKey struct {
	rank int
	id   uint64
}

// drawn is how an action is drawn: inset (a thinner bar) where it lies
// inside another action drawn on its lane, and within names that one.
type drawn struct {
	inset  bool
	within *profiler.Record
}

// actions chooses the actions of recs (one step's records) to draw: every
// one not inside another device-timed range, and every nested one that is
// not part of an enclosing action with its labels — so that work inside a
// device-timed range of no phase of its own (a schedule's, say), or inside
// an action with other labels (one forward per microbatch inside one
// without a microbatch label) is drawn, and an action's kernels are not
// drawn again. ids finds a record's enclosing ranges (Record.Parent).
// Where the chain of them breaks (a parent missing), a nested action
// inside the interval of an outermost action with its labels is taken as
// part of it.
func actions(recs []*profiler.Record, ids map[recKey]*profiler.Record) map[*profiler.Record]drawn {
	out := map[*profiler.Record]drawn{}
	type rankKey struct {
		rank int
		key  actionKey
	}
	outer := map[rankKey]*spans{} // the outermost actions of a rank with given labels
	for _, r := range recs {
		if !isAction(r) || r.DeviceNested {
			continue
		}
		out[r] = drawn{}
		k := rankKey{r.Rank, keyOf(r)}
		if outer[k] == nil {
			outer[k] = &spans{}
		}
		outer[k].add(interval(r))
	}
	for _, sp := range outer {
		sp.sort()
	}
	for _, r := range recs {
		if !isAction(r) || !r.DeviceNested {
			continue
		}
		key := keyOf(r)
		var within *profiler.Record // the nearest enclosing action
		part, whole := false, false // part of an enclosing action; the chain followed to its top
		p := r
		for range maxAncestors { // a cycle of parents ends here too
			if p.Parent == 0 {
				whole = true
				break
			}
			a := ids[recKey{r.Rank, p.Parent}]
			if a == nil || a == p || a.HostStart > p.HostStart || a.HostEnd < p.HostEnd {
				break // missing, or not the range that encloses p (another recorder's ID)
			}
			if isAction(a) {
				if keyOf(a) == key {
					part = true
					break
				}
				if within == nil {
					within = a
				}
			}
			p = a
		}
		if !part && !whole && within == nil {
			part = outer[rankKey{r.Rank, key}].contain(interval(r))
		}
		if part {
			continue
		}
		d := drawn{within: within}
		if within != nil && r.Phase != profiler.Optimizer {
			d.inset = within.Phase == profiler.Optimizer || max(within.Chunk, 0) == max(r.Chunk, 0)
		}
		out[r] = d
	}
	return out
}

// maxAncestors bounds the enclosing ranges followed up from a nested
// action (the recorder nests at most 64 deep); past it, the chain counts
// as broken.
const maxAncestors = 256

// spans answers whether one of a set of intervals contains another in
// O(log n): sorted by start, with the latest end up to each.
type spans struct {
	ivs    []profiler.Interval
	maxEnd []time.Duration
}

func (s *spans) add(iv profiler.Interval) { s.ivs = append(s.ivs, iv) }

func (s *spans) sort() {
	slices.SortFunc(s.ivs, func(a, b profiler.Interval) int { return cmp.Compare(a.Start, b.Start) })
	s.maxEnd = make([]time.Duration, len(s.ivs))
	for i, iv := range s.ivs {
		s.maxEnd[i] = iv.End
		if i > 0 {
			s.maxEnd[i] = max(s.maxEnd[i], s.maxEnd[i-1])
		}
	}
}

// contain reports whether an interval of s (nil: none) contains iv.
func (s *spans) contain(iv profiler.Interval) bool {
	if s == nil {
		return false
	}
	n := sort.Search(len(s.ivs), func(i int) bool { return s.ivs[i].Start > iv.Start })
	return n > 0 && s.maxEnd[n-1] >= iv.End
}

// isKernel reports a traced kernel (a wrapped run's, through CUPTI). One
// without a phase is drawn as a busy span on a lane of its rank's own.
func isKernel(r *profiler.Record) bool {
	return r.HasDevice && r.Kind == profiler.KindKernel
}

// phaseKernel reports a traced kernel launched inside an NVTX range named
// as forward or backward work: drawn on its chunk's lane, coloured by its
// microbatch, with the kernels of the same work near it as one block.
func phaseKernel(r *profiler.Record) bool {
	return isKernel(r) && (r.Phase == profiler.Forward || r.Phase == profiler.Backward)
}

// stageKernel reports a traced kernel of a pipeline stage: the work whose
// gaps are a wrapped pipeline's bubble (as the analysis counts it). One
// of forward or backward work is, with a stage label or without (a rank
// whose pipeline communicator was not seen): the analysis counts it.
func stageKernel(r *profiler.Record) bool {
	return phaseKernel(r) || isKernel(r) && r.Phase == profiler.PhaseNone && r.Stage != profiler.None
}

func isTransfer(r *profiler.Record) bool {
	return r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P
}

// interval of a record: its device times where it has them.
func interval(r *profiler.Record) profiler.Interval {
	if r.HasDevice {
		return profiler.Interval{Start: r.DeviceStart, End: r.DeviceEnd}
	}
	return profiler.Interval{Start: r.HostStart, End: r.HostEnd}
}

func msText(d time.Duration) string { return msF(float64(d)) }

// msF is msText of nanoseconds in a float64.
func msF(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 3, 64) }

// length is iv's length in nanoseconds, 0 where inverted, in float64: it
// does not overflow.
func length(iv profiler.Interval) float64 { return max(diff(iv.End, iv.Start), 0) }

// diff is a − b in nanoseconds: exact where the difference fits a
// time.Duration (times on a clock of the Unix epoch do not fit a float64
// exactly), else in float64 rather than overflowing.
func diff(a, b time.Duration) float64 {
	if d := a - b; (a^b)&(a^d) >= 0 {
		return float64(d)
	}
	return float64(a) - float64(b)
}

func px(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// chart lays out one step; ids finds the ranges enclosing a nested
// action (see actions).
// With window set, s is not a step but a window of operations without
// steps: its ranks have no step range, and nothing is a bubble.
func chart(s *analysis.Step, recs []*profiler.Record, ids map[recKey]*profiler.Record, st *Stats, window bool) (chartView, bool) {
	// A bubble only where the work is a pipeline's (stage-labelled): a
	// data-parallel job's idle compute is not one.
	pipelined := s.Pipeline.Stages > 0
	bubbleSpan := s.Span
	if !pipelined {
		bubbleSpan = profiler.Interval{}
	}
	// The time range: every rank's step range, every block drawn and the
	// bubble's span (which a kernel running past its action's block and
	// the step ranges may stretch).
	var t0, t1 time.Duration
	first := true
	extend := func(iv profiler.Interval) {
		if iv.End < iv.Start {
			// Inverted: computed nothing, but drawn at its start, which
			// must lie on the chart.
			iv.End = iv.Start
		}
		if first {
			t0, t1, first = iv.Start, iv.End, false
			return
		}
		t0, t1 = min(t0, iv.Start), max(t1, iv.End)
	}
	for _, rk := range s.Ranks {
		if rk.Wall.Len() > 0 {
			extend(rk.Wall)
		}
	}
	if bubbleSpan.Len() > 0 {
		extend(bubbleSpan)
	}
	// A lane per chunk the step has work of (not per value up to the
	// largest: a label's value must not make lanes).
	laneOf := map[int]int{}
	byRank := map[int][]*profiler.Record{}
	// Each rank's forward and backward computation, drawn or not (an
	// action's kernels, part of its block, too): as the analysis counts
	// it, what is no bubble.
	work := map[int][]profiler.Interval{}
	var acts map[*profiler.Record]drawn
	if !window {
		acts = actions(recs, ids)
	}
	isBlock := func(r *profiler.Record) bool {
		_, ok := acts[r]
		return ok && isFwdBwd(r)
	}
	isOptimizer := func(r *profiler.Record) bool {
		_, ok := acts[r]
		return ok && r.Phase == profiler.Optimizer
	}
	for _, r := range recs {
		if isFwdBwd(r) || stageKernel(r) {
			work[r.Rank] = append(work[r.Rank], interval(r))
		}
		if isBlock(r) || isOptimizer(r) || isTransfer(r) || isKernel(r) && !window {
			extend(interval(r))
			byRank[r.Rank] = append(byRank[r.Rank], r)
			if isBlock(r) || phaseKernel(r) {
				laneOf[max(int(r.Chunk), 0)] = 0
			}
		}
	}
	chunkList := slices.Sorted(maps.Keys(laneOf))
	for i, ch := range chunkList {
		laneOf[ch] = i
	}
	chunks := max(len(chunkList), 1)
	if first {
		return chartView{}, false
	}
	if t1 <= t0 {
		// Everything at one instant (of no length, on a coarse clock):
		// a chart of a nanosecond, so that it is drawn all the same.
		t1 = t0 + 1
	}
	stepText := " · step " + strconv.Itoa(s.Step)
	if window {
		stepText = ""
	}
	// Positions and lengths in float64: times far apart (a bogus
	// timestamp) would overflow a time.Duration's difference.
	span := diff(t1, t0)
	scale := float64(chartWidth) / span
	x := func(t time.Duration) float64 { return labelWidth + diff(t, t0)*scale }
	rel := func(t time.Duration) string { return msF(diff(t, t0)) }
	c := chartView{Step: s.Step, Heading: "step " + strconv.Itoa(s.Step), Width: labelWidth + chartWidth + 10, span: span}
	// The step ranges' time, not the chart's: a device's work may trail
	// its host's step range, and the chart runs on to draw it.
	var wall profiler.Interval
	walled := false
	for _, rk := range s.Ranks {
		if rk.Wall.Len() > 0 {
			if !walled {
				wall, walled = rk.Wall, true
			}
			wall = profiler.Interval{Start: min(wall.Start, rk.Wall.Start), End: max(wall.End, rk.Wall.End)}
		}
	}
	c.Wall = fmt.Sprintf("%s ms from the first rank's step start to the last one's end", msF(length(wall)))
	if !walled {
		c.Wall = fmt.Sprintf("no step range: %s ms drawn", msF(span))
	}
	if len(s.Problems) > 0 {
		c.Problems = strings.Join(s.Problems, "; ")
	}
	y := float64(axisHeight)
	for _, rk := range s.Ranks {
		rv := rowView{Rank: rk.Rank, laneY: y}
		recs := byRank[rk.Rank]
		// By start, an enclosing range before what it encloses: drawn
		// first, so that a nested action's bar lies on its block.
		slices.SortFunc(recs, func(a, b *profiler.Record) int {
			return cmp.Or(cmp.Compare(interval(a).Start, interval(b).Start), cmp.Compare(interval(b).End, interval(a).End), cmp.Compare(a.Depth, b.Depth))
		})
		// Transfers go in lanes of their own, as many as overlap up to
		// maxXferLanes; past that, in the lane free the soonest, over
		// what is still there.
		var laneEnds []time.Duration
		xferLane := map[*profiler.Record]int{}
		for _, r := range recs {
			if !isTransfer(r) {
				continue
			}
			iv := interval(r)
			l := slices.IndexFunc(laneEnds, func(e time.Duration) bool { return e <= iv.Start })
			switch {
			case l >= 0:
			case len(laneEnds) < maxXferLanes:
				l = len(laneEnds)
				laneEnds = append(laneEnds, iv.End)
			default:
				l = slices.Index(laneEnds, slices.Min(laneEnds))
			}
			laneEnds[l] = max(laneEnds[l], iv.End)
			xferLane[r] = l
		}
		computeH := float64(chunks * laneHeight)
		if window {
			computeH = 6 // operations only: no chunk lanes, a margin above them
		}
		height := computeH + float64(len(laneEnds)*xferHeight)
		if window {
			height = max(height, 20) // room for the rank's label
		}
		rv.xferY0 = y + computeH
		rv.LabelY = px(y + 12)
		rv.SubY = px(y + 24)
		if rk.Stage != profiler.None {
			rv.Sub = fmt.Sprintf("stage %d", rk.Stage)
		}
		if rk.Wall.Len() > 0 {
			busy := msText(rk.Busy) + " ms"
			if !rk.Computed {
				busy = "- (no compute timed)"
			}
			title := fmt.Sprintf("rank %d · step %d · step range %s ms · busy %s", rk.Rank, s.Step, msF(length(rk.Wall)), busy)
			if pipelined {
				title += " · bubble " + msText(rk.Bubble) + " ms"
			}
			rv.Wall = box{X: px(x(rk.Wall.Start)), Y: px(y), W: px(length(rk.Wall) * scale), H: px(height), Title: title}
		} else if window {
			rv.Wall = box{X: px(labelWidth), Y: px(y), W: "0", H: px(height), Title: fmt.Sprintf("rank %d", rk.Rank)}
		} else {
			rv.Wall = box{X: px(labelWidth), Y: px(y), W: "0", H: px(height), Title: fmt.Sprintf("rank %d: no step range in step %d", rk.Rank, s.Step)}
		}
		for i, ch := range chunkList {
			if window {
				break
			}
			rv.Lanes = append(rv.Lanes, laneLabel{X: px(labelWidth - 3), Y: px(y + float64(i*laneHeight) + 11), Label: "c" + strconv.Itoa(ch)})
		}
		if len(chunkList) == 0 && !window {
			rv.Lanes = append(rv.Lanes, laneLabel{X: px(labelWidth - 3), Y: px(y + 11), Label: "c0"})
		}
		if len(laneEnds) > 0 {
			rv.Lanes = append(rv.Lanes, laneLabel{X: px(labelWidth - 3), Y: px(rv.xferY0 + float64(len(laneEnds)*xferHeight) - 1), Label: "xfer"})
		}
		// Bubbles: the step's span less the rank's forward and backward
		// work, where the work is a pipeline's.
		for _, g := range gaps(bubbleSpan, work[rk.Rank]) {
			if length(g)*scale < 1 {
				continue // under a pixel: not to be seen, only to weigh the page
			}
			st.Bubbles++
			rv.Bubbles = append(rv.Bubbles, box{X: px(x(g.Start)), Y: px(y), W: px(length(g) * scale), H: px(computeH),
				Title: fmt.Sprintf("bubble · rank %d · step %d · %s ms (%s–%s ms)", rk.Rank, s.Step, msF(length(g)), rel(g.Start), rel(g.End))})
		}
		// Kernels: merged where less than a pixel apart, so that a step of
		// thousands draws at most a box per pixel.
		var kernels []profiler.Interval
		type action struct {
			phase             profiler.Phase
			chunk, microbatch int
		}
		labelled := map[action][]profiler.Interval{}
		for _, r := range recs {
			switch {
			case phaseKernel(r):
				k := action{r.Phase, max(int(r.Chunk), 0), int(r.Microbatch)}
				labelled[k] = append(labelled[k], interval(r))
				st.Kernels++
			case isKernel(r):
				kernels = append(kernels, interval(r))
			}
		}
		st.Kernels += len(kernels)
		for _, m := range mergeNear(kernels, time.Duration(1/scale)) {
			st.KernelBoxes++
			rv.Blocks = append(rv.Blocks, block{Class: "kern", box: box{X: px(x(m.iv.Start)), Y: px(y + 1), W: px(max(length(m.iv)*scale, 0.5)), H: px(computeH - 2),
				Title: fmt.Sprintf("%d kernel(s) · rank %d%s · busy %s ms within %s–%s ms", m.n, rk.Rank, stepText, msText(m.busy), rel(m.iv.Start), rel(m.iv.End))}})
		}
		keys := slices.SortedFunc(maps.Keys(labelled), func(a, b action) int {
			return cmp.Or(cmp.Compare(a.phase, b.phase), cmp.Compare(a.chunk, b.chunk), cmp.Compare(a.microbatch, b.microbatch))
		})
		for _, k := range keys {
			phase, mb, mbText := "fwd", "nomb", "no microbatch"
			if k.phase == profiler.Backward {
				phase = "bwd"
			}
			if k.microbatch != profiler.None {
				mb, mbText = mbClass(k.microbatch), "microbatch "+strconv.Itoa(k.microbatch)
			}
			top := y + float64(laneOf[k.chunk]*laneHeight) + 1
			for _, m := range mergeNear(labelled[k], time.Duration(1/scale)) {
				st.KernelBoxes++
				if k.phase == profiler.Backward {
					st.Backward++
				} else {
					st.Forward++
				}
				b := block{Class: "blk " + phase + " " + mb, box: box{X: px(x(m.iv.Start)), Y: px(top), W: px(max(length(m.iv)*scale, 0.5)), H: px(laneHeight - 2),
					Title: fmt.Sprintf("%s · rank %d%s · chunk %d · %s · %d kernel(s), busy %s ms within %s–%s ms", k.phase, rk.Rank, stepText, k.chunk, mbText, m.n, msText(m.busy), rel(m.iv.Start), rel(m.iv.End))}}
				if k.microbatch != profiler.None {
					b.MB = strconv.Itoa(k.microbatch)
					if length(m.iv)*scale >= 9 {
						b.Label, b.LX, b.LY = b.MB, px(x(m.iv.Start)+length(m.iv)*scale/2), px(top+laneHeight/2+1)
					}
				}
				rv.Blocks = append(rv.Blocks, b)
			}
		}
		for _, r := range recs {
			if isKernel(r) {
				continue
			}
			iv := interval(r)
			b := block{box: box{X: px(x(iv.Start)), W: px(max(length(iv)*scale, 0.5))}}
			when := fmt.Sprintf("%s–%s ms (%s ms)", rel(iv.Start), rel(iv.End), msF(length(iv)))
			switch {
			case isBlock(r):
				top := y + float64(laneOf[max(int(r.Chunk), 0)]*laneHeight) + 1
				b.Y, b.H = px(top), px(laneHeight-2)
				d := acts[r]
				if d.inset {
					// Inside another action on its lane: a thinner bar
					// on that one's block.
					b.Y, b.H = px(top+insetMargin), px(laneHeight-2-2*insetMargin)
				}
				phase := "fwd"
				if r.Phase == profiler.Backward {
					phase = "bwd"
					st.Backward++
				} else {
					st.Forward++
				}
				mb, mbText := "nomb", "no microbatch"
				if r.Microbatch != profiler.None {
					b.MB = strconv.Itoa(int(r.Microbatch))
					mb, mbText = mbClass(int(r.Microbatch)), "microbatch "+b.MB
				}
				b.Class = "blk " + phase + " " + mb
				if d.inset {
					b.Class += " in"
				}
				chunkText := "chunk " + strconv.Itoa(int(r.Chunk))
				if r.Chunk == profiler.None {
					chunkText = "no chunk"
				}
				b.Title = fmt.Sprintf("%s · rank %d · step %d · %s · %s · %s", r.Phase, r.Rank, s.Step, chunkText, mbText, when)
				if d.within != nil {
					b.Title += " · inside " + d.within.Name
				}
				if b.MB != "" && !d.inset && length(iv)*scale >= 9 {
					b.Label, b.LX, b.LY = b.MB, px(x(iv.Start)+length(iv)*scale/2), px(top+laneHeight/2+1)
				}
			case isOptimizer(r):
				b.Y, b.H = px(y+1), px(computeH-2)
				b.Class = "opt"
				b.Title = fmt.Sprintf("%s · rank %d · step %d · %s", r.Name, r.Rank, s.Step, when)
			case isTransfer(r):
				st.Transfers++
				b.Y, b.H = px(rv.xferY0+float64(xferLane[r]*xferHeight)+0.5), px(xferHeight-1)
				cl := &r.Collective
				if r.Kind == profiler.KindP2P {
					b.Class = "xfer p2p"
					dir := "to"
					if cl.Op == "Recv" {
						dir = "from"
					}
					b.Title = fmt.Sprintf("%s %s group rank %d · %d bytes · group %s #%d · rank %d%s · %s", cl.Op, dir, cl.Peer, cl.Bytes, groupText(cl), cl.Seq, r.Rank, stepText, when)
				} else {
					b.Class = "xfer coll"
					b.Title = fmt.Sprintf("%s · %d bytes · group %s (%d ranks) #%d · rank %d%s · %s", cl.Op, cl.Bytes, groupText(cl), cl.GroupSize, cl.Seq, r.Rank, stepText, when)
				}
				if !r.HasDevice {
					b.Title += " (host time: no device time)"
				}
			}
			rv.Blocks = append(rv.Blocks, b)
		}
		c.Rows = append(c.Rows, rv)
		y += height + rankGap
	}
	c.AxisY = int(math.Ceil(y))
	c.Height = c.AxisY + axisHeight
	at, every := ticks(span)
	// Milliseconds to the nanosecond where ticks are under a microsecond
	// apart: rounded to the microsecond, two would read the same.
	decimals := 3
	for d := 1e3; every < d && decimals < 6; d /= 10 {
		decimals++
	}
	for _, tk := range at {
		c.Ticks = append(c.Ticks, tick{X: px(labelWidth + tk*scale), Y: px(float64(c.AxisY) + 12), Label: strconv.FormatFloat(tk/1e6, 'f', decimals, 64) + " ms"})
	}
	return c, true
}

// gaps returns span less the union of work.
func gaps(span profiler.Interval, work []profiler.Interval) []profiler.Interval {
	if span.Len() <= 0 {
		return nil
	}
	slices.SortFunc(work, func(a, b profiler.Interval) int { return cmp.Compare(a.Start, b.Start) })
	var out []profiler.Interval
	at := span.Start
	for _, w := range work {
		if w.End <= at || w.End <= w.Start {
			continue // inverted or empty work computed nothing, as the analysis counts it
		}
		if w.Start > at {
			out = append(out, profiler.Interval{Start: at, End: min(w.Start, span.End)})
		}
		at = max(at, w.End)
		if at >= span.End {
			break
		}
	}
	if at < span.End {
		out = append(out, profiler.Interval{Start: at, End: span.End})
	}
	return slices.DeleteFunc(out, func(iv profiler.Interval) bool { return iv.Len() <= 0 })
}

// ticks chooses about eight round tick positions over [0, d]
// nanoseconds, a whole number of nanoseconds apart, and returns them with
// their spacing.
func ticks(d float64) ([]float64, float64) {
	if !(d > 0) {
		return nil, 0
	}
	raw := d / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	step = max(math.Round(step), 1)
	var out []float64
	for t := 0.0; t <= d; t += step {
		out = append(out, t)
	}
	return out, step
}

func (v *view) stepTable(steps []analysis.Step) {
	stages := map[int]bool{}
	for _, s := range steps {
		for _, sg := range s.Stages {
			stages[sg.Stage] = true
		}
	}
	for sg := range stages {
		v.StageHeads = append(v.StageHeads, sg)
	}
	slices.Sort(v.StageHeads)
	for _, s := range steps {
		row := stepRow{Step: strconv.Itoa(s.Step), Complete: "yes", Span: msText(s.Span.Len()), Ideal: "-", Straggler: "none stands out"}
		if !s.Complete() {
			row.Complete = "no"
			row.Problems = strings.Join(s.Problems, "; ")
		}
		if !math.IsNaN(s.Pipeline.Ideal) {
			row.Ideal = fmt.Sprintf("%.1f%%", 100*s.Pipeline.Ideal)
		}
		if s.Straggler != profiler.None {
			row.Straggler = "rank " + strconv.Itoa(s.Straggler)
		} else if len(s.Collectives) == 0 {
			// A pipeline without collectives: the stage the others
			// waited for, where one led the next by 5% or more.
			row.Straggler = "no collectives"
			if b, ok := s.Balance(); ok && b.StandsOut() {
				row.Straggler = fmt.Sprintf("no collectives; stage %d slowest, %s ms ahead", b.Slowest.Stage, msText(b.Lead()))
			}
		}
		for _, head := range v.StageHeads {
			cell := "-"
			for _, sg := range s.Stages {
				if sg.Stage == head {
					cell = fmt.Sprintf("%.1f%% (%s ms)", 100*sg.Fraction, msText(sg.Bubble))
				}
			}
			row.Stages = append(row.Stages, cell)
		}
		v.StepRows = append(v.StepRows, row)
	}
}

// topRanges totals the records per name over every rank, with the
// profiler's summary (one table per rank), and keeps the names with the
// most host time.
func topRanges(records []profiler.Record) []topRow {
	s := profiler.NewSummary(profiler.WithSummaryTag("all"))
	s.Consume(records)
	type total struct {
		name         string
		ranks        map[int]bool
		count, devN  int
		host, device time.Duration
	}
	kinds := map[string]profiler.Kind{}
	for i := range records {
		if _, ok := kinds[records[i].Name]; !ok {
			kinds[records[i].Name] = records[i].Kind
		}
	}
	var hostAll, devAll time.Duration
	byName := map[string]*total{}
	for _, g := range s.Groups() {
		hostAll += g.HostTotal
		devAll += g.DeviceTotal
		for _, n := range g.Names {
			t := byName[n.Name]
			if t == nil {
				t = &total{name: n.Name, ranks: map[int]bool{}}
				byName[n.Name] = t
			}
			t.ranks[g.Rank] = true
			t.count += n.Count
			t.devN += n.DeviceCount
			t.host += n.HostTotal
			t.device += n.DeviceTotal
		}
	}
	list := make([]*total, 0, len(byName))
	for _, t := range byName {
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *total) int {
		if c := cmp.Compare(b.host, a.host); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	pct := func(d, all time.Duration) string {
		if all <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", 100*float64(d)/float64(all))
	}
	us := func(d time.Duration, n int) string {
		if n == 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(d)/float64(n)/1e3, 'f', 3, 64)
	}
	var out []topRow
	for _, t := range list[:min(len(list), topTimes)] {
		row := topRow{Name: t.name, Kind: kinds[t.name].String(), Ranks: strconv.Itoa(len(t.ranks)), Count: strconv.Itoa(t.count),
			Host: msText(t.host), HostPct: pct(t.host, hostAll), Device: "-", DevicePct: "-", AvgHost: us(t.host, t.count), AvgDevice: us(t.device, t.devN)}
		if t.devN > 0 {
			row.Device, row.DevicePct = msText(t.device), pct(t.device, devAll)
		}
		out = append(out, row)
	}
	return out
}

// merged is a run of intervals drawn as one box: its extent, how many
// there were and the time they covered.
type merged struct {
	iv   profiler.Interval
	n    int
	busy time.Duration
}

// mergeNear merges intervals (sorted here by start) whose gap to the run
// before is under gap.
func mergeNear(ivs []profiler.Interval, gap time.Duration) []merged {
	slices.SortFunc(ivs, func(a, b profiler.Interval) int { return cmp.Compare(a.Start, b.Start) })
	var out []merged
	var covered time.Duration // the run's busy time so far, its overlaps counted once
	for _, iv := range ivs {
		// The gap in float64: times far apart (a bogus timestamp) would
		// overflow a time.Duration's difference to one under gap.
		if n := len(out); n > 0 && diff(iv.Start, out[n-1].iv.End) < float64(gap) {
			m := &out[n-1]
			if iv.End > m.iv.End {
				covered += iv.End - max(iv.Start, m.iv.End)
				m.iv.End = iv.End
			}
			m.n++
			m.busy = covered
			continue
		}
		covered = iv.Len()
		out = append(out, merged{iv: iv, n: 1, busy: covered})
	}
	return out
}

// groupText names a collective's group in a hover title: with its
// communicator where communicators share a name.
func groupText(c *profiler.Collective) string {
	if c.GroupID == 0 {
		return c.Group
	}
	return fmt.Sprintf("%s [communicator %016x]", c.Group, c.GroupID)
}
