package htmlreport_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
)

// Times far apart — a step range from 150 years before the epoch, a
// forward ending 150 years after it (a bogus timestamp) — overflow a
// time.Duration's difference; the chart still lays every rect out within
// its 1100 pixels from x = 70, none of negative width. Before, the
// range's length overflowed to a negative scale: rects at x ≈ 1e22 and of
// negative width, which a browser refuses with a console error.
func TestTimesFarApartStayOnTheChart(t *testing.T) {
	const year = 365 * 24 * time.Hour
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		if r.Rank == 1 && r.Name == profiler.StepName {
			r.HostStart = -150 * year
		}
		if r.Rank == 0 && r.Name == "forward" && r.Microbatch == 1 {
			r.DeviceEnd = 150 * year
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Steps != 1 || st.Forward != 4 || st.Backward != 4 {
		t.Errorf("stats %+v, want the step's 4 forward and 4 backward blocks", st)
	}
	n := 0
	for _, r := range rects(page) {
		if _, ok := r.attr["width"]; !ok || r.attr["class"] == "" {
			continue // the hatch pattern's
		}
		n++
		x, w := r.num(t, "x"), r.num(t, "width")
		if w < 0 || x < 70-0.05 || x+w > 70+1100+0.05 {
			t.Errorf("rect %q (%s) at x %.1f, %.1f wide: off the chart", r.title, r.attr["class"], x, w)
		}
	}
	if n < 10 {
		t.Errorf("%d rects checked, want the step's", n)
	}
	// The step ranges' 150 years and 70 ms, in milliseconds, as the
	// heading's span; the forward's end 300 years from the chart's start.
	if want := fmt.Sprintf("step 0 · %.0f.000 ms from", 150*365*24*3600*1e3+70); !strings.Contains(page, want) {
		t.Errorf("the page does not give the span as %q", want)
	}
	if want := fmt.Sprintf("–%.0f.000 ms (", 300*365*24*3600*1e3); !strings.Contains(page, want) {
		t.Errorf("the page does not give the forward's end as %q", want)
	}
}

// Transfers that overlap — a group of 1000 sends (on rank 0) and receives
// (on rank 1) posted together and timed on the host only, all ending at
// the group's end — get a bounded number of lanes: the chart does not
// grow 7 pixels per transfer (before, 1000 lanes made each rank's row
// 7,000 pixels high), and each is drawn.
func TestOverlappingTransfersGetBoundedLanes(t *testing.T) {
	recs := twoStages()
	for k := range 1000 {
		start := 20*time.Millisecond + time.Duration(k)*time.Microsecond
		for rank := range 2 {
			op, peer := "Send", int32(1)
			if rank == 1 {
				op, peer = "Recv", 0
			}
			recs = append(recs, profiler.Record{ID: uint64(5000 + k), Parent: 1, Depth: 1, Name: op, Kind: profiler.KindP2P, Rank: rank,
				Labels:    profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
				HostStart: start, HostEnd: 30 * time.Millisecond,
				Collective: profiler.Collective{Op: op, Bytes: 64, Peer: peer, Root: -1, Group: "a2a", GroupSize: 2, GroupRank: int32(rank), Seq: uint64(k)}})
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Steps != 1 || st.Transfers != 2002 || len(rects(page, "xfer")) != 2002 {
		t.Errorf("%d steps, %d transfers counted, %d drawn; want 1 step, 2002 transfers", st.Steps, st.Transfers, len(rects(page, "xfer")))
	}
	m := regexp.MustCompile(`<svg class="gantt" width="\d+" height="(\d+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no chart")
	}
	// Two ranks of one chunk lane (16 pixels) and transfer lanes of 7,
	// as many as the bound allows: well under a hundred.
	if h, _ := strconv.Atoi(m[1]); h > 16*2+7*100 {
		t.Errorf("chart %d pixels high for 2000 overlapping transfers", h)
	}
	for _, x := range rects(page, "xfer") {
		if y := x.num(t, "y"); y < 0 || y > 16*2+7*100 {
			t.Errorf("transfer %q at y %.1f: off the chart", x.title, y)
			break
		}
	}
}

// A run's operations without steps whose starts tie — 1000 all-reduces of
// 2 ranks timed on the host only, all at 5–6 ms — make windows of a bounded
// number of operations, each drawn once. Before, each of the three
// windows drew every operation starting within its (one-instant) time
// range: all 2000, three times over.
func TestTiedOperationsAreDrawnOnce(t *testing.T) {
	var recs []profiler.Record
	for k := range 1000 {
		for r := range 2 {
			recs = append(recs, profiler.Record{ID: uint64(k + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
				HostStart: 5 * time.Millisecond, HostEnd: 6 * time.Millisecond,
				Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 2, GroupRank: int32(r), Peer: -1, Root: -1, Seq: uint64(k)}})
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	ops := rects(page, "xfer")
	if st.Transfers != len(ops) {
		t.Errorf("%d transfers counted, %d drawn", st.Transfers, len(ops))
	}
	if st.Windows < 1 || len(ops) > 3*2*64 {
		t.Errorf("%d windows drawing %d operations, want at most 3 of at most 128", st.Windows, len(ops))
	}
	seen := map[string]bool{}
	for _, o := range ops {
		if seen[o.title] {
			t.Errorf("operation %q drawn twice", o.title)
			break
		}
		seen[o.title] = true
	}
}

// Names come from the traced program (range names, NCCL operations,
// groups) and the run's directory: every one is text on the page, never
// markup or script. Each place a name shows is checked: the title, the
// notes, the top ranges table and the hover titles of blocks, optimizer
// boxes and transfers.
func TestNamesCannotInjectMarkup(t *testing.T) {
	const evil = `</title><script>alert(1)</script><img src=x onerror="alert(2)">'"&amp;]]><!--`
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Kind == profiler.KindP2P:
			r.Name, r.Collective.Op, r.Collective.Group = evil, evil, evil
		case r.Name == "<kernel>":
			r.Name = evil + " kernel"
		}
	}
	for rank := range 2 {
		recs = append(recs, profiler.Record{ID: 900, Parent: 1, Depth: 1, Name: evil + " optimizer", Kind: profiler.KindDevice, Rank: rank,
			Labels:    profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Optimizer},
			HostStart: 60 * time.Millisecond, HostEnd: 61 * time.Millisecond, HasDevice: true, DeviceStart: 60 * time.Millisecond, DeviceEnd: 62 * time.Millisecond})
	}
	page, _ := writePage(t, htmlreport.Input{Title: evil, Covers: evil, Notes: []string{evil}, Records: recs})
	if n := strings.Count(strings.ToLower(page), "<script"); n != 1 {
		t.Errorf("%d script elements, want the page's own one", n)
	}
	for _, bad := range []string{"<img", `onerror="`, "<!--", "</title><script", "<script>alert"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q from a name", bad)
		}
	}
	// The names are there, as text: the optimizer's hover title and the
	// transfers' read back as the name itself.
	found := 0
	for _, r := range rects(page) {
		if strings.Contains(r.title, evil) {
			found++
		}
	}
	if found < 4 { // 2 optimizer boxes, a Send, a Recv
		t.Errorf("%d hover titles hold the name as text, want at least 4", found)
	}
	if !strings.Contains(page, "<td class=\"name\">&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the top ranges table does not show the name as text")
	}
}

// A forward without a chunk label is drawn on the first lane, and its
// hover title does not show the missing label as a number.
func TestMissingChunkIsNotShownAsANumber(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		recs[i].Chunk = profiler.None
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Forward != 4 || st.Backward != 4 {
		t.Errorf("stats %+v, want 4 forward and 4 backward", st)
	}
	for _, b := range rects(page, "blk") {
		if strings.Contains(b.title, "-1") {
			t.Errorf("block titled %q: a missing label shown as a number", b.title)
		}
	}
}

// A step one rank has no records of still draws the other's row, and says
// which rank is missing.
func TestRankMissingFromAStep(t *testing.T) {
	recs := twoStages()
	// Step 1: rank 0 alone, 100–160 ms.
	for _, r := range twoStages() {
		if r.Rank != 0 {
			continue
		}
		r.Step = 1
		r.HostStart += 100 * time.Millisecond
		r.HostEnd += 100 * time.Millisecond
		if r.HasDevice {
			r.DeviceStart += 100 * time.Millisecond
			r.DeviceEnd += 100 * time.Millisecond
		}
		r.ID += 100
		if r.Parent != 0 {
			r.Parent += 100
		}
		recs = append(recs, r)
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Steps != 2 || st.Forward != 4+2 || st.Backward != 4+2 {
		t.Errorf("stats %+v, want 2 steps, 6 forward and 6 backward blocks", st)
	}
	if !strings.Contains(page, "no records of rank 1 in this step") {
		t.Error("the page does not say rank 1 is missing from step 1")
	}
}

// Work all at one instant — every range of a step, or every operation of
// a run without steps, of no length at the same time (a coarse clock) —
// is drawn, not left out for want of a time range: a chart of a
// nanosecond. Before, such a step or window had no chart and its blocks
// were silently missing.
func TestWorkOfOneInstantIsDrawn(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		r.HostStart, r.HostEnd = 5*time.Millisecond, 5*time.Millisecond
		if r.HasDevice {
			r.DeviceStart, r.DeviceEnd = 5*time.Millisecond, 5*time.Millisecond
		}
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Steps != 1 || st.Forward != 4 || st.Backward != 4 || st.Transfers != 2 {
		t.Errorf("stats %+v, want 1 step, 4 forward, 4 backward, 2 transfers", st)
	}
	for _, b := range rects(page, "blk") {
		if w := b.num(t, "width"); w <= 0 {
			t.Errorf("block %q %.1f pixels wide: the browser draws nothing", b.title, w)
		}
	}

	var ops []profiler.Record
	for k := range 10 {
		for r := range 2 {
			ops = append(ops, profiler.Record{ID: uint64(k + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
				HostStart: 5 * time.Millisecond, HostEnd: 5 * time.Millisecond,
				Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 2, GroupRank: int32(r), Peer: -1, Root: -1, Seq: uint64(k)}})
		}
	}
	page, st = writePage(t, htmlreport.Input{Records: ops})
	if st.Windows != 1 || st.Transfers != 20 || len(rects(page, "xfer")) != 20 {
		t.Errorf("stats %+v, %d drawn; want 1 window of 20 operations", st, len(rects(page, "xfer")))
	}
}

// Times on a clock of the Unix epoch (an imported trace's: about 1.8e18
// ns, beyond what a float64 holds to the nanosecond) lay the chart out as
// the same times near 0 do: every rect at the same place, with the same
// hover title — twoStages, and a step of 3 µs whose forward runs 100–2000
// ns (on its chart a nanosecond is a third of a pixel).
func TestTimesOfTheUnixEpoch(t *testing.T) {
	const at = 1_764_000_000_123_456_789 * time.Nanosecond // 2025-11-24, and some
	short := []profiler.Record{
		{ID: 1, Name: profiler.StepName, Labels: profiler.Labels{Step: 0, Stage: 0, Chunk: profiler.None, Microbatch: profiler.None}, HostEnd: 3000},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: profiler.Labels{Step: 0, Stage: 0, Chunk: 0, Microbatch: 0, Phase: profiler.Forward},
			HostStart: 100, HostEnd: 200, HasDevice: true, DeviceStart: 100, DeviceEnd: 2000},
	}
	for _, near := range [][]profiler.Record{twoStages(), short} {
		far := slices.Clone(near)
		for i := range far {
			r := &far[i]
			r.HostStart += at
			r.HostEnd += at
			if r.HasDevice {
				r.DeviceStart += at
				r.DeviceEnd += at
			}
		}
		a, _ := writePage(t, htmlreport.Input{Records: near})
		b, _ := writePage(t, htmlreport.Input{Records: far})
		ra, rb := rects(a), rects(b)
		if len(ra) != len(rb) || len(ra) < 4 {
			t.Fatalf("%d rects near 0, %d on the epoch's clock", len(ra), len(rb))
		}
		for i := range ra {
			if ra[i].title != rb[i].title || fmt.Sprint(ra[i].attr) != fmt.Sprint(rb[i].attr) {
				t.Errorf("rect %d: near 0 %v %q, on the epoch's clock %v %q", i, ra[i].attr, ra[i].title, rb[i].attr, rb[i].title)
			}
		}
	}
}
