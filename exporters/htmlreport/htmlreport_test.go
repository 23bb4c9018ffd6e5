package htmlreport_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// twoStages is one step of a two-stage pipeline, times in milliseconds:
// rank 0 runs F0 F1 … B0 B1 at 0–20 and 40–60, rank 1 F0 F1 B0 B1 at
// 10–50; so over the span 0–60 rank 0 idles 20–40 and rank 1 0–10 and
// 50–60.
func twoStages() []profiler.Record {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	id := map[int]uint64{}
	add := func(r profiler.Record) {
		id[r.Rank]++
		r.ID = id[r.Rank]
		r.Device = runtime.Device{Type: runtime.CPU, Index: r.Rank}
		recs = append(recs, r)
	}
	for rank := range 2 {
		add(profiler.Record{Name: profiler.StepName, Rank: rank, Labels: profiler.Labels{Step: 0, Stage: int16(rank), Chunk: -1, Microbatch: -1},
			HostStart: 0, HostEnd: ms(70)})
	}
	action := func(rank int, ph profiler.Phase, mb int32, start float64) {
		l := profiler.Labels{Step: 0, Stage: int16(rank), Chunk: 0, Microbatch: mb, Phase: ph}
		name := "forward"
		if ph == profiler.Backward {
			name = "backward"
		}
		add(profiler.Record{Parent: 1, Depth: 1, Name: name, Kind: profiler.KindDevice, Rank: rank, Stream: 1, Labels: l,
			HostStart: ms(start), HostEnd: ms(start + 1), HasDevice: true, DeviceStart: ms(start), DeviceEnd: ms(start + 10)})
		// A kernel inside the action, device-timed too: not a block.
		add(profiler.Record{Parent: id[rank], Depth: 2, Name: "<kernel>", Kind: profiler.KindDevice, Rank: rank, Stream: 1, Labels: l,
			HostStart: ms(start), HostEnd: ms(start + 0.5), HasDevice: true, DeviceNested: true, DeviceStart: ms(start + 1), DeviceEnd: ms(start + 2)})
	}
	action(0, profiler.Forward, 0, 0)
	action(0, profiler.Forward, 1, 10)
	action(0, profiler.Backward, 0, 40)
	action(0, profiler.Backward, 1, 50)
	action(1, profiler.Forward, 0, 10)
	action(1, profiler.Forward, 1, 20)
	action(1, profiler.Backward, 0, 30)
	action(1, profiler.Backward, 1, 40)
	p2p := func(rank int, op string, peer int32) profiler.Collective {
		return profiler.Collective{Op: op, Bytes: 256, Peer: peer, Root: -1, Group: "pp0", GroupSize: 2, GroupRank: int32(rank)}
	}
	l := profiler.Labels{Step: 0, Stage: 0, Chunk: 0, Microbatch: 0, Phase: profiler.Forward}
	add(profiler.Record{Parent: 1, Depth: 1, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Stream: 2, Labels: l, Collective: p2p(0, "Send", 1),
		HostStart: ms(9), HostEnd: ms(9.5), HasDevice: true, DeviceStart: ms(10), DeviceEnd: ms(10.5)})
	l.Stage = 1
	add(profiler.Record{Parent: 1, Depth: 1, Name: "Recv", Kind: profiler.KindP2P, Rank: 1, Stream: 2, Labels: l, Collective: p2p(1, "Recv", 0),
		HostStart: ms(1), HostEnd: ms(1.5), HasDevice: true, DeviceStart: ms(2), DeviceEnd: ms(10.5)})
	return recs
}

func TestWrite(t *testing.T) {
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, htmlreport.Input{Title: "run <1>", Covers: "steps 0", Records: twoStages()})
	if err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if st.Steps != 1 || st.Forward != 4 || st.Backward != 4 || st.Transfers != 2 || st.Bubbles != 3 {
		t.Errorf("stats %+v, want 1 step, 4 forward, 4 backward, 2 transfers, 3 bubbles", st)
	}
	for class, want := range map[string]int{`class="blk fwd m`: 4, `class="blk bwd m`: 4, `class="xfer p2p"`: 2, `class="bubble"`: 3} {
		if n := strings.Count(page, class); n != want {
			t.Errorf("%d elements %s, want %d", n, class, want)
		}
	}
	for _, want := range []string{
		"bubble · rank 0 · step 0 · 20.000 ms (20.000–40.000 ms)",
		"bubble · rank 1 · step 0 · 10.000 ms (0.000–10.000 ms)",
		"backward · rank 1 · step 0 · chunk 0 · microbatch 1 · 40.000–50.000 ms (10.000 ms)",
		"Recv from group rank 0 · 256 bytes",
		"run &lt;1&gt;", "steps 0",
		// The analysis's own figures: each stage idles 20 of the 60 ms span.
		"33.3% (20.000 ms)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<kernel>") || strings.Contains(page, "run <1>") {
		t.Error("names are not escaped")
	}
	// Both stages compute 40 ms of the span: no stage named.
	if !strings.Contains(page, `<td class="name">no collectives</td>`) {
		t.Error("the step's row does not say it has no collectives, and no stage behind")
	}
}

// Rank 1's last backward runs 10 ms longer (40–60 ms): stage 1 computes
// 50 ms of the 0–60 ms span, stage 0 40, and the step's row names stage
// 1, 10 ms ahead.
func TestWriteNamesTheSlowestStage(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		if r := &recs[i]; r.Rank == 1 && r.Name == "backward" && r.Microbatch == 1 {
			r.DeviceEnd = 60 * time.Millisecond
		}
	}
	var buf bytes.Buffer
	if _, err := htmlreport.Write(&buf, htmlreport.Input{Title: "run", Covers: "steps 0", Records: recs}); err != nil {
		t.Fatal(err)
	}
	if want := `<td class="name">no collectives; stage 1 slowest, 10.000 ms ahead</td>`; !strings.Contains(buf.String(), want) {
		t.Errorf("page lacks %q", want)
	}
}

// The same work without stage labels is a data-parallel job's, not a
// pipeline's: blocks and transfers drawn, no bubble shaded or named.
func TestWriteDataParallel(t *testing.T) {
	recs := twoStages()
	for i := range recs {
		recs[i].Stage = profiler.None
	}
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, htmlreport.Input{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 1 || st.Forward != 4 || st.Backward != 4 || st.Transfers != 2 || st.Bubbles != 0 {
		t.Errorf("stats %+v, want 1 step, 4 forward, 4 backward, 2 transfers, no bubble", st)
	}
	if page := buf.String(); strings.Contains(page, `class="bubble"`) || strings.Contains(page, "bubble ·") || strings.Contains(page, "· bubble") {
		t.Error("a data-parallel step's page shows a bubble")
	}
}

func TestWriteWithoutSteps(t *testing.T) {
	recs := []profiler.Record{{ID: 1, Name: "setup", Labels: profiler.NoLabels, HostEnd: time.Millisecond}}
	if _, err := htmlreport.Write(&bytes.Buffer{}, htmlreport.Input{Records: recs}); !errors.Is(err, htmlreport.ErrNoSteps) {
		t.Errorf("error %v, want ErrNoSteps", err)
	}
}

// A wrapped run's operations, without steps: 3 ranks × 200 all-reduces
// 1 ms apart, rank r arriving r·0.1 ms into each. 600 operations make
// three windows of 64 (the first, middle and last by start), each drawn
// with the operations of its time range; the analysis is the collectives
// matched without steps.
func TestWriteOperationsWithoutSteps(t *testing.T) {
	var recs []profiler.Record
	for k := range 200 {
		for r := range 3 {
			start := time.Duration(k)*time.Millisecond + time.Duration(r)*100*time.Microsecond
			recs = append(recs, profiler.Record{ID: uint64(k + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
				HostStart: start, HostEnd: start, HasDevice: true, DeviceStart: start, DeviceEnd: time.Duration(k)*time.Millisecond + 500*time.Microsecond,
				Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupSize: 3, GroupRank: int32(r), Peer: -1, Root: -1, Seq: uint64(k)}})
		}
	}
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, htmlreport.Input{Title: "wrapped", Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	// By start, operation i is call i/3 of rank i%3. The windows are
	// operations 0–63 (calls 0–20 and call 21's rank 0: 0–21.0 ms),
	// 268–331 (call 89's ranks 1–2 to call 110's ranks 0–1: 89.1–110.1
	// ms) and 536–599 (call 178's rank 2 to call 199: 178.2–199.2 ms);
	// no other operation starts within those ranges, so each draws 64.
	if st.Steps != 0 || st.Windows != 3 || st.Forward+st.Backward != 0 || st.Transfers != 3*64 {
		t.Fatalf("stats %+v, want 3 windows of 64 transfers, no steps or blocks", st)
	}
	page := buf.String()
	for _, want := range []string{
		"trainscope collectives report", "3 windows of operations drawn",
		"operations 1–64 of 600", "operations 269–332 of 600", "operations 537–600 of 600",
		"collectives: 200 matched across ranks; arrival skew p50 0.200 ms",
		"straggler: rank 2 caused 100% of the waiting",
		// All-reduces of one kind, evenly spaced: nothing says where a
		// step would start.
		"cycle: no repeating cycle of collectives found (rank 0: 200 of the latest operations repeat every 1, but no multiple of 1 up to 66",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="drawn"`) || strings.Contains(page, "stage ") {
		t.Error("a page without steps has the step page's block count or stage table")
	}

	// Labelled with a step but without its step ranges (an imported
	// Kineto trace's kernels): no step can be accounted, and the page is
	// the same.
	for i := range recs {
		recs[i].Step = 7
	}
	buf.Reset()
	st2, err := htmlreport.Write(&buf, htmlreport.Input{Title: "imported", Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if st2 != st || !strings.Contains(buf.String(), "trainscope collectives report") {
		t.Errorf("steps labelled, none accountable: stats %+v (without labels %+v)", st2, st)
	}
}

// TestWriteOperationsCycle: a wrapped run without steps whose ranks
// repeat two all-reduces (25 and 8 MiB) every 40 ms: the page says the
// cycle, as the run's summary does.
func TestWriteOperationsCycle(t *testing.T) {
	var recs []profiler.Record
	for k := range 30 {
		for r := range 2 {
			for i, mib := range []int64{25, 8} {
				start := time.Duration(k)*40*time.Millisecond + time.Duration(20+5*i)*time.Millisecond
				recs = append(recs, profiler.Record{ID: uint64(2*k + i + 1), Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
					HostStart: start, HostEnd: start, HasDevice: true, DeviceStart: start, DeviceEnd: start + time.Millisecond,
					Collective: profiler.Collective{Op: "AllReduce", Bytes: mib << 20, Group: "dp", GroupSize: 2, GroupRank: int32(r), Peer: -1, Root: -1, Seq: uint64(2*k + i)}})
			}
		}
	}
	var buf bytes.Buffer
	if _, err := htmlreport.Write(&buf, htmlreport.Input{Title: "wrapped", Records: recs}); err != nil {
		t.Fatal(err)
	}
	want := "cycle: every rank (2) repeats a cycle of 2 collectives (AllReduce ×2, 33.0 MiB) every 40.0 ms"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("page lacks %q", want)
	}
}

// TestWriteWrappedPipelineKernels: a wrapped pipeline's step, each rank's
// kernels carrying its stage and no phase. Step ranges span 0–100 ms.
// Rank 0 runs 200 kernels of 0.05 ms every 0.1 ms from 10 ms (less than a
// pixel apart on a 100 ms chart 1100 pixels wide), then one at 80–90 ms;
// rank 1 one kernel at 30–70 ms. They are drawn as one box per run: rank
// 0's 200 as one, its last as another, rank 1's as a third. The span is
// 10–90 ms: rank 0 is idle 30–80 ms (one bubble), rank 1 10–30 and
// 70–90 ms (two).
func TestWriteWrappedPipelineKernels(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	id := uint64(0)
	add := func(r profiler.Record) {
		id++
		r.ID = id
		r.Device = runtime.Device{Type: runtime.CUDA, Index: r.Rank}
		recs = append(recs, r)
	}
	kernel := func(rank int, from, to float64) {
		add(profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: 7,
			Labels:    profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
			HostStart: ms(from), HostEnd: ms(from), HasDevice: true, DeviceStart: ms(from), DeviceEnd: ms(to)})
	}
	for rank := range 2 {
		add(profiler.Record{Name: profiler.StepName, Rank: rank, Labels: profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
			HostStart: 0, HostEnd: ms(100)})
	}
	for i := range 200 {
		kernel(0, 10+0.1*float64(i), 10+0.1*float64(i)+0.05)
	}
	kernel(0, 80, 90)
	kernel(1, 30, 70)
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, htmlreport.Input{Title: "wrapped pipeline", Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 1 || st.Kernels != 202 || st.KernelBoxes != 3 || st.Bubbles != 3 {
		t.Errorf("stats %+v; want 1 step, 202 kernels in 3 boxes, 3 bubbles", st)
	}
	page := buf.String()
	if n := strings.Count(page, `class="kern"`); n != 3 {
		t.Errorf("%d kernel boxes in the page, want 3", n)
	}
	// Rank 0's first box: 200 kernels, each 0.05 ms, 10–29.95 ms.
	if !strings.Contains(page, "200 kernel(s) · rank 0 · step 0 · busy 10.000 ms within 10.000–29.950 ms") {
		t.Errorf("no box for rank 0's 200 kernels in\n%s", page)
	}
}

// TestWriteWrappedLabelledKernels: a wrapped pipeline's kernels launched
// inside NVTX ranges named as forward and backward work carry phase, chunk
// and microbatch, and are drawn as blocks on their chunk's lane coloured
// by microbatch, the kernels of one action less than a pixel apart as one
// block; the optimizer's kernel, unlabelled, as a kernel box. Step ranges
// span 0–100 ms. Rank 0 (stage 0): 50 forward kernels of chunk 0,
// microbatch 0, of 0.05 ms every 0.1 ms from 10 ms; forward chunk 1 at
// 20–25; backward chunk 1 at 40–45, chunk 0 at 50–55; the optimizer at
// 60–62. Rank 1 (stage 1): forward chunk 0 at 16–19, backward at 30–35.
// The span is 10–62 ms: rank 0 idles in 4 gaps, rank 1 in 3.
func TestWriteWrappedLabelledKernels(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var recs []profiler.Record
	add := func(r profiler.Record) {
		r.ID = uint64(len(recs) + 1)
		r.Device = runtime.Device{Type: runtime.CUDA, Index: r.Rank}
		recs = append(recs, r)
	}
	kernel := func(rank int, ph profiler.Phase, chunk, mb int, from, to float64) {
		add(profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Rank: rank, Stream: 7,
			Labels:    profiler.Labels{Step: 0, Stage: int16(rank), Chunk: int16(chunk), Microbatch: int32(mb), Phase: ph},
			HostStart: ms(from), HostEnd: ms(from), HasDevice: true, DeviceStart: ms(from), DeviceEnd: ms(to)})
	}
	for rank := range 2 {
		add(profiler.Record{Name: profiler.StepName, Rank: rank, Labels: profiler.Labels{Step: 0, Stage: int16(rank), Chunk: profiler.None, Microbatch: profiler.None},
			HostStart: 0, HostEnd: ms(100)})
	}
	for i := range 50 {
		kernel(0, profiler.Forward, 0, 0, 10+0.1*float64(i), 10+0.1*float64(i)+0.05)
	}
	kernel(0, profiler.Forward, 1, 0, 20, 25)
	kernel(0, profiler.Backward, 1, 0, 40, 45)
	kernel(0, profiler.Backward, 0, 0, 50, 55)
	kernel(0, profiler.PhaseNone, profiler.None, profiler.None, 60, 62)
	kernel(1, profiler.Forward, 0, 0, 16, 19)
	kernel(1, profiler.Backward, 0, 0, 30, 35)
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, htmlreport.Input{Title: "wrapped pipeline, labelled", Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 1 || st.Kernels != 56 || st.KernelBoxes != 7 || st.Forward != 3 || st.Backward != 3 || st.Bubbles != 7 {
		t.Errorf("stats %+v; want 1 step, 56 kernels in 7 boxes (3 forward, 3 backward), 7 bubbles", st)
	}
	page := buf.String()
	for class, want := range map[string]int{`class="blk fwd m0"`: 3, `class="blk bwd m0"`: 3, `class="kern"`: 1, ">c1<": 2} {
		if n := strings.Count(page, class); n != want {
			t.Errorf("%d of %s in the page, want %d", n, class, want)
		}
	}
	if want := "forward · rank 0 · step 0 · chunk 0 · microbatch 0 · 50 kernel(s), busy 2.500 ms within 10.000–14.950 ms"; !strings.Contains(page, want) {
		t.Errorf("the page lacks %q", want)
	}
}

// TestHoverNamesTheCommunicator: two communicators named "dp" are told
// apart in the hover titles by their ids; a group without one is named
// alone.
func TestHoverNamesTheCommunicator(t *testing.T) {
	var recs []profiler.Record
	for r := range 4 {
		gid := uint64(0xa1)
		if r >= 2 {
			gid = 0xc3
		}
		start := time.Duration(r) * 100 * time.Microsecond
		recs = append(recs, profiler.Record{ID: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
			HostStart: start, HostEnd: start, HasDevice: true, DeviceStart: start, DeviceEnd: time.Millisecond,
			Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupID: gid, GroupSize: 2, GroupRank: int32(r % 2), Peer: -1, Root: -1}},
			profiler.Record{ID: 2, Name: "Broadcast", Kind: profiler.KindCollective, Rank: r, Labels: profiler.NoLabels,
				HostStart: 2 * time.Millisecond, HostEnd: 2 * time.Millisecond, HasDevice: true, DeviceStart: 2 * time.Millisecond, DeviceEnd: 3 * time.Millisecond,
				Collective: profiler.Collective{Op: "Broadcast", Group: "world", GroupSize: 4, GroupRank: int32(r), Peer: -1, Root: 0}})
	}
	var buf bytes.Buffer
	if _, err := htmlreport.Write(&buf, htmlreport.Input{Title: "groups", Records: recs}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"group dp [communicator 00000000000000a1] (2 ranks)", "group dp [communicator 00000000000000c3] (2 ranks)", "group world (4 ranks)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// A label's value does not size the page: a microbatch numbered 100,000
// (a run numbering them across steps) gets a colour of the bounded
// palette, and a chunk numbered 20,000 one lane, not 20,000. Before, the
// page grew to 19 MB and 40,000 lane labels.
func TestLabelValuesDoNotSizeThePage(t *testing.T) {
	var small bytes.Buffer
	if _, err := htmlreport.Write(&small, htmlreport.Input{Records: twoStages()}); err != nil {
		t.Fatal(err)
	}
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		if r.Microbatch == 1 {
			r.Microbatch = 100000
		}
		if r.Rank == 1 && r.Chunk == 0 {
			r.Chunk = 20000
		}
	}
	var big bytes.Buffer
	st, err := htmlreport.Write(&big, htmlreport.Input{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if st.Forward != 4 || st.Backward != 4 {
		t.Errorf("stats %+v, want every block drawn", st)
	}
	if big.Len() > 2*small.Len() {
		t.Errorf("page %d bytes with large label values, %d without: it grew with a label's value", big.Len(), small.Len())
	}
	page := big.String()
	for _, want := range []string{`data-mb="100000"`, ">c20000<", "microbatch 100000"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := strings.Count(page, ">c"); n > 8 {
		t.Errorf("%d lane labels, want one per chunk with work per rank", n)
	}
}
