package htmlreport_test

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
)

// onChart fails for every drawn rect of page that is not within the
// chart's 1100 pixels from x = 70, or is of negative width; a sliver of
// no length drawn half a pixel wide at the chart's end may end half a
// pixel past it (the page leaves a margin of 10).
func onChart(t *testing.T, page string) {
	t.Helper()
	for _, r := range rects(page) {
		if _, ok := r.attr["width"]; !ok || r.attr["class"] == "" {
			continue // the hatch pattern's
		}
		x, w := r.num(t, "x"), r.num(t, "width")
		if w < 0 || x < 70-0.05 || x+w > 70+1100+0.5+0.05 {
			t.Errorf("rect %q (%s) at x %.1f, %.1f wide: off the chart", r.title, r.attr["class"], x, w)
		}
	}
}

// Work and transfers with inverted device intervals whose start lies past
// everything else — rank 0's forward of microbatch 1 timed 200 ms to
// 15 ms, its Send 300 ms to 10 ms — are drawn at their start, so the axis
// runs to 300 ms: the forward's sliver at 70 + 200/300·1100 = 803.3, the
// Send's at the chart's end, 70 + 1100 = 1170. Before, the axis ran to the step ranges' 70 ms and both
// were drawn thousands of pixels past the chart's right edge.
func TestInvertedWorkStaysOnTheChart(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Rank == 0 && r.Name == "forward" && r.Microbatch == 1:
			r.DeviceStart, r.DeviceEnd = 200*time.Millisecond, 15*time.Millisecond
		case r.Rank == 0 && r.Name == "Send":
			r.DeviceStart, r.DeviceEnd = 300*time.Millisecond, 10*time.Millisecond
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Forward != 4 || st.Backward != 4 || st.Transfers != 2 {
		t.Errorf("stats %+v, want 4 forward, 4 backward, 2 transfers", st)
	}
	onChart(t, page)
	for _, b := range rects(page, "blk", "fwd") {
		if strings.HasPrefix(b.title, "forward · rank 0 · step 0 · chunk 0 · microbatch 1 ·") {
			if x := b.num(t, "x"); math.Abs(x-(70+200.0/300*1100)) > 0.1 {
				t.Errorf("inverted forward at x %.1f, want %.1f (its start, 200 ms of 300)", x, 70+200.0/300*1100)
			}
		}
	}
	for _, x := range rects(page, "xfer") {
		if strings.HasPrefix(x.title, "Send") {
			if at := x.num(t, "x"); math.Abs(at-1170) > 0.1 {
				t.Errorf("inverted Send at x %.1f, want 1170.0 (its start, the axis's end)", at)
			}
		}
	}
}

// A kernel of rank 0's backward of microbatch 1 (50–60 ms) still running
// on the device until 100 ms, past the step ranges' 70 ms, is part of
// that backward and stretches the step's span (its first to last
// computation) to 0–100 ms: the analysis counts rank 0 busy 0–20 and
// 40–100 ms, a bubble of 20 ms (20–40), and rank 1 busy 10–50 ms, a
// bubble of 10 + 50 = 60 ms. The shading says the same, on a chart of
// 100 ms (1100 pixels): 220 pixels on rank 0, 660 on rank 1, all within
// the chart. Before, the chart ran to 70 ms and the bubbles to 100 ms,
// past its right edge, and rank 0 was shaded idle 60–100 ms while its
// kernel ran.
func TestBubbleOfWorkPastTheStepRanges(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		if r.Rank == 0 && r.Name == "<kernel>" && r.Phase == profiler.Backward && r.Microbatch == 1 {
			r.DeviceEnd = 100 * time.Millisecond
		}
	}
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	onChart(t, page)
	shaded := map[string]float64{}
	for _, b := range rects(page, "bubble") {
		shaded[b.attr["y"]] += b.num(t, "width")
	}
	// Rank 0's row starts below the axis labels, at y 16; rank 1's 10
	// pixels below rank 0's chunk lane (16) and transfer lane (7), at 49.
	want := map[string]float64{"16.0": 20.0 / 100 * 1100, "49.0": 60.0 / 100 * 1100}
	if len(shaded) != len(want) {
		t.Errorf("bubbles on rows at y %v, want %v", shaded, want)
	}
	for y, w := range want {
		if math.Abs(shaded[y]-w) > 1 {
			t.Errorf("row at y %s: %.1f pixels shaded, want %.1f", y, shaded[y], w)
		}
	}
	for _, s := range []string{"bubble 20.000 ms", "bubble 60.000 ms"} {
		if !strings.Contains(page, s) {
			t.Errorf("the analysis's %q is not on the page", s)
		}
	}
}

// A wrapped pipeline's kernels far apart — one at 150 years before the
// epoch, one 150 years after (a bogus timestamp), 1 ms each — are two
// boxes, at the chart's two ends: 300 years apart is far more than a
// pixel. Before, their distance overflowed a time.Duration to a negative
// one, under a pixel, and they were merged into one box across the chart.
func TestKernelsFarApartAreNotMerged(t *testing.T) {
	const year = 365 * 24 * time.Hour
	labels := profiler.Labels{Step: 0, Stage: 0, Chunk: profiler.None, Microbatch: profiler.None}
	recs := []profiler.Record{{ID: 1, Name: profiler.StepName, Labels: labels, HostEnd: time.Second}}
	for _, at := range []time.Duration{-150 * year, 150 * year} {
		recs = append(recs, profiler.Record{ID: uint64(len(recs) + 1), Name: "gemm", Kind: profiler.KindKernel, Labels: labels,
			HostStart: at, HostEnd: at, HasDevice: true, DeviceStart: at, DeviceEnd: at + time.Millisecond})
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Kernels != 2 || st.KernelBoxes != 2 {
		t.Errorf("stats %+v, want 2 kernels in 2 boxes", st)
	}
	boxes := rects(page, "kern")
	if len(boxes) != 2 {
		t.Fatalf("%d kernel boxes drawn, want 2", len(boxes))
	}
	for _, b := range boxes {
		if w := b.num(t, "width"); w > 1 {
			t.Errorf("kernel box %q %.1f pixels wide, want a sliver (1 ms of 300 years)", b.title, w)
		}
	}
	onChart(t, page)
}

// A step's heading gives the time from the first rank's step start to the
// last one's end: twoStages' step ranges run 0–70 ms on both ranks, so 70
// ms, though rank 1's Recv is still running on the device until 80 ms (a
// device's work trails its host's) and the chart runs to 80 ms to draw
// it. Before, the heading gave the chart's 80 ms as the step ranges'.
func TestHeadingGivesTheStepRanges(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		if r := &recs[i]; r.Name == "Recv" {
			r.DeviceEnd = 80 * time.Millisecond
		}
	}
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	onChart(t, page)
	if want := "<h3>step 0 · 70.000 ms from the first rank&#39;s step start to the last one&#39;s end"; !strings.Contains(page, want) {
		i := strings.Index(page, "<h3>")
		t.Errorf("the heading is not %q: %s", want, page[i:i+strings.Index(page[i:], "</h3>")])
	}
}

// A wrapped pipeline's rank whose kernels carry their work's phase but no
// stage (its pipeline communicator not seen) computes all the same, as the
// analysis counts it. Step ranges span 0–100 ms (11 pixels a
// millisecond). Rank 0 (stage 0) runs a forward kernel at 10–20 ms and a
// backward one at 50–62 ms; rank 1 (no stage) a forward at 16–19 and a
// backward at 30–35. The span is 10–62 ms: rank 0 idles 20–50 ms (one
// bubble, 330 pixels), rank 1 10–16, 19–30 and 35–62 ms (three, 44 ms:
// 484 pixels). Before, rank 1's whole span was shaded, its blocks on top.
func TestStagelessKernelsAreNoBubble(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	add := func(r profiler.Record) {
		r.ID = uint64(len(recs) + 1)
		recs = append(recs, r)
	}
	stageOf := []int16{0, profiler.None}
	for rank := range 2 {
		add(profiler.Record{Name: profiler.StepName, Rank: rank, Labels: profiler.Labels{Step: 0, Stage: stageOf[rank], Chunk: profiler.None, Microbatch: profiler.None},
			HostEnd: ms(100)})
	}
	kernel := func(rank int, ph profiler.Phase, from, to float64) {
		add(profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: 7,
			Labels:    profiler.Labels{Step: 0, Stage: stageOf[rank], Chunk: 0, Microbatch: 0, Phase: ph},
			HostStart: ms(from), HostEnd: ms(from), HasDevice: true, DeviceStart: ms(from), DeviceEnd: ms(to)})
	}
	kernel(0, profiler.Forward, 10, 20)
	kernel(0, profiler.Backward, 50, 62)
	kernel(1, profiler.Forward, 16, 19)
	kernel(1, profiler.Backward, 30, 35)
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Forward != 2 || st.Backward != 2 || st.Bubbles != 4 {
		t.Errorf("stats %+v, want 2 forward, 2 backward blocks and 4 bubbles", st)
	}
	// Rank 0's row at y 16, rank 1's 10 pixels below its chunk lane (16).
	shaded := map[string]float64{}
	for _, b := range rects(page, "bubble") {
		shaded[b.attr["y"]] += b.num(t, "width")
	}
	for y, want := range map[string]float64{"16.0": 30 * 11, "42.0": 44 * 11} {
		if math.Abs(shaded[y]-want) > 1 {
			t.Errorf("row at y %s: %.1f pixels shaded, want %.1f", y, shaded[y], want)
		}
	}
	if !strings.Contains(page, "bubble 44.000 ms") {
		t.Error("the analysis does not give rank 1 a bubble of 44 ms")
	}
}

// Write adds its own notes (here that the colours of microbatches up to
// 100,000 repeat) to the page, not to the caller's slice: a note the
// caller keeps past the end of Input.Notes, in the same array, is left as
// it was. Before, the page's note was appended into it.
func TestWriteLeavesTheCallersNotes(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		if recs[i].Microbatch == 1 {
			recs[i].Microbatch = 100000
		}
	}
	notes := []string{"clocks aligned", "kept for later"}
	page, _ := writePage(t, htmlreport.Input{Records: recs, Notes: notes[:1]})
	if notes[1] != "kept for later" {
		t.Errorf("the caller's note past Input.Notes was overwritten with %q", notes[1])
	}
	for _, want := range []string{"clocks aligned", "colours repeat every 64"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks the note %q", want)
		}
	}
}

// A name that is not UTF-8 — a run directory's (Input.Title: a Linux file
// name is any bytes), a communicator's group — shows as U+FFFD: the page
// says it is UTF-8 and is, on a step page and on one of operations
// without steps. Before, the bytes were copied into the page as they were.
func TestNamesNotUTF8(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		if recs[i].Kind == profiler.KindP2P {
			recs[i].Collective.Group = "pp\xfe0"
		}
	}
	var ops []profiler.Record
	for i := range recs {
		if recs[i].Kind == profiler.KindP2P {
			r := recs[i]
			r.Labels = profiler.NoLabels
			ops = append(ops, r)
		}
	}
	for _, in := range []htmlreport.Input{{Title: "run\xff1", Records: recs}, {Title: "run\xff1", Records: ops}} {
		page, _ := writePage(t, in)
		if !utf8.ValidString(page) {
			t.Errorf("the page (%d bytes) is not UTF-8", len(page))
		}
		for _, want := range []string{"run\uFFFD1", "group pp\uFFFD0"} {
			if !strings.Contains(page, want) {
				t.Errorf("the page lacks %q", want)
			}
		}
	}
}

// A step no rank has the step range of (its ends never arrived) is drawn,
// and its heading does not give the blocks' time as the step ranges':
// twoStages' blocks run 0–60 ms.
func TestHeadingWithoutStepRanges(t *testing.T) {
	var recs []profiler.Record
	for _, r := range twoStages() {
		if r.Name != profiler.StepName && r.Kind != profiler.KindP2P {
			recs = append(recs, r)
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Steps != 1 || st.Forward != 4 || st.Backward != 4 {
		t.Errorf("stats %+v, want the step's 4 forward and 4 backward blocks", st)
	}
	if strings.Contains(page, "step start") || !strings.Contains(page, "<h3>step 0 · no step range: 60.000 ms drawn") {
		i := strings.Index(page, "<h3>")
		t.Errorf("heading %s", page[i:i+max(strings.Index(page[i:], "</h3>"), 0)])
	}
}
