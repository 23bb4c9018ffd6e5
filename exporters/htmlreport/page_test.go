package htmlreport_test

import (
	"bytes"
	"html"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
)

// rect is an SVG rect of a page, read back from its markup: its
// attributes and its hover title, unescaped.
type rect struct {
	attr  map[string]string
	title string
}

var (
	rectRE = regexp.MustCompile(`<rect\s([^>]*)>(?:<title>([^<]*)</title>)?`)
	attrRE = regexp.MustCompile(`([a-zA-Z-]+)="([^"]*)"`)
)

// rects returns the rects of page whose class attribute has every one of
// classes.
func rects(page string, classes ...string) []rect {
	var out []rect
	for _, m := range rectRE.FindAllStringSubmatch(page, -1) {
		r := rect{attr: map[string]string{}, title: html.UnescapeString(m[2])}
		for _, a := range attrRE.FindAllStringSubmatch(m[1], -1) {
			r.attr[a[1]] = html.UnescapeString(a[2])
		}
		have := strings.Fields(r.attr["class"])
		ok := true
		for _, c := range classes {
			if !slices.Contains(have, c) {
				ok = false
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// num is a rect's numeric attribute.
func (r rect) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(r.attr[name], 64)
	if err != nil {
		t.Fatalf("rect %v: attribute %s: %v", r.attr, name, err)
	}
	return v
}

func writePage(t *testing.T, in htmlreport.Input) (string, htmlreport.Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, in)
	if err != nil {
		t.Fatal(err)
	}
	return buf.String(), st
}

// Forward and backward work without microbatch labels (a job that does
// not split its batch) is drawn, and not shaded as bubble: over the span
// 0–60 ms rank 0 idles 20–40 ms and rank 1 0–10 and 50–60 ms, 40 ms in
// all, on a chart of 70 ms (the step ranges) 1100 pixels wide.
func TestWorkWithoutMicrobatchIsDrawn(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		recs[i].Microbatch = profiler.None
	}
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	for _, phase := range []string{"fwd", "bwd"} {
		blocks := rects(page, "blk", phase)
		if len(blocks) != 4 {
			t.Errorf("%d %s blocks, want 4", len(blocks), phase)
		}
		for _, b := range blocks {
			if w := b.num(t, "width"); w < 100 {
				t.Errorf("%s block %q %.1f pixels wide, want 10 ms of 70 on 1100 pixels", phase, b.title, w)
			}
			if strings.Contains(b.title, "-1") {
				t.Errorf("%s block titled %q: a missing label shown as a number", phase, b.title)
			}
		}
	}
	var shaded float64
	for _, b := range rects(page, "bubble") {
		shaded += b.num(t, "width")
	}
	if want := 40.0 / 70 * 1100; math.Abs(shaded-want) > 1 {
		t.Errorf("%.1f pixels shaded as bubble, want %.1f (40 ms)", shaded, want)
	}
}

// Work with an inverted device interval (its end before its start)
// computed nothing, as the analysis counts it: the bubble around it is
// shaded as one, not as overlapping pieces. Rank 0 idles 20–40 ms; a
// forward there timed 25 ms to 22 ms leaves that so.
func TestInvertedWorkLeavesTheBubble(t *testing.T) {
	recs := twoStages()
	i := slices.IndexFunc(recs, func(r profiler.Record) bool { return r.Rank == 0 && r.Name == "forward" })
	inverted := recs[i]
	inverted.ID = 100
	inverted.Microbatch = 7
	inverted.DeviceStart, inverted.DeviceEnd = 25*time.Millisecond, 22*time.Millisecond
	recs = append(recs, inverted)
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	bubbles := rects(page, "bubble")
	if len(bubbles) != 3 {
		t.Errorf("%d bubbles, want 3", len(bubbles))
	}
	var shaded float64
	for i, a := range bubbles {
		shaded += a.num(t, "width")
		for _, b := range bubbles[i+1:] {
			if a.attr["y"] == b.attr["y"] && a.num(t, "x") < b.num(t, "x")+b.num(t, "width") && b.num(t, "x") < a.num(t, "x")+a.num(t, "width") {
				t.Errorf("bubbles %q and %q overlap", a.title, b.title)
			}
		}
	}
	if want := 40.0 / 70 * 1100; math.Abs(shaded-want) > 1 {
		t.Errorf("%.1f pixels shaded as bubble, want %.1f (40 ms)", shaded, want)
	}
}

// The time axis of a step a few microseconds long: each tick's label is
// the time at its place, and no two ticks read the same. The step range
// is 0–3 µs, the chart 1100 pixels from x = 70.
func TestTickLabelsOfAShortStep(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: profiler.StepName, Labels: profiler.Labels{Step: 0, Stage: 0, Chunk: profiler.None, Microbatch: profiler.None}, HostEnd: 3000},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: profiler.Labels{Step: 0, Stage: 0, Chunk: 0, Microbatch: 0, Phase: profiler.Forward},
			HostStart: 100, HostEnd: 200, HasDevice: true, DeviceStart: 100, DeviceEnd: 2000},
	}
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	labels := regexp.MustCompile(`<text x="([0-9.]+)" y="[0-9.]+" text-anchor="middle">([^<]*) ms</text>`).FindAllStringSubmatch(page, -1)
	if len(labels) < 3 {
		t.Fatalf("%d tick labels, want several", len(labels))
	}
	seen := map[string]bool{}
	for _, m := range labels {
		x, _ := strconv.ParseFloat(m[1], 64)
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("tick label %q: %v", m[2], err)
		}
		if seen[m[2]] {
			t.Errorf("two ticks read %s ms", m[2])
		}
		seen[m[2]] = true
		if at := (x - 70) / 1100 * 3000; math.Abs(at-v*1e6) > 3000.0/1100 {
			t.Errorf("tick at x = %.1f (%.0f ns) reads %s ms", x, at, m[2])
		}
	}
}
