package htmlreport_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// wrapped is twoStages with each rank's work (its forwards, backwards,
// their kernels and its transfers) inside one more device-timed range,
// "schedule" (no phase: neither forward, backward nor optimizer work),
// 0–65 ms on the device: every action is then DeviceNested, as the
// recorder marks a range started while a device-timed one is open.
func wrapped() []profiler.Record {
	recs := twoStages()
	const outer = 1000
	for i := range recs {
		r := &recs[i]
		if r.Depth == 0 {
			continue
		}
		r.Depth++
		r.DeviceNested = r.HasDevice
		if r.Parent == 1 {
			r.Parent = outer
		}
	}
	for rank := range 2 {
		recs = append(recs, profiler.Record{ID: outer, Parent: 1, Depth: 1, Name: "schedule", Kind: profiler.KindDevice, Rank: rank, Stream: 1,
			Device:    runtime.Device{Type: runtime.CPU, Index: rank},
			Labels:    profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
			HostStart: 0, HostEnd: 65 * time.Millisecond, HasDevice: true, DeviceStart: 0, DeviceEnd: 65 * time.Millisecond})
	}
	return recs
}

// Forward and backward actions inside a device-timed range that is not
// work of its own are the step's blocks: the chart draws the 4 forwards
// and 4 backwards of twoStages at full lane height (10 ms of the 70 ms
// chart, 1100 pixels: 157 pixels each), not the kernels inside them, and
// shades the same bubble (rank 0 idles 20–40 ms, rank 1 0–10 and 50–60
// ms: 40 ms). Before, every action was left out as nested, and the whole
// span shaded as bubble.
func TestNestedActionsAreDrawn(t *testing.T) {
	page, st := writePage(t, htmlreport.Input{Records: wrapped()})
	if st.Forward != 4 || st.Backward != 4 || st.Transfers != 2 || st.Bubbles != 3 {
		t.Errorf("stats %+v, want 4 forward, 4 backward, 2 transfers, 3 bubbles", st)
	}
	for _, phase := range []string{"fwd", "bwd"} {
		blocks := rects(page, "blk", phase)
		if len(blocks) != 4 {
			t.Errorf("%d %s blocks, want 4", len(blocks), phase)
		}
		for _, b := range blocks {
			if w := b.num(t, "width"); math.Abs(w-10.0/70*1100) > 0.2 {
				t.Errorf("%s block %q %.1f pixels wide, want 10 ms of 70 on 1100 pixels", phase, b.title, w)
			}
			if h := b.num(t, "height"); h != 14 {
				t.Errorf("%s block %q %.1f pixels high, want a full lane (14)", phase, b.title, h)
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
	for _, want := range []string{
		"backward · rank 1 · step 0 · chunk 0 · microbatch 1 · 40.000–50.000 ms (10.000 ms)",
		"Recv from group rank 0 · 256 bytes",
		// The analysis: each stage idles 20 of the 60 ms span.
		"33.3% (20.000 ms)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The pages of the wrapped and the unwrapped records draw the same
	// blocks.
	flat, _ := writePage(t, htmlreport.Input{Records: twoStages()})
	for _, class := range []string{"fwd", "bwd"} {
		a, b := rects(page, "blk", class), rects(flat, "blk", class)
		for i := range min(len(a), len(b)) {
			if a[i].title != b[i].title || a[i].attr["x"] != b[i].attr["x"] || a[i].attr["y"] != b[i].attr["y"] {
				t.Errorf("%s block %d: wrapped %v %q, unwrapped %v %q", class, i, a[i].attr, a[i].title, b[i].attr, b[i].title)
			}
		}
	}
}

// An optimizer inside a device-timed range of no phase is drawn; its own
// kernel inside it, labelled alike, is not drawn again.
func TestNestedOptimizerIsDrawn(t *testing.T) {
	recs := wrapped()
	for rank := range 2 {
		l := profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Optimizer}
		recs = append(recs,
			profiler.Record{ID: 2000, Parent: 1000, Depth: 2, Name: "optimizer", Kind: profiler.KindDevice, Rank: rank, Stream: 1, Labels: l,
				HostStart: 61 * time.Millisecond, HostEnd: 62 * time.Millisecond, HasDevice: true, DeviceNested: true, DeviceStart: 61 * time.Millisecond, DeviceEnd: 64 * time.Millisecond},
			profiler.Record{ID: 2001, Parent: 2000, Depth: 3, Name: "sgd", Kind: profiler.KindDevice, Rank: rank, Stream: 1, Labels: l,
				HostStart: 61 * time.Millisecond, HostEnd: 62 * time.Millisecond, HasDevice: true, DeviceNested: true, DeviceStart: 61 * time.Millisecond, DeviceEnd: 63 * time.Millisecond})
	}
	page, _ := writePage(t, htmlreport.Input{Records: recs})
	opt := rects(page, "opt")
	if len(opt) != 2 {
		t.Fatalf("%d optimizer boxes, want one per rank (2)", len(opt))
	}
	for _, o := range opt {
		if !strings.HasPrefix(o.title, "optimizer · rank ") || !strings.Contains(o.title, "61.000–64.000 ms (3.000 ms)") {
			t.Errorf("optimizer box titled %q, want the optimizer's 61–64 ms", o.title)
		}
	}
}

// Work inside another action with other labels — an outer forward of
// chunk 0 without a microbatch label holding one forward per microbatch —
// is drawn too: the outer one as its block, each inner one as a thinner
// bar inside it, none of them twice. Rank 0 of twoStages runs its two
// forwards at 0–10 and 10–20 ms; here an outer forward spans both, 0–20
// ms, and each inner one has its kernel inside it.
func TestActionsInsideAnotherActionAreDrawnInsideIt(t *testing.T) {
	page, st := writePage(t, htmlreport.Input{Records: insideAnother()})
	// Rank 0: the outer forward and its two microbatches; rank 1: its two.
	if st.Forward != 5 || st.Backward != 4 {
		t.Errorf("stats %+v, want 5 forward blocks (rank 0's outer one and its 2 inner ones, rank 1's 2) and 4 backward", st)
	}
	outerBlk := rects(page, "blk", "fwd", "nomb")
	if len(outerBlk) != 1 {
		t.Fatalf("%d forward blocks without a microbatch, want the outer one", len(outerBlk))
	}
	o := outerBlk[0]
	if w := o.num(t, "width"); math.Abs(w-20.0/70*1100) > 0.2 {
		t.Errorf("outer forward %.1f pixels wide, want 20 ms of 70 on 1100 pixels", w)
	}
	var inner []rect
	for _, mb := range []string{"m0", "m1"} {
		for _, b := range rects(page, "blk", "fwd", mb) {
			if strings.Contains(b.title, "rank 0 ") {
				inner = append(inner, b)
			}
		}
	}
	if len(inner) != 2 {
		t.Fatalf("%d of rank 0's microbatch forwards drawn, want 2", len(inner))
	}
	for _, b := range inner {
		x, y, w, h := b.num(t, "x"), b.num(t, "y"), b.num(t, "width"), b.num(t, "height")
		if math.Abs(w-10.0/70*1100) > 0.2 {
			t.Errorf("inner forward %q %.1f pixels wide, want 10 ms", b.title, w)
		}
		if x < o.num(t, "x")-0.05 || x+w > o.num(t, "x")+o.num(t, "width")+0.05 ||
			y <= o.num(t, "y") || y+h >= o.num(t, "y")+o.num(t, "height") || h <= 0 {
			t.Errorf("inner forward %q at x %.1f y %.1f, %.1f × %.1f: not inside the outer block %v", b.title, x, y, w, h, o.attr)
		}
	}
	// The bubble is unchanged: rank 0 idles 20–40 ms, rank 1 0–10 and 50–60.
	var shaded float64
	for _, b := range rects(page, "bubble") {
		shaded += b.num(t, "width")
	}
	if want := 40.0 / 70 * 1100; math.Abs(shaded-want) > 1 {
		t.Errorf("%.1f pixels shaded as bubble, want %.1f (40 ms)", shaded, want)
	}
}

// A collective issued inside a device-timed range is drawn, as are its
// neighbours: an all-reduce at 61–63 ms inside a device-timed
// "allreduce_grads" range of the communication phase, on each rank.
func TestNestedCollectiveIsDrawn(t *testing.T) {
	recs := twoStages()
	for rank := range 2 {
		l := profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Comm}
		recs = append(recs,
			profiler.Record{ID: 2000, Parent: 1, Depth: 1, Name: "allreduce_grads", Kind: profiler.KindDevice, Rank: rank, Stream: 1, Labels: l,
				HostStart: 60 * time.Millisecond, HostEnd: 61 * time.Millisecond, HasDevice: true, DeviceStart: 60 * time.Millisecond, DeviceEnd: 64 * time.Millisecond},
			profiler.Record{ID: 2001, Parent: 2000, Depth: 2, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank, Stream: 3, Labels: l,
				HostStart: 60 * time.Millisecond, HostEnd: 61 * time.Millisecond, HasDevice: true, DeviceNested: true, DeviceStart: 61 * time.Millisecond, DeviceEnd: 63 * time.Millisecond,
				Collective: profiler.Collective{Op: "AllReduce", Bytes: 1024, Group: "dp", GroupSize: 2, GroupRank: int32(rank), Peer: -1, Root: -1}})
	}
	page, st := writePage(t, htmlreport.Input{Records: recs})
	coll := rects(page, "xfer", "coll")
	if st.Transfers != 4 || len(coll) != 2 {
		t.Fatalf("%d transfers, %d collectives drawn; want 4 (2 sends and receives, 2 all-reduces), 2", st.Transfers, len(coll))
	}
	for _, c := range coll {
		if !strings.Contains(c.title, "AllReduce · 1024 bytes · group dp (2 ranks)") || !strings.Contains(c.title, "61.000–63.000 ms") {
			t.Errorf("collective titled %q", c.title)
		}
	}
}

// Where the enclosing range is not among the records (records dropped, or
// made by hand without parents), a nested action inside a drawn block
// with its labels is taken as that block's part, and one inside no such
// block is drawn: rank 0's forward of microbatch 0 (0–10 ms) gets a
// second kernel at 3–4 ms whose parent is missing, and a forward of
// microbatch 5 at 25–30 ms, nested in a range that is missing too.
func TestNestedActionWithoutItsParent(t *testing.T) {
	recs := twoStages()
	l := profiler.Labels{Step: 0, Stage: 0, Chunk: 0, Microbatch: 0, Phase: profiler.Forward}
	recs = append(recs,
		profiler.Record{ID: 3000, Parent: 2999, Depth: 2, Name: "<kernel>", Kind: profiler.KindDevice, Rank: 0, Stream: 1, Labels: l,
			HostStart: 3 * time.Millisecond, HostEnd: 4 * time.Millisecond, HasDevice: true, DeviceNested: true, DeviceStart: 3 * time.Millisecond, DeviceEnd: 4 * time.Millisecond})
	l.Microbatch = 5
	recs = append(recs,
		profiler.Record{ID: 3001, Parent: 2999, Depth: 2, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Stream: 1, Labels: l,
			HostStart: 25 * time.Millisecond, HostEnd: 26 * time.Millisecond, HasDevice: true, DeviceNested: true, DeviceStart: 25 * time.Millisecond, DeviceEnd: 30 * time.Millisecond})
	page, st := writePage(t, htmlreport.Input{Records: recs})
	if st.Forward != 5 || st.Backward != 4 {
		t.Errorf("stats %+v, want 5 forward (twoStages' 4 and microbatch 5's) and 4 backward", st)
	}
	if n := len(rects(page, "blk", "fwd", "m0")); n != 2 {
		t.Errorf("%d forward blocks of microbatch 0, want 2 (one a rank): the kernel is drawn again", n)
	}
	m5 := rects(page, "blk", "fwd", "m5")
	if len(m5) != 1 || !strings.Contains(m5[0].title, "25.000–30.000 ms") {
		t.Errorf("microbatch 5's forward: %v, want one block at 25–30 ms", m5)
	}
	// Rank 0 idles 20–25 and 30–40 ms now: 15 ms, rank 1 20 ms.
	var shaded float64
	for _, b := range rects(page, "bubble") {
		shaded += b.num(t, "width")
	}
	if want := 35.0 / 70 * 1100; math.Abs(shaded-want) > 1 {
		t.Errorf("%.1f pixels shaded as bubble, want %.1f (35 ms)", shaded, want)
	}
}

// insideAnother is twoStages with rank 0's two forwards (0–10 and 10–20
// ms, of chunk 0 and microbatches 0 and 1) inside an outer forward of
// chunk 0 without a microbatch label, 0–20 ms.
func insideAnother() []profiler.Record {
	recs := twoStages()
	const outer = 1000
	for i := range recs {
		r := &recs[i]
		if r.Rank != 0 || r.Depth == 0 || r.Phase != profiler.Forward || r.Kind != profiler.KindDevice {
			continue
		}
		r.Depth++
		r.DeviceNested = true
		if r.Parent == 1 {
			r.Parent = outer
		}
	}
	recs = append(recs, profiler.Record{ID: outer, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Stream: 1,
		Device:    runtime.Device{Type: runtime.CPU, Index: 0},
		Labels:    profiler.Labels{Step: 0, Stage: 0, Chunk: 0, Microbatch: profiler.None, Phase: profiler.Forward},
		HostStart: 0, HostEnd: 20 * time.Millisecond, HasDevice: true, DeviceStart: 0, DeviceEnd: 20 * time.Millisecond})
	return recs
}
