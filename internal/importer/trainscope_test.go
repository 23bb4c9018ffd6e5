package importer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/runtime"
)

// roundTripKey is what identifies a record across the trip: IDs are
// renumbered per rank (a rank's recorders each number from 1).
type roundTripKey struct {
	rank       int
	name       string
	start, end time.Duration
}

// TestTrainscopeRoundTrip writes the built-in trainer's records with
// exporters/chrometrace and reads them back: every record returns with its
// times, device interval, stream, labels, nesting and collective, and the
// pipeline analysis of the records read back equals that of the
// originals.
func TestTrainscopeRoundTrip(t *testing.T) {
	epoch := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, l := range trainrun.Layouts() {
		if l.Name != "pp2-vpp2-dp2-1f1b-depth0" && l.Name != "pp2-vpp2-dp1-1f1b-depth1" {
			continue
		}
		t.Run(l.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tape, _, err := trainrun.Run(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			orig := tape.Records()
			// Some p2p as a wrapped run over a network transport records
			// them: their transfer ended after (or, for one, before) the
			// kernel.
			n := 0
			for i := range orig {
				if r := &orig[i]; r.Kind == profiler.KindP2P && r.HasDevice {
					r.Collective.TransferEnd = r.DeviceEnd + time.Duration(n%3-1)*1500*time.Nanosecond + 250*time.Microsecond
					n++
				}
			}
			if n == 0 {
				t.Fatal("no device-timed p2p in the layout")
			}
			// The last step was cut short (as an interrupted run's is).
			last := int32(l.Config.Steps - 1)
			cut := 0
			for i := range orig {
				if r := &orig[i]; r.Depth == 0 && r.Name == profiler.StepName && r.Step == last {
					r.CutShort = true
					cut++
				}
			}
			if cut == 0 {
				t.Fatal("no step range of the last step")
			}
			// Kernels traced as a wrapped job's are (CUPTI): a device
			// interval, no host range; some inside device-timed ranges.
			maxID := map[int]uint64{}
			for i := range orig {
				maxID[orig[i].Rank] = max(maxID[orig[i].Rank], orig[i].ID)
			}
			var kernels []profiler.Record
			for i := range orig {
				r := &orig[i]
				if r.Kind != profiler.KindDevice || !r.HasDevice || len(kernels) >= 40 {
					continue
				}
				maxID[r.Rank]++
				d := r.DeviceEnd - r.DeviceStart
				start := r.DeviceStart + d/4
				kernels = append(kernels, profiler.Record{ID: maxID[r.Rank], Name: "sm90_gemm", Kind: profiler.KindKernel, Rank: r.Rank,
					Device: r.Device, Stream: r.Stream, Labels: profiler.Labels{Step: r.Step, Stage: r.Stage, Microbatch: profiler.None, Chunk: profiler.None},
					HostStart: start, HostEnd: start, HasDevice: true, DeviceStart: start, DeviceEnd: start + d/2})
			}
			if len(kernels) == 0 {
				t.Fatal("no device-timed range to put kernels in")
			}
			orig = append(orig, kernels...)
			var buf bytes.Buffer
			if _, err := chrometrace.Write(&buf, orig, chrometrace.WithEpoch(epoch), chrometrace.WithOtherData("steps", "steps 0–3")); err != nil {
				t.Fatal(err)
			}
			if f := Detect(buf.Bytes()[:4096]); f != FormatTrainscope {
				t.Fatalf("detected as %v", f)
			}
			// Re-saved pretty-printed (json.dump(..., indent=1) in
			// Python, say), it is still trainscope's.
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, buf.Bytes(), "", " "); err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(pretty.Bytes()[:4096], []byte(`"producer": "trainscope"`)) {
				t.Fatalf("the indented trace's head has no spaced producer:\n%.600s", pretty.Bytes())
			}
			if f := Detect(pretty.Bytes()[:4096]); f != FormatTrainscope {
				t.Fatalf("pretty-printed: detected as %v", f)
			}
			p, err := Load("trace.json", &buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) > 0 {
				t.Errorf("warnings: %q", p.Warnings)
			}
			if p.OtherData["steps"] != "steps 0–3" {
				t.Errorf("otherData %v", p.OtherData)
			}
			back := p.Records
			if len(back) != len(orig) {
				t.Fatalf("%d records read back, %d written", len(back), len(orig))
			}
			// On the epoch's wall clock.
			shift := time.Duration(epoch.UnixNano())
			for i := range back {
				r := &back[i]
				r.HostStart -= shift
				r.HostEnd -= shift
				if r.HasDevice {
					r.DeviceStart -= shift
					r.DeviceEnd -= shift
				}
				if r.Collective.TransferEnd != 0 {
					r.Collective.TransferEnd -= shift
				}
			}
			byKey := func(recs []profiler.Record) map[roundTripKey][]*profiler.Record {
				m := map[roundTripKey][]*profiler.Record{}
				for i := range recs {
					r := &recs[i]
					k := roundTripKey{r.Rank, r.Name, r.HostStart, r.HostEnd}
					m[k] = append(m[k], r)
				}
				return m
			}
			want, got := byKey(orig), byKey(back)
			ids := map[[2]uint64]uint64{} // (rank, original ID) → ID read back; one recorder per rank here
			for k, ws := range want {
				gs := got[k]
				if len(gs) != len(ws) {
					t.Errorf("%+v: %d records read back, %d written", k, len(gs), len(ws))
					continue
				}
				for j := range ws {
					w, g := *ws[j], *gs[j]
					ids[[2]uint64{uint64(w.Rank), w.ID}] = g.ID
					if g.Kind != w.Kind || g.Labels != w.Labels || g.Tag != w.Tag || g.Depth != w.Depth ||
						g.HasDevice != w.HasDevice || g.DeviceStart != w.DeviceStart || g.DeviceEnd != w.DeviceEnd ||
						g.Stream != w.Stream || g.DeviceNested != w.DeviceNested || g.PeakMemory != w.PeakMemory || g.Device != w.Device ||
						g.CutShort != w.CutShort || g.OuterInGroup != w.OuterInGroup || g.DeviceOuterInGroup != w.DeviceOuterInGroup {
						t.Errorf("%+v:\nread back %+v\nwritten   %+v", k, g, w)
					}
					if w.Kind == profiler.KindCollective || w.Kind == profiler.KindP2P {
						if !reflect.DeepEqual(g.Collective, w.Collective) || g.AlgBandwidth != w.AlgBandwidth {
							t.Errorf("%+v: collective %+v (algbw %g), written %+v (algbw %g)", k, g.Collective, g.AlgBandwidth, w.Collective, w.AlgBandwidth)
						}
					}
				}
			}
			for k, ws := range want {
				for j, w := range ws {
					if gs := got[k]; j < len(gs) && w.Parent != 0 && gs[j].Parent != ids[[2]uint64{uint64(w.Rank), w.Parent}] {
						t.Errorf("%+v: parent %d, want the record written as %d", k, gs[j].Parent, w.Parent)
					}
				}
			}
			// The analysis cannot tell them apart.
			a, b := analysis.Summarize(analysis.Analyze(orig)), analysis.Summarize(analysis.Analyze(back))
			if !reflect.DeepEqual(a, b) {
				t.Errorf("analysis of the records read back:\n%+v\nof those written:\n%+v", b, a)
			}
			if a.Complete != l.Config.Steps-1 {
				t.Errorf("%d complete steps of %d, the last cut short", a.Complete, l.Config.Steps)
			}
		})
	}
}

// The warnings about one device event say "1 device event", with their
// verbs agreeing: a trace without streams whose send lost its device
// event.
func TestTrainscopeWarningsOfOne(t *testing.T) {
	const text = `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope"},
"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cpu:0)"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"cpu:0 compute"}},
{"ph":"X","name":"forward","cat":"device","ts":10.0005,"dur":5.0005,"pid":1,"tid":1,"args":{"step":3,"phase":"forward","device_us":20}},
{"ph":"X","name":"Send","cat":"p2p","ts":16.0005,"dur":1.0005,"pid":1,"tid":1,"args":{"step":3,"device_us":7.5,"op":"Send","bytes":64,"count":16,"peer":1,"group":"pp0","group_size":2,"group_rank":0,"seq":4}},
{"ph":"X","name":"forward","cat":"device","ts":12.0005,"dur":20.0005,"pid":1,"tid":2,"args":{"step":3,"phase":"forward","host_us":5}}
]}`
	p, err := ParseTrainscope("old.json", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"old.json: 1 device event carries no stream (a trace written before streams were recorded): each rank's compute and communication tracks are taken as one stream each",
		"old.json: 1 device-timed range has no device event: kept with its host times only",
	}
	if !slices.Equal(p.Warnings, want) {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(p.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

// A trace written before streams were recorded reads with one stream per
// track class, and says so.
func TestTrainscopeWithoutStreams(t *testing.T) {
	const text = `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope"},
"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cpu:0)"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"cpu:0 compute"}},
{"ph":"M","name":"thread_name","pid":1,"tid":3,"args":{"name":"cpu:0 communication (2)"}},
{"ph":"X","name":"step","cat":"host","ts":0.0005,"dur":100.0005,"pid":1,"tid":1,"args":{"step":3,"stage":0}},
{"ph":"X","name":"forward","cat":"device","ts":10.0005,"dur":5.0005,"pid":1,"tid":1,"args":{"step":3,"stage":0,"chunk":1,"microbatch":2,"phase":"forward","device_us":20}},
{"ph":"X","name":"Send","cat":"p2p","ts":16.0005,"dur":1.0005,"pid":1,"tid":1,"args":{"step":3,"stage":0,"chunk":1,"microbatch":2,"phase":"forward","device_us":7.5,"op":"Send","bytes":64,"count":16,"peer":1,"group":"pp0","group_size":2,"group_rank":0,"seq":4}},
{"ph":"X","name":"forward","cat":"device","ts":12.0005,"dur":20.0005,"pid":1,"tid":2,"args":{"step":3,"stage":0,"chunk":1,"microbatch":2,"phase":"forward","host_us":5}},
{"ph":"X","name":"Send","cat":"p2p","ts":40.0005,"dur":7.5005,"pid":1,"tid":3,"args":{"step":3,"stage":0,"chunk":1,"microbatch":2,"phase":"forward","host_us":1,"op":"Send","bytes":64,"count":16,"peer":1,"group":"pp0","group_size":2,"group_rank":0,"seq":4}}
]}`
	p, err := ParseTrainscope("old.json", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "2 device events carry no stream") {
		t.Errorf("warnings %q", p.Warnings)
	}
	recs := slices.Clone(p.Records)
	slices.SortFunc(recs, func(a, b profiler.Record) int { return cmp.Compare(a.HostStart, b.HostStart) })
	us := time.Microsecond
	fw, send := recs[1], recs[2]
	if fw.Stream != 1 || !fw.HasDevice || fw.DeviceStart != 12*us || fw.DeviceEnd != 32*us || fw.Parent != recs[0].ID || fw.Depth != 1 {
		t.Errorf("forward %+v", fw)
	}
	if send.Stream != 2 || send.DeviceEnd-send.DeviceStart != 7500*time.Nanosecond || send.Collective.Seq != 4 || send.Collective.Peer != 1 || send.Collective.Root != -1 {
		t.Errorf("send %+v", send)
	}
	if alg := float64(64) / 7.5e-6; send.AlgBandwidth != alg {
		t.Errorf("send algbw %g, want %g", send.AlgBandwidth, alg)
	}
}

func TestTrainscopeErrors(t *testing.T) {
	head := `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope"},"traceEvents":[`
	meta := `{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cpu:0)"}},{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},`
	for _, tc := range []struct {
		name, text string
		offset     int64 // of the event: the comma before it, as for Kineto traces
		want       string
	}{
		{"truncated", head + meta + `{"ph":"X","na`, int64(len(head + meta + `{"ph":"X","na`)), "truncated"},
		{"unnamed thread", head + `{"ph":"X","name":"a","cat":"host","ts":1,"dur":1,"pid":1,"tid":9,"args":{}}]}`, int64(len(head)), "no thread_name"},
		{"bad process", head + `{"ph":"M","name":"process_name","pid":1,"args":{"name":"worker"}}]}`, int64(len(head)), `"worker"`},
		{"bad category", head + meta + `{"ph":"X","name":"a","cat":"gpu","ts":1,"dur":1,"pid":1,"tid":1,"args":{}}]}`, int64(len(head+meta)) - 1, "category"},
		{"bad phase", head + meta + `{"ph":"X","name":"a","cat":"host","ts":1,"dur":1,"pid":1,"tid":1,"args":{"phase":"sideways"}}]}`, int64(len(head+meta)) - 1, "sideways"},
		{"wrong type", head + meta + `{"ph":"X","name":"a","cat":"host","ts":1,"dur":1,"pid":1,"tid":1,"args":{"step":"three"}}]}`, int64(len(head+meta)) - 1 + int64(len(`,{"ph":"X","name":"a","cat":"host","ts":1,"dur":1,"pid":1,"tid":1,"args":{"step":"three`)), "step"}, // within the value, as encoding/json counts
		{"not ours", `{"otherData":{"producer":"someone"},"traceEvents":[]}`, 0, "not a trace trainscope wrote"},
		// 2262-04-11T23:47:16Z is 9223372036 s after 1970: a range of 1 s
		// from then would end past 2^63−1 ns; 3000 is past it already.
		{"epoch too late", `{"otherData":{"producer":"trainscope","epoch":"2262-04-11T23:47:16Z"},"traceEvents":[` + meta + `{"ph":"X","name":"a","cat":"host","ts":0,"dur":1000000,"pid":1,"tid":1,"args":{}}]}`, 0, "out of range"},
		{"transfer end far before the device's", head + meta + `{"ph":"X","name":"Send","cat":"p2p","ts":1,"dur":1,"pid":1,"tid":1,"args":{"op":"Send","transfer_end_after_device_us":-9000000000000000}}]}`, int64(len(head+meta)) - 1, "out of range"},
		{"transfer end past int64", head + meta + `{"ph":"X","name":"Send","cat":"p2p","ts":1,"dur":1,"pid":1,"tid":1,"args":{"op":"Send","transfer_end_after_device_us":9000000000000000}}]}`, int64(len(head+meta)) - 1, "out of range"},
		{"epoch far too late", `{"otherData":{"producer":"trainscope","epoch":"3000-01-01T00:00:00Z"},"traceEvents":[]}`, 0, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrainscope("t.json", strings.NewReader(tc.text))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Offset != tc.offset || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "t.json: byte ") {
				t.Errorf("error %q at byte %d, want byte %d mentioning %q", err, pe.Offset, tc.offset, tc.want)
			}
		})
	}
}

// A wrapped run's operations carry no labels, and a device of index -1
// where NCCL did not say which GPU: its trace reads back (profile-run
// report --html reads it so).
func TestTrainscopeUnknownDevice(t *testing.T) {
	dev := runtime.Device{Type: runtime.CUDA, Index: -1}
	var orig []profiler.Record
	for rank := range 2 {
		orig = append(orig, profiler.Record{ID: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank, Labels: profiler.NoLabels, Device: dev,
			HostStart: 10 * time.Microsecond, HostEnd: 30 * time.Microsecond,
			Collective: profiler.Collective{Op: "AllReduce", Bytes: 4096, Count: 1024, DType: "float32", Group: "dp", GroupSize: 2, GroupRank: int32(rank), Peer: -1, Root: -1, Seq: 3, BusFactor: 1}})
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, orig); err != nil {
		t.Fatal(err)
	}
	p, err := Load("trace.json", &buf)
	if err != nil {
		t.Fatalf("reading back a trace with device %s: %v", dev, err)
	}
	if len(p.Records) != 2 {
		t.Fatalf("%d records read back, want 2", len(p.Records))
	}
	for _, r := range p.Records {
		if r.Device != dev || r.Collective.Seq != 3 || r.Collective.Group != "dp" || r.Labels != profiler.NoLabels {
			t.Errorf("read back %+v", r)
		}
	}
	// Below -1 is not a device.
	if _, err := parseDevice("cuda:-2"); err == nil {
		t.Error("cuda:-2 read as a device")
	}
}

// TestTrainscopeSameNamedCommunicators: two communicators named "pp",
// each a send and its receive between its group ranks 0 and 1 (ranks 0→1
// and 2→3), told apart by GroupID. Their sequence numbers are such that
// pairing by name alone would join rank 0's send to rank 3's receive. The
// trace joins each send to its own receive, writes each communicator's
// id, and reads it back.
func TestTrainscopeSameNamedCommunicators(t *testing.T) {
	var recs []profiler.Record
	id := uint64(0)
	add := func(rank int, op string, grank, peer int32, gid, seq uint64, at time.Duration) {
		id++
		recs = append(recs, profiler.Record{ID: id, Name: op, Kind: profiler.KindP2P, Rank: rank, Stream: 1,
			Labels:    profiler.Labels{Step: 0, Stage: profiler.None, Chunk: profiler.None, Microbatch: profiler.None, Phase: profiler.Comm},
			HostStart: at, HostEnd: at + time.Microsecond, HasDevice: true, DeviceStart: at, DeviceEnd: at + 50*time.Microsecond,
			Device:     runtime.Device{Type: runtime.CUDA, Index: rank},
			Collective: profiler.Collective{Op: op, Bytes: 1 << 20, Group: "pp", GroupID: gid, GroupSize: 2, GroupRank: grank, Peer: peer, Root: -1, Seq: seq}})
	}
	const first, second = 0xfedcba9876543210, 0x0123456789abcdef // above 2^53: JSON numbers would lose them
	add(0, "Send", 0, 1, first, 1, time.Millisecond)
	add(1, "Recv", 1, 0, first, 7, time.Millisecond)
	add(2, "Send", 0, 1, second, 5, 2*time.Millisecond)
	add(3, "Recv", 1, 0, second, 2, 2*time.Millisecond)
	var buf bytes.Buffer
	st, err := chrometrace.Write(&buf, recs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Flows != 2 || st.Unmatched != 0 {
		t.Errorf("trace: %d arrows, %d unmatched; want 2 and 0", st.Flows, st.Unmatched)
	}
	raw := buf.String()
	var trace struct {
		TraceEvents []struct {
			Ph     string         `json:"ph"`
			Name   string         `json:"name"`
			Pid    int            `json:"pid"`
			BindID *int           `json:"bind_id"`
			Args   map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(raw), &trace); err != nil {
		t.Fatal(err)
	}
	rankOf := map[int]string{}
	ends := map[int][]string{} // bind id → the ranks it joins
	for _, ev := range trace.TraceEvents {
		if ev.Ph == "M" && ev.Name == "process_name" {
			rankOf[ev.Pid] = strings.Fields(ev.Args["name"].(string))[1]
		}
	}
	for _, ev := range trace.TraceEvents {
		if ev.BindID != nil {
			ends[*ev.BindID] = append(ends[*ev.BindID], rankOf[ev.Pid])
		}
	}
	var pairs []string
	for _, v := range ends {
		slices.Sort(v)
		pairs = append(pairs, strings.Join(v, "-"))
	}
	slices.Sort(pairs)
	if !slices.Equal(pairs, []string{"0-1", "2-3"}) {
		t.Errorf("arrows join ranks %v, want 0-1 and 2-3", pairs)
	}
	p, err := Load("trace.json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 4 {
		t.Fatalf("%d records back, want 4", len(p.Records))
	}
	for _, r := range p.Records {
		want := uint64(first)
		if r.Rank >= 2 {
			want = second
		}
		if r.Collective.GroupID != want || r.Collective.Group != "pp" {
			t.Errorf("rank %d %s: group %q [%x], want pp [%x]", r.Rank, r.Name, r.Collective.Group, r.Collective.GroupID, want)
		}
	}
	// A group id that is not hexadecimal is an error naming it.
	bad := strings.Replace(raw, "fedcba9876543210", "not-hex", 1)
	if _, err := Load("bad.json", strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), `group_id "not-hex"`) {
		t.Errorf("a bad group id: %v", err)
	}
}

// TestTrainscopeTransferEndOnTheEpochsClock: a p2p's transfer end is its
// device end plus transfer_end_after_device_us, on the wall clock of
// otherData.epoch like every other time. One that came to the epoch itself
// (its device end 1 µs after it, the transfer end 1 µs before that) was
// left at 0, read as no transfer end at all; one of times each within
// range whose sum, with the epoch, passes 2^63−1 ns wrapped around to a
// time before 1970. The second is an error at the event's byte offset.
func TestTrainscopeTransferEndOnTheEpochsClock(t *testing.T) {
	trace := func(epoch, devTs, devDur, after string) string {
		return `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope","epoch":"` + epoch + `"},"traceEvents":[` +
			`{"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 0 (cuda:0)"}},` +
			`{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},` +
			`{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"cuda:0 communication"}},` +
			`{"ph":"X","name":"Send","cat":"p2p","ts":0,"dur":1,"pid":1,"tid":1,"args":{"op":"Send","peer":1,"group":"pp","group_size":2,"seq":1,"stream":7,"device_us":` + devDur + `,"transfer_end_after_device_us":` + after + `}},` +
			`{"ph":"X","name":"Send","cat":"p2p","ts":` + devTs + `,"dur":` + devDur + `,"pid":1,"tid":2,"args":{"op":"Send","peer":1,"group":"pp","group_size":2,"seq":1,"stream":7,"host_us":1}}]}`
	}
	t.Run("at the epoch", func(t *testing.T) {
		p, err := ParseTrainscope("t.json", strings.NewReader(trace("2026-01-01T00:00:00Z", "0", "1", "-1")))
		if err != nil {
			t.Fatal(err)
		}
		epoch := time.Duration(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		r := p.Records[0]
		if r.DeviceEnd != epoch+time.Microsecond || r.Collective.TransferEnd != epoch {
			t.Errorf("device end %d, transfer end %d; want %d and %d", r.DeviceEnd, r.Collective.TransferEnd, epoch+time.Microsecond, epoch)
		}
	})
	t.Run("past int64", func(t *testing.T) {
		// 2116-01-01 is 4.607e18 ns after 1970; the device event ends
		// 4.6e18 ns after that (9.207e18, within 2^63−1 = 9.223e18), and
		// the transfer 2.3e18 ns later still.
		text := trace("2116-01-01T00:00:00Z", "2300000000000000", "2300000000000000", "2300000000000000")
		p, err := ParseTrainscope("t.json", strings.NewReader(text))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("error %v, want a *ParseError; transfer end %d", err, p.Records[0].Collective.TransferEnd)
		}
		// The Send's host event: the comma before it.
		if want := int64(strings.Index(text, `,{"ph":"X","name":"Send","cat":"p2p","ts":0`)); pe.Offset != want || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("error %q at byte %d, want byte %d saying out of range", err, pe.Offset, want)
		}
	})
}

// A Kineto trace's host ranges are on the CPU (cpu:0) and its step
// ranges and kernels on the GPU: exported and read back, each range keeps
// its device, and the step accounting (which keys a step's work by
// device) finds the same steps. Read back, every host range once took
// its rank's one device.
func TestKinetoRoundTripKeepsDevices(t *testing.T) {
	for _, name := range []string{"testdata/kineto/rank0.json", "testdata/kineto/rank1.json"} {
		orig := loadFile(t, name).Records
		devs := map[runtime.Device]int{}
		for i := range orig {
			if orig[i].Kind == profiler.KindHost {
				devs[orig[i].Device]++
			}
		}
		if len(devs) < 2 {
			t.Fatalf("%s: host ranges on %v: the test needs ranges of one rank on two devices", name, devs)
		}
		var buf bytes.Buffer
		if _, err := chrometrace.Write(&buf, orig); err != nil {
			t.Fatal(err)
		}
		p, err := Load("trace.json", &buf)
		if err != nil {
			t.Fatal(err)
		}
		back := p.Records
		if len(back) != len(orig) {
			t.Fatalf("%s: %d records read back, %d written", name, len(back), len(orig))
		}
		type key struct {
			name       string
			start, end time.Duration
		}
		want := map[key][]runtime.Device{}
		for i := range orig {
			k := key{orig[i].Name, orig[i].HostStart, orig[i].HostEnd}
			want[k] = append(want[k], orig[i].Device)
		}
		for i := range back {
			r := &back[i]
			k := key{r.Name, r.HostStart, r.HostEnd}
			ws := want[k]
			if j := slices.Index(ws, r.Device); j >= 0 {
				want[k] = slices.Delete(ws, j, j+1)
				continue
			}
			t.Errorf("%s: %q at %v read back on %v, written on %v", name, r.Name, r.HostStart, r.Device, ws)
		}
		a, b := profiler.StepBreakdown(orig), profiler.StepBreakdown(back)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: steps of the records read back:\n%+v\nof those written:\n%+v", name, b, a)
		}
	}
}
