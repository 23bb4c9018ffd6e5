package chrometrace_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

var update = flag.Bool("update", false, "rewrite golden files")

const us = time.Microsecond

// fixture is a hand-built trace of two ranks in a pipeline group pp0 and
// a data-parallel group dp. Rank 0 sends an activation to rank 1 (whose
// Recv starts on the device before the Send does), rank 1 sends a
// gradient back, and rank 0 sends once more with no Recv to match. Both
// ranks all-reduce in dp. On rank 1 two ops of one backward overlap on
// the device without nesting, so the second needs a second lane.
func fixture() []profiler.Record {
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	cpu1 := runtime.Device{Type: runtime.CPU, Index: 1}
	lbl := func(stage, chunk, mb int, ph profiler.Phase) profiler.Labels {
		return profiler.Labels{Step: 3, Stage: int16(stage), Chunk: int16(chunk), Microbatch: int32(mb), Phase: ph}
	}
	p2p := func(op string, rank, peer int32, seq uint64) profiler.Collective {
		return profiler.Collective{Op: op, Bytes: 4096, Count: 1024, DType: "float32", Peer: peer, Root: -1,
			Group: "pp0", GroupSize: 2, GroupRank: rank, Seq: seq, BusFactor: 1}
	}
	ar := func(rank int32) profiler.Collective {
		return profiler.Collective{Op: "AllReduce", Bytes: 1 << 20, Count: 1 << 18, DType: "float32", Peer: -1, Root: -1,
			Group: "dp", GroupSize: 2, GroupRank: rank, Seq: 0, BusFactor: 1}
	}
	dev := func(r profiler.Record, start, end time.Duration) profiler.Record {
		r.HasDevice, r.DeviceStart, r.DeviceEnd = true, start, end
		r.Stream = uint64(10*r.Rank + 1) // the rank's compute stream
		if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
			r.Stream++ // its process group's
			s := (end - start).Seconds()
			r.AlgBandwidth = float64(r.Collective.Bytes) / s
			r.BusBandwidth = r.AlgBandwidth * r.Collective.BusFactor
		}
		return r
	}
	s0, f0, o0 := lbl(0, -1, -1, profiler.PhaseNone), lbl(0, 0, 1, profiler.Forward), lbl(0, -1, -1, profiler.Optimizer)
	b0 := lbl(0, 1, 1, profiler.Backward)
	s1, f1, b1, o1 := lbl(1, -1, -1, profiler.PhaseNone), lbl(1, 1, 1, profiler.Forward), lbl(1, 1, 1, profiler.Backward), lbl(1, -1, -1, profiler.Optimizer)
	return []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Device: cpu0, Labels: s0, HostStart: 0, HostEnd: 1000 * us},
		dev(profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: f0,
			HostStart: 10 * us, HostEnd: 310 * us, PeakMemory: 1 << 20}, 20*us, 420*us),
		dev(profiler.Record{ID: 3, Parent: 2, Depth: 2, Name: "linear", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: f0,
			HostStart: 20 * us, HostEnd: 120 * us, PeakMemory: 1 << 20}, 30*us, 330*us),
		dev(profiler.Record{ID: 4, Parent: 2, Depth: 2, Name: "send", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: f0,
			HostStart: 130 * us, HostEnd: 140 * us}, 330*us, 331*us),
		dev(profiler.Record{ID: 5, Parent: 4, Depth: 3, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Device: cpu0, Labels: f0,
			HostStart: 131 * us, HostEnd: 139 * us, Collective: transferEnd(p2p("Send", 0, 1, 0), 500*us)}, 335*us, 435*us),
		dev(profiler.Record{ID: 6, Parent: 1, Depth: 1, Name: "Recv", Kind: profiler.KindP2P, Rank: 0, Device: cpu0, Labels: b0,
			HostStart: 650 * us, HostEnd: 660 * us, Collective: p2p("Recv", 0, 1, 1)}, 750*us, 790*us),
		{ID: 7, Parent: 1, Depth: 1, Name: "optimizer", Rank: 0, Device: cpu0, Labels: o0, HostStart: 700 * us, HostEnd: 900 * us},
		dev(profiler.Record{ID: 8, Parent: 7, Depth: 2, Name: "AllReduce", Kind: profiler.KindCollective, Rank: 0, Device: cpu0, Labels: o0,
			HostStart: 710 * us, HostEnd: 720 * us, Collective: ar(0)}, 820*us, 860*us),
		dev(profiler.Record{ID: 9, Parent: 1, Depth: 1, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Device: cpu0, Labels: f0,
			HostStart: 950 * us, HostEnd: 960 * us, Collective: p2p("Send", 0, 1, 2)}, 960*us, 970*us),

		{ID: 1, Name: "step", Rank: 1, Device: cpu1, Labels: s1, HostStart: 5 * us, HostEnd: 905 * us},
		dev(profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "Recv", Kind: profiler.KindP2P, Rank: 1, Device: cpu1, Labels: f1,
			HostStart: 100 * us, HostEnd: 110 * us, Collective: p2p("Recv", 1, 0, 0)}, 300*us, 440*us),
		dev(profiler.Record{ID: 3, Parent: 1, Depth: 1, Name: "backward", Kind: profiler.KindDevice, Rank: 1, Device: cpu1, Labels: b1,
			HostStart: 200 * us, HostEnd: 400 * us}, 440*us, 700*us),
		dev(profiler.Record{ID: 4, Parent: 3, Depth: 2, Name: "linear_grad", Kind: profiler.KindDevice, Rank: 1, Device: cpu1, Labels: b1,
			HostStart: 210 * us, HostEnd: 300 * us}, 450*us, 560*us),
		dev(profiler.Record{ID: 5, Parent: 3, Depth: 2, Name: "tanh_grad \"2\"", Kind: profiler.KindDevice, Rank: 1, Device: cpu1, Labels: b1,
			HostStart: 310 * us, HostEnd: 390 * us}, 550*us, 720*us),
		dev(profiler.Record{ID: 6, Parent: 1, Depth: 1, Name: "Send", Kind: profiler.KindP2P, Rank: 1, Device: cpu1, Labels: b1,
			HostStart: 600 * us, HostEnd: 610 * us, Collective: p2p("Send", 1, 0, 1)}, 710*us, 760*us),
		{ID: 7, Parent: 1, Depth: 1, Name: "optimizer", Rank: 1, Device: cpu1, Labels: o1, HostStart: 800 * us, HostEnd: 900 * us},
		dev(profiler.Record{ID: 8, Parent: 7, Depth: 2, Name: "AllReduce", Kind: profiler.KindCollective, Rank: 1, Device: cpu1, Labels: o1,
			HostStart: 805 * us, HostEnd: 815 * us, Collective: ar(1)}, 820*us, 861*us),
	}
}

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// transferEnd sets when a p2p's network transfer ended (NCCL's proxy).
func transferEnd(c profiler.Collective, at time.Duration) profiler.Collective {
	c.TransferEnd = at
	return c
}

func TestGolden(t *testing.T) {
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, fixture(), chrometrace.WithEpoch(epoch)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "fixture.golden.json")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("trace differs from %s (run with -update to accept):\n%s", path, buf.Bytes())
	}
}

// traceFile is the JSON Object Format as a reader sees it.
type traceFile struct {
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData"`
	TraceEvents     []traceEvent   `json:"traceEvents"`
}

type traceEvent struct {
	Ph      string         `json:"ph"`
	Name    string         `json:"name"`
	Cat     string         `json:"cat"`
	Ts      json.Number    `json:"ts"`
	Dur     json.Number    `json:"dur"`
	Pid     *int           `json:"pid"`
	Tid     *int           `json:"tid"`
	BindID  *uint64        `json:"bind_id"`
	FlowIn  bool           `json:"flow_in"`
	FlowOut bool           `json:"flow_out"`
	Args    map[string]any `json:"args"`
}

// ns reads a time as Perfetto does: microseconds × 1000, truncated.
func ns(t *testing.T, n json.Number) int64 {
	t.Helper()
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		t.Fatalf("time %q: %v", n, err)
	}
	return int64(f * 1000)
}

// parsed is a decoded trace with its tracks resolved.
type parsed struct {
	file     traceFile
	complete []traceEvent
	process  map[int]string    // pid → name
	thread   map[[2]int]string // pid, tid → name
}

func parse(t *testing.T, data []byte) parsed {
	t.Helper()
	var p parsed
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&p.file); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	if p.file.DisplayTimeUnit != "ns" {
		t.Errorf("displayTimeUnit %q", p.file.DisplayTimeUnit)
	}
	p.process, p.thread = map[int]string{}, map[[2]int]string{}
	for _, e := range p.file.TraceEvents {
		if e.Pid == nil {
			t.Fatalf("event without pid: %+v", e)
		}
		switch e.Ph {
		case "M":
			name, _ := e.Args["name"].(string)
			switch e.Name {
			case "process_name":
				p.process[*e.Pid] = name
			case "thread_name":
				p.thread[[2]int{*e.Pid, *e.Tid}] = name
			case "process_sort_index", "thread_sort_index":
			default:
				t.Errorf("unknown metadata %q", e.Name)
			}
		case "X":
			if e.Tid == nil || e.Name == "" || e.Cat == "" || e.Ts == "" || e.Dur == "" || e.Args == nil {
				t.Errorf("incomplete X event %+v", e)
			}
			if _, ok := p.thread[[2]int{*e.Pid, *e.Tid}]; !ok {
				t.Errorf("X event %s on unnamed track %d/%d", e.Name, *e.Pid, *e.Tid)
			}
			p.complete = append(p.complete, e)
		default:
			t.Errorf("unexpected phase %q", e.Ph)
		}
	}
	return p
}

// checkNesting asserts that complete events of each track nest properly.
func checkNesting(t *testing.T, p parsed) {
	t.Helper()
	type iv struct {
		start, end int64
		name       string
	}
	tracks := map[[2]int][]iv{}
	for _, e := range p.complete {
		s := ns(t, e.Ts)
		tracks[[2]int{*e.Pid, *e.Tid}] = append(tracks[[2]int{*e.Pid, *e.Tid}], iv{s, s + ns(t, e.Dur), e.Name})
	}
	for k, ivs := range tracks {
		slices.SortStableFunc(ivs, func(a, b iv) int {
			if c := cmp.Compare(a.start, b.start); c != 0 {
				return c
			}
			return cmp.Compare(b.end, a.end)
		})
		var open []iv
		for _, v := range ivs {
			for len(open) > 0 && open[len(open)-1].end <= v.start {
				open = open[:len(open)-1]
			}
			if len(open) > 0 && v.end > open[len(open)-1].end {
				top := open[len(open)-1]
				t.Errorf("track %s: %s [%d, %d] overlaps %s [%d, %d] without nesting",
					p.thread[k], v.name, v.start, v.end, top.name, top.start, top.end)
			}
			open = append(open, v)
		}
	}
}

// flow is one chain of events joined by a bind_id, in file order.
type flow []traceEvent

// checkFlows asserts that every flow starts once, ends once, steps in
// between, and runs forward in time; it returns the flows by id.
func checkFlows(t *testing.T, p parsed) map[uint64]flow {
	t.Helper()
	flows := map[uint64]flow{}
	for _, e := range p.complete {
		if e.BindID == nil {
			if e.FlowIn || e.FlowOut {
				t.Errorf("%s has a flow direction but no bind_id", e.Name)
			}
			continue
		}
		flows[*e.BindID] = append(flows[*e.BindID], e)
	}
	for id, f := range flows {
		if len(f) < 2 {
			t.Errorf("flow %d has %d event", id, len(f))
			continue
		}
		for i, e := range f {
			first, last := i == 0, i == len(f)-1
			if e.FlowOut != !last || e.FlowIn != !first {
				t.Errorf("flow %d event %d (%s): flow_out %v flow_in %v", id, i, e.Name, e.FlowOut, e.FlowIn)
			}
			if i > 0 && ns(t, e.Ts) < ns(t, f[i-1].Ts) {
				t.Errorf("flow %d runs back in time: %s at %s after %s at %s", id, e.Name, e.Ts, f[i-1].Name, f[i-1].Ts)
			}
		}
	}
	return flows
}

func TestStructure(t *testing.T) {
	var buf bytes.Buffer
	recs := fixture()
	if _, err := chrometrace.Write(&buf, recs, chrometrace.WithEpoch(epoch)); err != nil {
		t.Fatal(err)
	}
	p := parse(t, buf.Bytes())
	if got := p.file.OtherData["epoch"]; got != "2026-11-29T12:00:00Z" {
		t.Errorf("otherData.epoch = %v", got)
	}
	if want := map[int]string{1: "rank 0 (cpu:0)", 2: "rank 1 (cpu:1)"}; !equalMaps(p.process, want) {
		t.Errorf("processes %v, want %v", p.process, want)
	}
	var threads []string
	for k, name := range p.thread {
		threads = append(threads, fmt.Sprintf("%d:%s", k[0], name))
	}
	slices.Sort(threads)
	want := []string{"1:cpu:0 communication", "1:cpu:0 compute", "1:host",
		"2:cpu:1 communication", "2:cpu:1 compute", "2:cpu:1 compute (2)", "2:host"}
	if !slices.Equal(threads, want) {
		t.Errorf("threads %v, want %v", threads, want)
	}
	// One host event per record, one device event per device-timed record.
	host, device := 0, 0
	for _, e := range p.complete {
		if p.thread[[2]int{*e.Pid, *e.Tid}] == "host" {
			host++
		} else {
			device++
		}
	}
	if host != len(recs) || device != len(recs)-4 {
		t.Errorf("%d host and %d device events, want %d and %d", host, device, len(recs), len(recs)-4)
	}
	checkNesting(t, p)

	// The linear op: times, labels and the other timeline's duration.
	for _, e := range p.complete {
		if e.Name != "linear" || p.thread[[2]int{*e.Pid, *e.Tid}] != "host" {
			continue
		}
		if ns(t, e.Ts) != int64(20*us) || ns(t, e.Dur) != int64(100*us) || e.Cat != "device" {
			t.Errorf("linear host event ts %s dur %s cat %s", e.Ts, e.Dur, e.Cat)
		}
		wantArgs := map[string]string{"step": "3", "stage": "0", "chunk": "0", "microbatch": "1", "phase": "forward",
			"device_us": "300", "peak_memory_bytes": "1048576"}
		for k, v := range wantArgs {
			if got := fmt.Sprint(e.Args[k]); got != v {
				t.Errorf("linear arg %s = %s, want %s", k, got, v)
			}
		}
	}
	// A Send carries what moved and its bandwidths: 4096 B in 100us.
	for _, e := range p.complete {
		if e.Name == "Send" && e.Args["seq"] == json.Number("0") && p.thread[[2]int{*e.Pid, *e.Tid}] == "cpu:0 communication" {
			wantArgs := map[string]string{"op": "Send", "bytes": "4096", "count": "1024", "dtype": "float32", "peer": "1",
				"peer_rank": "1", "group": "pp0", "group_size": "2", "group_rank": "0", "algbw_GBps": "0.04096",
				"busbw_GBps": "0.04096", "host_us": "8", "transfer_end_after_device_us": "65"}
			for k, v := range wantArgs {
				if got := fmt.Sprint(e.Args[k]); got != v {
					t.Errorf("Send arg %s = %s, want %s", k, got, v)
				}
			}
		}
	}
}

func equalMaps[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestFlows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	st, err := chrometrace.WriteFile(path, fixture())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := parse(t, data)
	flows := checkFlows(t, p)
	// Two Send/Recv pairs and one AllReduce of two; the last Send has no Recv.
	if st.Flows != 3 || len(flows) != 3 || st.Unmatched != 1 {
		t.Fatalf("stats %+v, %d flows in the file; want 3 flows, 1 unmatched", st, len(flows))
	}
	if st.Events != len(p.complete) {
		t.Errorf("Stats.Events %d, %d X events in the file", st.Events, len(p.complete))
	}
	var got []string
	for _, f := range flows {
		var s []string
		for _, e := range f {
			s = append(s, fmt.Sprintf("%s@%d/%s", e.Name, *e.Pid-1, p.thread[[2]int{*e.Pid, *e.Tid}]))
		}
		got = append(got, strings.Join(s, " → "))
	}
	slices.Sort(got)
	want := []string{
		// Arrows bind to device events and leave the one that starts first:
		// rank 1's Recv was on the device before rank 0's Send; the
		// AllReduces start together and the longer comes first.
		"AllReduce@1/cpu:1 communication → AllReduce@0/cpu:0 communication",
		"Recv@1/cpu:1 communication → Send@0/cpu:0 communication",
		"Send@1/cpu:1 communication → Recv@0/cpu:0 communication",
	}
	if !slices.Equal(got, want) {
		t.Errorf("flows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Without device times, flows bind to host events.
func TestFlowsOnHost(t *testing.T) {
	recs := fixture()
	for i := range recs {
		recs[i].HasDevice = false
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		t.Fatal(err)
	}
	p := parse(t, buf.Bytes())
	flows := checkFlows(t, p)
	if len(flows) != 3 {
		t.Fatalf("%d flows, want 3", len(flows))
	}
	for _, f := range flows {
		for _, e := range f {
			if p.thread[[2]int{*e.Pid, *e.Tid}] != "host" {
				t.Errorf("flow bound to %s on %s", e.Name, p.thread[[2]int{*e.Pid, *e.Tid}])
			}
		}
	}
	checkNesting(t, p)
}

// Two recorders on one rank (IDs overlap, ranges interleave) get two host
// lanes rather than improperly nested events.
func TestOverlappingHostRanges(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: "a", Labels: profiler.NoLabels, HostStart: 0, HostEnd: 100 * us},
		{ID: 1, Name: "b", Labels: profiler.NoLabels, HostStart: 50 * us, HostEnd: 150 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "c", Labels: profiler.NoLabels, HostStart: 60 * us, HostEnd: 70 * us},
		{ID: 3, Name: "zero", Labels: profiler.NoLabels, HostStart: 150 * us, HostEnd: 150 * us},
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		t.Fatal(err)
	}
	p := parse(t, buf.Bytes())
	checkNesting(t, p)
	if len(p.thread) != 2 {
		t.Errorf("threads %v, want host and host (2)", p.thread)
	}
}

func TestErrors(t *testing.T) {
	if _, err := chrometrace.Write(&bytes.Buffer{}, nil); !errors.Is(err, chrometrace.ErrNoRecords) {
		t.Errorf("Write(nil) = %v", err)
	}
	if _, err := chrometrace.WriteFile(filepath.Join(t.TempDir(), "missing", "trace.json"), fixture()); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	if _, err := chrometrace.Write(failingWriter{}, fixture()); err == nil {
		t.Error("Write to a failing writer succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestTrainerRun draws a real run: pp=2 × vpp=2 × dp=2, so sends and
// receives cross the pipeline and gradients are all-reduced.
func TestTrainerRun(t *testing.T) {
	prof, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close(context.Background())
	cfg := pipeline.DefaultConfig()
	cfg.Stages, cfg.Chunks, cfg.Replicas = 2, 2, 2
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers, cfg.Steps = 4, 4, 16, 8, 2
	cfg.Profiler = prof
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := prof.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	recs := prof.Snapshot()
	path := filepath.Join(t.TempDir(), "trace.json")
	st, err := chrometrace.WriteFile(path, recs, chrometrace.WithEpoch(prof.Epoch()))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := parse(t, data)
	checkNesting(t, p)
	flows := checkFlows(t, p)

	// One host event per record, by rank and name; one device event per
	// device-timed record.
	type key struct {
		rank int
		name string
	}
	want, got := map[key]int{}, map[key]int{}
	devices := 0
	for i := range recs {
		want[key{recs[i].Rank, recs[i].Name}]++
		if recs[i].HasDevice {
			devices++
		}
	}
	deviceEvents := 0
	for _, e := range p.complete {
		if p.thread[[2]int{*e.Pid, *e.Tid}] == "host" {
			got[key{*e.Pid - 1, e.Name}]++
		} else {
			deviceEvents++
		}
	}
	if !equalMaps(got, want) {
		t.Errorf("host events by rank and name %v, records %v", got, want)
	}
	if deviceEvents != devices || st.Events != len(recs)+devices {
		t.Errorf("%d device events, Stats.Events %d; %d records, %d device-timed", deviceEvents, st.Events, len(recs), devices)
	}

	// Every Send and Recv is matched, and each pair carries the same
	// step, microbatch and phase: the activation or gradient of one
	// microbatch, sent and received.
	sends := 0
	for i := range recs {
		if recs[i].Name == "Send" {
			sends++
		}
	}
	p2p, collectives := 0, 0
	for id, f := range flows {
		switch f[0].Name {
		case "Send", "Recv":
			p2p++
			if len(f) != 2 {
				t.Errorf("p2p flow %d has %d events", id, len(f))
				continue
			}
			a, b := f[0], f[1]
			if a.Name == b.Name {
				t.Errorf("flow %d joins %s to %s", id, a.Name, b.Name)
			}
			for _, k := range []string{"step", "microbatch", "phase", "group", "bytes"} {
				if fmt.Sprint(a.Args[k]) != fmt.Sprint(b.Args[k]) {
					t.Errorf("flow %d: %s %s=%v, %s %s=%v", id, a.Name, k, a.Args[k], b.Name, k, b.Args[k])
				}
			}
			if fmt.Sprint(a.Args["peer"]) != fmt.Sprint(b.Args["group_rank"]) || fmt.Sprint(b.Args["peer"]) != fmt.Sprint(a.Args["group_rank"]) {
				t.Errorf("flow %d joins group ranks %v→%v with %v→%v", id, a.Args["group_rank"], a.Args["peer"], b.Args["group_rank"], b.Args["peer"])
			}
		case "AllReduce":
			collectives++
			if len(f) != cfg.Replicas {
				t.Errorf("AllReduce flow %d joins %d ranks, want %d", id, len(f), cfg.Replicas)
			}
		default:
			t.Errorf("flow %d starts at %s", id, f[0].Name)
		}
	}
	if p2p != sends || st.Unmatched != 0 || sends == 0 {
		t.Errorf("%d Send/Recv flows for %d sends, %d unmatched", p2p, sends, st.Unmatched)
	}
	allReduces := cfg.Steps * cfg.Stages * cfg.Chunks // one per chunk per stage per step, across dp
	if collectives != allReduces || st.Flows != p2p+collectives*(cfg.Replicas-1) {
		t.Errorf("%d AllReduce flows, want %d; Stats.Flows %d", collectives, allReduces, st.Flows)
	}
}

// The benchmark's records overlap on the device without nesting; the
// lanes must still nest, and every Send find its Recv.
func TestSyntheticLayout(t *testing.T) {
	recs := synthtrace.Trainer(4, 2)
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		t.Fatal(err)
	}
	p := parse(t, buf.Bytes())
	checkNesting(t, p)
	flows := checkFlows(t, p)
	sends := 0
	for i := range recs {
		if recs[i].Name == "Send" {
			sends++
		}
	}
	if len(flows) != sends {
		t.Errorf("%d flows for %d sends", len(flows), sends)
	}
	lanes := 0
	for _, name := range p.thread {
		if strings.HasSuffix(name, "(2)") {
			lanes++
		}
	}
	if lanes == 0 {
		t.Error("no second lane: the test no longer exercises lanes")
	}
}

// WithOtherData lands in otherData, escaped, and cannot replace the
// writer's own keys.
func TestWithOtherData(t *testing.T) {
	var buf bytes.Buffer
	_, err := chrometrace.Write(&buf, fixture(), chrometrace.WithEpoch(epoch),
		chrometrace.WithOtherData("run", `interrupted at step 3 "SIGINT"`), chrometrace.WithOtherData("producer", "someone else"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OtherData map[string]string `json:"otherData"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if got := doc.OtherData["run"]; got != `interrupted at step 3 "SIGINT"` {
		t.Errorf("otherData.run = %q", got)
	}
	if got := doc.OtherData["producer"]; got != "trainscope" {
		t.Errorf("otherData.producer = %q, want trainscope", got)
	}
}

// A device range whose device work did not finish (Record.DeviceUnfinished)
// is drawn on its rank's host track only, at its host times, with
// "device_unfinished": true, and no device time or stream.
func TestDeviceUnfinishedOnTheHostTrack(t *testing.T) {
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	recs := []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Device: cpu0, Labels: profiler.NoLabels, HostStart: 0, HostEnd: 100 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: profiler.NoLabels,
			HostStart: 10 * us, HostEnd: 30 * us, DeviceUnfinished: true},
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	var step, forward []int
	for i, ev := range tr.TraceEvents {
		switch {
		case ev.Ph == "X" && ev.Name == "step":
			step = append(step, i)
		case ev.Ph == "X" && ev.Name == "forward":
			forward = append(forward, i)
		}
	}
	if len(step) != 1 || len(forward) != 1 {
		t.Fatalf("%d step and %d forward events, want one each (the forward on the host track only):\n%s", len(step), len(forward), buf.String())
	}
	f, s := tr.TraceEvents[forward[0]], tr.TraceEvents[step[0]]
	if f.Tid != s.Tid || math.Round(f.Ts) != 10 || math.Round(f.Dur) != 20 {
		t.Errorf("forward on tid %d at %v for %v µs, want the host track's (tid %d) at 10 for 20", f.Tid, f.Ts, f.Dur, s.Tid)
	}
	if f.Args["device_unfinished"] != true {
		t.Errorf("forward's args %v lack device_unfinished", f.Args)
	}
	for _, k := range []string{"device_us", "stream", "host_us"} {
		if _, ok := f.Args[k]; ok {
			t.Errorf("forward's args %v have %s", f.Args, k)
		}
	}
	if _, ok := s.Args["device_unfinished"]; ok {
		t.Errorf("step's args %v have device_unfinished", s.Args)
	}
}
