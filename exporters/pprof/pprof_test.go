package pprof_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	_ "github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

var update = flag.Bool("update", false, "rewrite golden files")

const us = time.Microsecond

// fixture is a hand-built trace of two ranks. Rank 0's step holds a
// forward range with a linear op and a send whose Send runs on the
// device past the send's own device interval (another stream), a second
// forward, and a host-only optimizer range holding an AllReduce. Rank 1's
// step holds a backward and a Recv.
func fixture() []profiler.Record {
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	cpu1 := runtime.Device{Type: runtime.CPU, Index: 1}
	lbl := func(stage, chunk, mb int, ph profiler.Phase) profiler.Labels {
		return profiler.Labels{Step: 1, Stage: int16(stage), Chunk: int16(chunk), Microbatch: int32(mb), Phase: ph}
	}
	step0, step1 := lbl(0, -1, -1, profiler.PhaseNone), lbl(1, -1, -1, profiler.PhaseNone)
	fwd, bwd, fwd1 := lbl(0, 0, 0, profiler.Forward), lbl(1, 0, 0, profiler.Backward), lbl(1, 0, 0, profiler.Forward)
	opt := lbl(0, -1, -1, profiler.Optimizer)
	dev := func(r profiler.Record, start, end time.Duration) profiler.Record {
		r.HasDevice, r.DeviceStart, r.DeviceEnd = true, start, end
		return r
	}
	// A device range inside a device-timed one, as the recorder marks it.
	nested := func(r profiler.Record) profiler.Record {
		r.DeviceNested = true
		return r
	}
	return []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Device: cpu0, Labels: step0, HostStart: 0, HostEnd: 1000 * us},
		dev(profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: fwd,
			HostStart: 10 * us, HostEnd: 310 * us}, 20*us, 420*us),
		nested(dev(profiler.Record{ID: 3, Parent: 2, Depth: 2, Name: "linear", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: fwd,
			HostStart: 20 * us, HostEnd: 120 * us}, 30*us, 330*us)),
		nested(dev(profiler.Record{ID: 4, Parent: 2, Depth: 2, Name: "send", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: fwd,
			HostStart: 130 * us, HostEnd: 140 * us}, 330*us, 331*us)),
		nested(dev(profiler.Record{ID: 5, Parent: 4, Depth: 3, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Device: cpu0, Labels: fwd,
			HostStart: 131 * us, HostEnd: 139 * us, Collective: profiler.Collective{Op: "Send", Bytes: 4096, Peer: 1, Root: -1,
				Group: "pp0", GroupSize: 2, GroupRank: 0, Seq: 0}}, 335*us, 435*us)),
		dev(profiler.Record{ID: 6, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: fwd,
			HostStart: 400 * us, HostEnd: 600 * us}, 420*us, 520*us),
		{ID: 7, Parent: 1, Depth: 1, Name: "optimizer", Rank: 0, Device: cpu0, Labels: opt, HostStart: 700 * us, HostEnd: 900 * us},
		dev(profiler.Record{ID: 8, Parent: 7, Depth: 2, Name: "AllReduce", Kind: profiler.KindCollective, Rank: 0, Device: cpu0, Labels: opt,
			HostStart: 710 * us, HostEnd: 720 * us, Collective: profiler.Collective{Op: "AllReduce", Bytes: 1 << 20, Peer: -1, Root: -1,
				Group: "dp0", GroupSize: 1, Seq: 0}}, 720*us, 820*us),
		{ID: 1, Name: "step", Rank: 1, Device: cpu1, Labels: step1, HostStart: 5 * us, HostEnd: 505 * us},
		dev(profiler.Record{ID: 2, Parent: 1, Depth: 1, Name: "backward", Kind: profiler.KindDevice, Rank: 1, Device: cpu1, Labels: bwd,
			HostStart: 100 * us, HostEnd: 200 * us}, 150*us, 400*us),
		dev(profiler.Record{ID: 3, Parent: 1, Depth: 1, Name: "Recv", Kind: profiler.KindP2P, Rank: 1, Device: cpu1, Labels: fwd1,
			HostStart: 210 * us, HostEnd: 215 * us, Collective: profiler.Collective{Op: "Recv", Bytes: 4096, Peer: 0, Root: -1,
				Group: "pp0", GroupSize: 2, GroupRank: 1, Seq: 0}}, 300*us, 440*us),
	}
}

// epoch is a fixed wall-clock start for golden output.
var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// written returns the profile Write produces for records, decoded.
func written(t testing.TB, records []profiler.Record, opts ...pprof.Option) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	if _, err := pprof.Write(&buf, records, opts...); err != nil {
		t.Fatal(err)
	}
	if b := buf.Bytes(); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("output does not start with the gzip magic: % x", b[:min(len(b), 4)])
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGolden(t *testing.T) {
	got := written(t, fixture(), pprof.WithEpoch(epoch)).String()
	path := filepath.Join("testdata", "fixture.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("profile differs from %s (run with -update to accept):\n%s", path, got)
	}
}

// TestWriteMatchesBuild checks that the streaming encoder writes exactly
// the profile Build returns, as pprof's own encoder writes it.
func TestWriteMatchesBuild(t *testing.T) {
	for name, recs := range map[string][]profiler.Record{"fixture": fixture(), "synthetic": synthtrace.Trainer(2, 2)} {
		t.Run(name, func(t *testing.T) {
			built, err := pprof.Build(recs, pprof.WithEpoch(epoch))
			if err != nil {
				t.Fatal(err)
			}
			if err := built.CheckValid(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := built.Write(&buf); err != nil {
				t.Fatal(err)
			}
			viaPprof, err := profile.Parse(&buf)
			if err != nil {
				t.Fatal(err)
			}
			ours := written(t, recs, pprof.WithEpoch(epoch))
			if a, b := viaPprof.String(), ours.String(); a != b {
				t.Errorf("Write and Build+profile.Write differ:\n--- Build:\n%s\n--- Write:\n%s", a, b)
			}
			// Encoding the decoded profile again changes nothing.
			buf.Reset()
			if err := ours.Write(&buf); err != nil {
				t.Fatal(err)
			}
			again, err := profile.Parse(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if again.String() != ours.String() {
				t.Error("decode → encode → decode changed the profile")
			}
		})
	}
}

// figures is what pprof shows per function for one sample type: flat
// (samples whose leaf is the function) and cum (samples whose stack holds
// it, once per sample), computed here from the decoded samples.
type figures struct{ flat, cum map[string]int64 }

func tally(p *profile.Profile, sampleType string) (figures, int64) {
	idx := slices.IndexFunc(p.SampleType, func(v *profile.ValueType) bool { return v.Type == sampleType })
	f := figures{map[string]int64{}, map[string]int64{}}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		f.flat[s.Location[0].Line[0].Function.Name] += v
		seen := map[string]bool{}
		for _, l := range s.Location {
			name := l.Line[0].Function.Name
			if !seen[name] {
				seen[name] = true
				f.cum[name] += v
			}
		}
	}
	return f, total
}

// reportTotals sums profiler.Summarize over ranks and tags.
type reportTotals struct {
	host, device, count map[string]int64
	deviceTimed         map[string]bool // every range of the name has a device time
	topHost, outerDev   int64
}

func report(records []profiler.Record) reportTotals {
	rt := reportTotals{map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]bool{}, 0, 0}
	for _, g := range profiler.Summarize(records) {
		rt.topHost += int64(g.HostTotal)
		rt.outerDev += int64(g.DeviceTotal)
		for _, n := range g.Names {
			timed, seen := rt.deviceTimed[n.Name]
			rt.deviceTimed[n.Name] = (timed || !seen) && n.DeviceCount == n.Count
			rt.host[n.Name] += int64(n.HostTotal)
			rt.device[n.Name] += int64(n.DeviceTotal)
			rt.count[n.Name] += int64(n.Count)
		}
	}
	return rt
}

// checkAgainstReport asserts every agreement Write documents.
func checkAgainstReport(t *testing.T, p *profile.Profile, records []profiler.Record) {
	t.Helper()
	rt := report(records)
	host, hostTotal := tally(p, pprof.HostTime)
	device, deviceTotal := tally(p, pprof.DeviceTime)
	ranges, rangeTotal := tally(p, pprof.Ranges)
	if len(p.Sample) != len(records) || rangeTotal != int64(len(records)) {
		t.Errorf("%d samples holding %d ranges, want %d of each", len(p.Sample), rangeTotal, len(records))
	}
	if hostTotal != rt.topHost {
		t.Errorf("host_time total %d, report's top-level host time %d", hostTotal, rt.topHost)
	}
	if deviceTotal != rt.outerDev {
		t.Errorf("device_time total %d, report's outermost device time %d", deviceTotal, rt.outerDev)
	}
	for name, count := range rt.count {
		if ranges.flat[name] != count {
			t.Errorf("%s: ranges flat %d, report count %d", name, ranges.flat[name], count)
		}
		if host.cum[name] != rt.host[name] {
			t.Errorf("%s: host_time cum %d, report host total %d", name, host.cum[name], rt.host[name])
		}
		if rt.deviceTimed[name] && device.cum[name] != rt.device[name] {
			t.Errorf("%s: device_time cum %d, report device total %d", name, device.cum[name], rt.device[name])
		}
	}
	if len(host.cum) != len(rt.count) {
		t.Errorf("profile names %v, report names %v", keys(host.cum), keys(rt.count))
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestTotalsMatchReport(t *testing.T) {
	recs := fixture()
	p := written(t, recs)
	checkAgainstReport(t, p, recs)

	// The figures themselves, worked out by hand from the fixture, so the
	// test does not only compare the code with itself.
	host, _ := tally(p, pprof.HostTime)
	device, _ := tally(p, pprof.DeviceTime)
	wantHostFlat := map[string]time.Duration{
		"step":    (1000 - 300 - 200 - 200 + 500 - 100 - 5) * us, // both ranks
		"forward": (300 - 100 - 10 + 200) * us, "linear": 100 * us, "send": 2 * us, "Send": 8 * us,
		"optimizer": 190 * us, "AllReduce": 10 * us, "backward": 100 * us, "Recv": 5 * us,
	}
	wantDeviceFlat := map[string]time.Duration{
		"step": 0, "forward": (400 - 300 - 1 + 100) * us, "linear": 300 * us,
		"send": (1 - 100) * us, // its Send ran past it on another stream
		"Send": 100 * us, "optimizer": 0, "AllReduce": 100 * us, "backward": 250 * us, "Recv": 140 * us,
	}
	for name, want := range wantHostFlat {
		if host.flat[name] != int64(want) {
			t.Errorf("%s: host_time flat %v, want %v", name, time.Duration(host.flat[name]), want)
		}
	}
	for name, want := range wantDeviceFlat {
		if device.flat[name] != int64(want) {
			t.Errorf("%s: device_time flat %v, want %v", name, time.Duration(device.flat[name]), want)
		}
	}
	wantCum := map[string][2]time.Duration{ // host, device
		"step": {1500 * us, 990 * us}, "forward": {500 * us, 500 * us}, "send": {10 * us, 1 * us},
		"optimizer": {200 * us, 100 * us},
	}
	for name, want := range wantCum {
		if host.cum[name] != int64(want[0]) || device.cum[name] != int64(want[1]) {
			t.Errorf("%s: cum host %v device %v, want %v %v", name,
				time.Duration(host.cum[name]), time.Duration(device.cum[name]), want[0], want[1])
		}
	}
}

// A name nested inside itself is counted once per stack by pprof's cum,
// as recursion is; the report adds both.
func TestNestedSameName(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: "block", HostStart: 0, HostEnd: 100 * us, Labels: profiler.NoLabels},
		{ID: 2, Parent: 1, Depth: 1, Name: "block", HostStart: 10 * us, HostEnd: 50 * us, Labels: profiler.NoLabels},
	}
	host, total := tally(written(t, recs), pprof.HostTime)
	if host.cum["block"] != int64(100*us) || host.flat["block"] != int64(100*us) || total != int64(100*us) {
		t.Errorf("block cum %d flat %d total %d, want 100us each", host.cum["block"], host.flat["block"], total)
	}
	if rt := report(recs); rt.host["block"] != int64(140*us) {
		t.Errorf("report host total %d, want 140us", rt.host["block"])
	}
}

func TestStacksAndLabels(t *testing.T) {
	p := written(t, fixture())
	var send *profile.Sample
	for _, s := range p.Sample {
		if s.Location[0].Line[0].Function.Name == "Send" {
			send = s
		}
	}
	if send == nil {
		t.Fatal("no Send sample")
	}
	var stack []string
	for _, l := range send.Location {
		stack = append(stack, l.Line[0].Function.Name)
	}
	if want := []string{"Send", "send", "forward", "step"}; !slices.Equal(stack, want) {
		t.Errorf("Send stack %v, want %v (leaf first)", stack, want)
	}
	wantNum := map[string]int64{"rank": 0, "stage": 0, "chunk": 0, "step": 1}
	for k, v := range wantNum {
		if got := send.NumLabel[k]; len(got) != 1 || got[0] != v {
			t.Errorf("label %s = %v, want [%d]", k, got, v)
		}
	}
	if got := send.Label["phase"]; !slices.Equal(got, []string{"forward"}) {
		t.Errorf("label phase = %v", got)
	}
	// One function and one location per distinct name.
	names := map[string]bool{}
	for _, f := range p.Function {
		if names[f.Name] {
			t.Errorf("function %s appears twice", f.Name)
		}
		names[f.Name] = true
	}
	if len(p.Function) != 9 || len(p.Location) != 9 {
		t.Errorf("%d functions, %d locations, want 9 of each", len(p.Function), len(p.Location))
	}
	if p.DefaultSampleType != pprof.HostTime {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
}

func TestMissingParentAndCycles(t *testing.T) {
	recs := []profiler.Record{
		// Parent 9 was dropped: the op starts a stack of its own.
		{ID: 2, Parent: 9, Depth: 1, Name: "orphan", HostStart: 0, HostEnd: 10 * us},
		// Malformed links that form a cycle must not hang the builder.
		{ID: 3, Parent: 4, Name: "a", HostStart: 0, HostEnd: 1 * us},
		{ID: 4, Parent: 3, Name: "b", HostStart: 0, HostEnd: 1 * us},
		{ID: 5, Parent: 5, Name: "self", HostStart: 0, HostEnd: 1 * us},
	}
	p := written(t, recs)
	if len(p.Sample) != len(recs) {
		t.Fatalf("%d samples", len(p.Sample))
	}
	if s := p.Sample[0]; len(s.Location) != 1 || s.Value[0] != int64(10*us) {
		t.Errorf("orphan sample %v %v", s.Location, s.Value)
	}
}

func TestErrors(t *testing.T) {
	if _, err := pprof.Build(nil); !errors.Is(err, pprof.ErrNoRecords) {
		t.Errorf("Build(nil) = %v", err)
	}
	if _, err := pprof.WriteFile(filepath.Join(t.TempDir(), "missing", "x.pb.gz"), fixture()); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	if _, err := pprof.Write(failingWriter{}, fixture()); err == nil {
		t.Error("Write to a failing writer succeeded")
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.pb.gz")
	recs := fixture()
	st, err := pprof.WriteFile(path, recs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != len(recs) {
		t.Errorf("Stats.Samples = %d, want %d", st.Samples, len(recs))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := profile.Parse(f); err != nil {
		t.Fatal(err)
	}
}

// trainerRecords runs the built-in trainer (pp=2, vpp=2, dp=2) profiled and
// returns every record after a Flush.
func trainerRecords(t *testing.T) ([]profiler.Record, *profiler.Profiler) {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	cfg := pipeline.DefaultConfig()
	cfg.Stages, cfg.Chunks, cfg.Replicas = 2, 2, 2
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers, cfg.Steps = 4, 4, 16, 8, 2
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Dropped != 0 || st.Overflow != 0 || st.Pending != 0 {
		t.Fatalf("profiler lost ranges: %+v", st)
	}
	return p.Snapshot(), p
}

func TestTrainerRun(t *testing.T) {
	recs, prof := trainerRecords(t)
	path := filepath.Join(t.TempDir(), "trainer.pb.gz")
	if _, err := pprof.WriteFile(path, recs, pprof.WithEpoch(prof.Epoch())); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReport(t, p, recs)
	for _, name := range []string{"step", "forward", "backward", "linear", "Send", "Recv", "AllReduce"} {
		if !slices.ContainsFunc(p.Function, func(f *profile.Function) bool { return f.Name == name }) {
			t.Errorf("no %s function in the trainer's profile", name)
		}
	}
	first := recs[0].HostStart
	for i := range recs {
		first = min(first, recs[i].HostStart)
	}
	if want := prof.Epoch().Add(first).UnixNano(); p.TimeNanos != want {
		t.Errorf("profile time %d, want %d (epoch + first start)", p.TimeNanos, want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// Comments given with WithComment follow the profile's own, in order.
func TestWithComment(t *testing.T) {
	var buf bytes.Buffer
	if _, err := pprof.Write(&buf, fixture(), pprof.WithComment("partial run: interrupted at step 3"), pprof.WithComment("second")); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.Comments)
	if n < 3 || p.Comments[n-2] != "partial run: interrupted at step 3" || p.Comments[n-1] != "second" {
		t.Errorf("comments %q: want the two given last", p.Comments)
	}
}
