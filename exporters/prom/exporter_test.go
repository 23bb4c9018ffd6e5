package prom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu" // host backend: the default describer finds it
)

const host = "node-7"

var (
	cpu0  = runtime.Device{Type: runtime.CPU, Index: 0}
	cuda3 = runtime.Device{Type: runtime.CUDA, Index: 3}
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// rec builds a record; times in milliseconds, device times only when
// devEnd > devStart.
func rec(id, parent uint64, depth int, name string, kind profiler.Kind, hostStart, hostEnd, devStart, devEnd float64) profiler.Record {
	r := profiler.Record{
		ID: id, Parent: parent, Depth: depth, Name: name, Kind: kind, Device: cpu0,
		Labels:    profiler.Labels{Step: 0, Microbatch: profiler.None, Stage: 0, Chunk: profiler.None},
		HostStart: ms(hostStart), HostEnd: ms(hostEnd),
	}
	if devEnd > devStart {
		r.HasDevice, r.DeviceStart, r.DeviceEnd = true, ms(devStart), ms(devEnd)
	}
	return r
}

func action(id, parent uint64, name string, ph profiler.Phase, chunk, mb int, devStart, devEnd float64) profiler.Record {
	r := rec(id, parent, 1, name, profiler.KindDevice, devStart-0.5, devEnd, devStart, devEnd)
	r.Phase, r.Chunk, r.Microbatch = ph, int16(chunk), int32(mb)
	return r
}

func collective(id, parent uint64, op, group string, bytes int64, factor float64, size, devStart, devEnd float64) profiler.Record {
	r := rec(id, parent, 1, op, profiler.KindCollective, devStart, devEnd, devStart, devEnd)
	r.Collective = profiler.Collective{Op: op, Bytes: bytes, Group: group, GroupSize: int32(size), Peer: -1, Root: -1, BusFactor: factor}
	if op == "Send" || op == "Recv" {
		r.Kind, r.Collective.Peer = profiler.KindP2P, 1
	}
	secs := r.DeviceDuration().Seconds()
	r.AlgBandwidth = float64(bytes) / secs
	r.BusBandwidth = r.AlgBandwidth * factor
	return r
}

// series writes one sample line with its labels sorted by name, as the
// exposition format compares them.
func series(name string, v float64, labels ...string) string {
	type kv struct{ k, v string }
	var l []kv
	for i := 0; i+1 < len(labels); i += 2 {
		l = append(l, kv{labels[i], labels[i+1]})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].k < l[j].k })
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, x := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", x.k, x.v)
	}
	fmt.Fprintf(&b, "} %v\n", v)
	return b.String()
}

func family(name, typ, help string, lines ...string) string {
	return fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n%s", name, help, name, typ, strings.Join(lines, ""))
}

// histogram writes the expected exposition of one histogram series from
// its observations.
func histogram(name string, bounds, obs []float64, labels ...string) string {
	var b strings.Builder
	sum := 0.0
	for _, o := range obs {
		sum += o
	}
	for _, ub := range bounds {
		n := 0
		for _, o := range obs {
			if o <= ub {
				n++
			}
		}
		b.WriteString(series(name+"_bucket", float64(n), append(slices.Clone(labels), "le", fmt.Sprint(ub))...))
	}
	b.WriteString(series(name+"_bucket", float64(len(obs)), append(slices.Clone(labels), "le", "+Inf")...))
	b.WriteString(series(name+"_sum", sum, labels...))
	b.WriteString(series(name+"_count", float64(len(obs)), labels...))
	return b.String()
}

func help(t *testing.T, reg prometheus.Gatherer, name string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetHelp()
		}
	}
	t.Fatalf("no metric family %s", name)
	return ""
}

// A hand-built step on one rank: two overlapping actions, a host range and
// two collectives. Every exported value is computed here from the records.
func TestConsumeHandBuiltStep(t *testing.T) {
	buckets := []float64{0.001, 0.004, 0.016}
	// Per-rank detail, classic buckets only: the text format below cannot
	// state native buckets.
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithDetail(true), prom.WithNativeBucketFactor(1),
		prom.WithRangeBuckets(buckets), prom.WithStepBuckets(buckets), prom.WithDurationBuckets(buckets), prom.WithBandwidthBuckets([]float64{1e6, 1e9}))
	if err != nil {
		t.Fatal(err)
	}
	step := rec(1, 0, 0, "step", profiler.KindHost, 0, 10, 0, 0)
	recs := []profiler.Record{
		action(2, 1, "forward", profiler.Forward, 0, 0, 2, 5),
		action(3, 1, "backward", profiler.Backward, 0, 0, 4, 8), // overlaps forward: busy is the union
		rec(4, 1, 1, "load_batch", profiler.KindHost, 0.1, 0.6, 0, 0),
		collective(5, 1, "AllReduce", "dp0", 4096, 1.0, 2, 8, 9),
		collective(6, 1, "Send", "pp0", 1000, 1.0, 2, 9, 9.5),
		step,
	}
	// Two batches, the step last, as the profiler delivers them.
	e.Consume(recs[:3])
	e.Consume(recs[3:])

	rank := []string{"Hostname", host, "rank", "0", "gpu", "0", "UUID", ""}
	with := func(l ...string) []string { return append(slices.Clone(rank), l...) }

	// Records by name.
	var lines []string
	for _, r := range recs {
		lines = append(lines, series("trainscope_records_total", 1, with("name", r.Name)...))
	}
	want := family("trainscope_records_total", "counter", help(t, e.Registry(), "trainscope_records_total"), lines...)
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_records_total"); err != nil {
		t.Error(err)
	}

	// Host and device histograms per range.
	var host, dev []string
	for _, r := range recs {
		l := with("name", r.Name, "kind", r.Kind.String(), "stage", "0", "chunk", "", "phase", r.Phase.String())
		if r.Chunk >= 0 {
			l = with("name", r.Name, "kind", r.Kind.String(), "stage", "0", "chunk", fmt.Sprint(r.Chunk), "phase", r.Phase.String())
		}
		host = append(host, histogram("trainscope_range_host_seconds", buckets, []float64{(r.HostEnd - r.HostStart).Seconds()}, l...))
		if r.HasDevice {
			dev = append(dev, histogram("trainscope_range_device_seconds", buckets, []float64{(r.DeviceEnd - r.DeviceStart).Seconds()}, l...))
		}
	}
	want = family("trainscope_range_host_seconds", "histogram", help(t, e.Registry(), "trainscope_range_host_seconds"), host...) +
		family("trainscope_range_device_seconds", "histogram", help(t, e.Registry(), "trainscope_range_device_seconds"), dev...)
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_range_host_seconds", "trainscope_range_device_seconds"); err != nil {
		t.Error(err)
	}

	// Busy: forward [2,5] ∪ backward [4,8] = [2,8]; idle: the rest of the
	// 10 ms step.
	busy, idle := ms(8-2).Seconds(), (ms(10) - ms(8-2)).Seconds()
	stage := with("stage", "0")
	want = family("trainscope_stage_busy_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_busy_seconds_total"), series("trainscope_stage_busy_seconds_total", busy, stage...)) +
		family("trainscope_stage_idle_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_idle_seconds_total"), series("trainscope_stage_idle_seconds_total", idle, stage...)) +
		family("trainscope_step_seconds", "histogram", help(t, e.Registry(), "trainscope_step_seconds"), histogram("trainscope_step_seconds", buckets, []float64{ms(10).Seconds()}, stage...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want),
		"trainscope_stage_busy_seconds_total", "trainscope_stage_idle_seconds_total", "trainscope_step_seconds"); err != nil {
		t.Error(err)
	}

	// Collectives: bytes, bus bytes, and the power-of-two size bucket.
	ar := with("op", "AllReduce", "group", "dp0", "size", "4096")
	send := with("op", "Send", "group", "pp0", "size", "1024")
	want = family("trainscope_collective_bytes_total", "counter", help(t, e.Registry(), "trainscope_collective_bytes_total"),
		series("trainscope_collective_bytes_total", 4096, ar...), series("trainscope_collective_bytes_total", 1000, send...)) +
		family("trainscope_collective_bus_bytes_total", "counter", help(t, e.Registry(), "trainscope_collective_bus_bytes_total"),
			series("trainscope_collective_bus_bytes_total", 4096*1.0, ar...), series("trainscope_collective_bus_bytes_total", 1000*1.0, send...)) +
		family("trainscope_collective_seconds", "histogram", help(t, e.Registry(), "trainscope_collective_seconds"),
			histogram("trainscope_collective_seconds", buckets, []float64{ms(1).Seconds()}, ar...),
			histogram("trainscope_collective_seconds", buckets, []float64{ms(0.5).Seconds()}, send...)) +
		family("trainscope_collective_busbw_bytes_per_second", "histogram", help(t, e.Registry(), "trainscope_collective_busbw_bytes_per_second"),
			histogram("trainscope_collective_busbw_bytes_per_second", []float64{1e6, 1e9}, []float64{4096 / ms(1).Seconds()}, ar...),
			histogram("trainscope_collective_busbw_bytes_per_second", []float64{1e6, 1e9}, []float64{1000 / ms(0.5).Seconds()}, send...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want),
		"trainscope_collective_bytes_total", "trainscope_collective_bus_bytes_total", "trainscope_collective_seconds", "trainscope_collective_busbw_bytes_per_second"); err != nil {
		t.Error(err)
	}

	// An action of the accounted step arriving now is late, not busy.
	e.Consume([]profiler.Record{action(7, 1, "forward", profiler.Forward, 1, 0, 8, 9.9)})
	want = family("trainscope_stage_late_ranges_total", "counter", help(t, e.Registry(), "trainscope_stage_late_ranges_total"), series("trainscope_stage_late_ranges_total", 1, stage...)) +
		family("trainscope_stage_busy_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_busy_seconds_total"), series("trainscope_stage_busy_seconds_total", busy, stage...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_stage_late_ranges_total", "trainscope_stage_busy_seconds_total"); err != nil {
		t.Error(err)
	}
}

// Busy time is the union of the actions' device intervals clipped to the
// step, less a wait on their stream, over many random layouts, checked
// against a millisecond grid.
func TestBusyIsClippedUnion(t *testing.T) {
	for seed := range 50 {
		e, err := prom.New(nil, prom.WithHostname(host))
		if err != nil {
			t.Fatal(err)
		}
		// Step from 10 to 90 ms; actions anywhere in 0..100 ms, whole ms.
		var batch []profiler.Record
		covered := make([]bool, 100)
		x := uint32(seed*2654435761 + 1)
		next := func(n uint32) uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return x % n }
		for i := range 12 {
			s := next(95)
			d := 1 + next(20)
			end := min(s+d, 100)
			ph := profiler.Forward
			if i%2 == 1 {
				ph = profiler.Backward
			}
			batch = append(batch, action(uint64(i+2), 1, "forward", ph, 0, i, float64(s), float64(end)))
			for m := s; m < end; m++ {
				if m >= 10 && m < 90 {
					covered[m] = true
				}
			}
		}
		// A collective on another stream takes nothing away; a wait for
		// input on the actions' stream, 30–40 ms, does.
		coll := collective(51, 1, "AllReduce", "dp0", 8, 1, 2, 0, 100)
		coll.Stream = 9
		wait := action(52, 1, "recv", profiler.Comm, 0, 0, 30, 40)
		batch = append(batch, coll, wait)
		for m := 30; m < 40; m++ {
			covered[m] = false
		}
		batch = append(batch, rec(1, 0, 0, "step", profiler.KindHost, 10, 90, 0, 0))
		e.Consume(batch)
		n := 0
		for _, c := range covered {
			if c {
				n++
			}
		}
		wantBusy, wantIdle := ms(float64(n)).Seconds(), (ms(80) - ms(float64(n))).Seconds()
		got := gatherValues(t, e.Registry())
		key := `{Hostname="node-7",UUID="",gpu="0",rank="0",stage="0"}`
		if b := got["trainscope_stage_busy_seconds_total"+key]; math.Abs(b-wantBusy) > 1e-12 {
			t.Errorf("seed %d: busy %v, want %v", seed, b, wantBusy)
		}
		if i := got["trainscope_stage_idle_seconds_total"+key]; math.Abs(i-wantIdle) > 1e-12 {
			t.Errorf("seed %d: idle %v, want %v", seed, i, wantIdle)
		}
	}
}

// gatherValues flattens counters, gauges and histogram counts and sums into
// "name{labels}" → value, labels sorted as the registry sorts them.
func gatherValues(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteByte('{')
			for i, l := range m.GetLabel() {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
			}
			b.WriteByte('}')
			k := b.String()
			switch {
			case m.Counter != nil:
				out[mf.GetName()+k] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[mf.GetName()+k] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"+k] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+k] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

type fakeStats profiler.Stats

func (f *fakeStats) Stats() profiler.Stats { return profiler.Stats(*f) }

func TestStatsCollectorReadsAtScrape(t *testing.T) {
	s := &fakeStats{Recorders: 4, Records: 100, Pending: 3, Dropped: 5, Overflow: 6, EventDrops: 7, Unbalanced: 8, Errors: 9, Abandoned: 10, Discarded: 11, SinkFailures: 12}
	c := prom.NewStatsCollector(s)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	check := func() {
		t.Helper()
		got := gatherValues(t, reg)
		want := map[string]float64{
			"trainscope_backend_errors_total{}":    float64(s.Errors),
			"trainscope_event_shortages_total{}":   float64(s.EventDrops),
			"trainscope_recorders{}":               float64(s.Recorders),
			"trainscope_records_dropped_total{}":   float64(s.Dropped),
			"trainscope_records_kept{}":            float64(s.Records),
			"trainscope_records_overflow_total{}":  float64(s.Overflow),
			"trainscope_records_pending{}":         float64(s.Pending),
			"trainscope_unbalanced_ends_total{}":   float64(s.Unbalanced),
			"trainscope_device_unfinished_total{}": float64(s.Abandoned),
			"trainscope_records_discarded_total{}": float64(s.Discarded),
			"trainscope_sink_failures_total{}":     float64(s.SinkFailures),
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d series, want %d: %v", len(got), len(want), got)
		}
		if n := testutil.CollectAndCount(c, "trainscope_records_dropped_total"); n != 1 {
			t.Errorf("%d dropped series, want 1", n)
		}
	}
	check()
	// The collector reads at scrape time: later counts show.
	s.Dropped, s.Records = 50, 1000
	check()
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP trainscope_records_pending Device ranges whose events have not completed yet.
# TYPE trainscope_records_pending gauge
trainscope_records_pending 3
`), "trainscope_records_pending"); err != nil {
		t.Error(err)
	}
}

func TestDeviceLabelsJoinDCGM(t *testing.T) {
	describer := func(tp runtime.DeviceType) runtime.DeviceDescriber {
		if tp == runtime.CUDA {
			return fakeDescriber{}
		}
		return nil
	}
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithDescriber(describer), prom.WithDetail(true))
	if err != nil {
		t.Fatal(err)
	}
	a := rec(1, 0, 0, "step", profiler.KindHost, 0, 1, 0, 0)
	a.Rank, a.Device = 5, cuda3
	b := rec(1, 0, 0, "step", profiler.KindHost, 0, 1, 0, 0)
	b.Rank = 2
	e.Consume([]profiler.Record{a, b})
	got := gatherValues(t, e.Registry())
	for _, k := range []string{
		`trainscope_records_total{Hostname="node-7",UUID="GPU-fake-3",gpu="3",name="step",rank="5"}`,
		`trainscope_records_total{Hostname="node-7",UUID="",gpu="0",name="step",rank="2"}`,
	} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1; have %v", k, got[k], keys(got, "trainscope_records_total"))
		}
	}
}

type fakeDescriber struct{}

func (fakeDescriber) DeviceName(i int) (string, error) { return "Fake GPU", nil }
func (fakeDescriber) DeviceUUID(i int) (string, error) { return fmt.Sprintf("GPU-fake-%d", i), nil }

func keys(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func TestDeliveryCounters(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	var d prom.Delivery
	if err := e.AddDelivery("otel", prom.DeliveryFunc(func() prom.Delivery { return d })); err != nil {
		t.Fatal(err)
	}
	if err := e.AddDelivery("otel", prom.DeliveryFunc(func() prom.Delivery { return d })); err == nil {
		t.Error("second AddDelivery of one name: no error")
	}
	d = prom.Delivery{Delivered: 90, Failed: 7, Dropped: 3, Unsampled: 900}
	got := gatherValues(t, e.Registry())
	for outcome, v := range map[string]uint64{"delivered": 90, "failed": 7, "dropped": 3, "unsampled": 900} {
		k := fmt.Sprintf(`trainscope_exporter_items_total{Hostname="node-7",exporter="otel",outcome=%q}`, outcome)
		if got[k] != float64(v) {
			t.Errorf("%s = %v, want %d", k, got[k], v)
		}
	}
}

func TestNamesBeyondBoundCountAsOther(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithMaxNames(10))
	if err != nil {
		t.Fatal(err)
	}
	var batch []profiler.Record
	for i := range 1000 {
		batch = append(batch, rec(uint64(i+1), 0, 0, fmt.Sprintf("range-%d", i), profiler.KindHost, 0, 1, 0, 0))
	}
	e.Consume(batch)
	got := gatherValues(t, e.Registry())
	names := keys(got, "trainscope_records_total")
	if len(names) != 11 {
		t.Errorf("%d records_total series, want 10 names + other: %v", len(names), names)
	}
	other := `trainscope_records_total{Hostname="node-7",name="other"}`
	if got[other] != 990 {
		t.Errorf("%s = %v, want 990", other, got[other])
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []prom.Option{prom.WithMaxNames(0), prom.WithMaxGroups(-1), prom.WithDurationBuckets(nil), prom.WithRangeBuckets([]float64{1, 1}), prom.WithBandwidthBuckets([]float64{2, 1})} {
		if _, err := prom.New(nil, o); err == nil {
			t.Errorf("New accepted a bad option")
		}
	}
	e, _ := prom.New(nil, prom.WithHostname(host))
	err := e.Register(collectors.NewGoCollector())
	if err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := e.Register(collectors.NewGoCollector()); !errors.As(err, &are) {
		t.Errorf("second Register: %v, want AlreadyRegisteredError", err)
	}
}

// A step cut short (its work failed or was interrupted) is no step time:
// the step histogram and busy/idle leave it out; its records still count.
func TestCutShortStepNotObserved(t *testing.T) {
	buckets := []float64{0.001, 0.004, 0.016}
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithNativeBucketFactor(1), prom.WithStepBuckets(buckets))
	if err != nil {
		t.Fatal(err)
	}
	whole := rec(1, 0, 0, "step", profiler.KindHost, 0, 10, 0, 0)
	cut := rec(3, 0, 0, "step", profiler.KindHost, 11, 12, 0, 0)
	cut.Step, cut.CutShort = 1, true
	fwd := action(4, 3, "forward", profiler.Forward, 0, 0, 11, 11.5)
	fwd.Step = 1
	e.Consume([]profiler.Record{action(2, 1, "forward", profiler.Forward, 0, 0, 2, 5), whole, fwd, cut})
	stage := []string{"Hostname", host, "rank", "0", "gpu", "0", "UUID", "", "stage", "0"}
	want := family("trainscope_step_seconds", "histogram", help(t, e.Registry(), "trainscope_step_seconds"),
		histogram("trainscope_step_seconds", buckets, []float64{ms(10).Seconds()}, stage...)) +
		family("trainscope_stage_busy_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_busy_seconds_total"),
			series("trainscope_stage_busy_seconds_total", ms(3).Seconds(), stage...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_step_seconds", "trainscope_stage_busy_seconds_total"); err != nil {
		t.Error(err)
	}
	want = family("trainscope_records_total", "counter", help(t, e.Registry(), "trainscope_records_total"),
		series("trainscope_records_total", 2, "Hostname", host, "name", "forward"), series("trainscope_records_total", 2, "Hostname", host, "name", "step"))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_records_total"); err != nil {
		t.Error(err)
	}
}

// TestNamesNotUTF8: label values must be UTF-8, and client_golang panics
// on one that is not; a range or group named in Latin-1 (an imported
// log) gets its series, the name made valid, and a hostname that is not
// UTF-8 is refused.
func TestNamesNotUTF8(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	recs := []profiler.Record{
		rec(1, 0, 0, "matmul_b\xe9ckward", profiler.KindHost, 0, 1, 0, 0),
		rec(2, 0, 0, "matmul_b\xe9ckward", profiler.KindHost, 1, 2, 0, 0),
		collective(3, 0, "AllReduce", "dp\xfe", 4096, 1.0, 2, 8, 9),
	}
	e.Consume(recs)
	want := family("trainscope_records_total", "counter", help(t, e.Registry(), "trainscope_records_total"),
		series("trainscope_records_total", 1, "Hostname", host, "name", "AllReduce"),
		series("trainscope_records_total", 2, "Hostname", host, "name", "matmul_b\uFFFDckward"))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_records_total"); err != nil {
		t.Error(err)
	}
	if _, err := prom.New(nil, prom.WithHostname("n\xff")); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("hostname not UTF-8: %v", err)
	}
}

// Collective operation names come from outside (an imported trace's own,
// Ingest's): beyond prom.MaxOps they are counted as "other", so the
// per-rank series budget holds whatever names come.
func TestCollectiveOpsBounded(t *testing.T) {
	e, err := prom.New(nil, prom.WithMaxGroups(4), prom.WithMaxNames(4))
	if err != nil {
		t.Fatal(err)
	}
	var recs []profiler.Record
	for i := range 1000 {
		op := fmt.Sprintf("op-%d", i)
		recs = append(recs, profiler.Record{ID: uint64(i + 1), Name: op, Kind: profiler.KindCollective, Rank: 0,
			Device:    runtime.Device{Type: runtime.CPU},
			HostStart: 0, HostEnd: time.Millisecond,
			Collective: profiler.Collective{Op: op, Group: "dp", GroupSize: 2, Peer: -1, Root: -1, Bytes: 1024, BusFactor: 1}})
	}
	e.Consume(recs)
	if n := testutil.CollectAndCount(e.Registry(), "trainscope_collective_bytes_total"); n != prom.MaxOps+1 {
		t.Errorf("%d collective_bytes series for 1000 op names, want %d (MaxOps and other)", n, prom.MaxOps+1)
	}
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var other float64
	for _, mf := range mfs {
		if mf.GetName() != "trainscope_collective_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == prom.OtherLabel {
					other += m.GetCounter().GetValue()
				}
			}
		}
	}
	if want := float64(1000-prom.MaxOps) * 1024; other != want {
		t.Errorf("bytes under op %q: %v, want %v (every op past the bound)", prom.OtherLabel, other, want)
	}
}

// TestDeviceUnfinishedIsCounted: a device range on a stream that never
// reaches it, given up by AbandonPending, shows as one in
// trainscope_device_unfinished_total of the profiler's exporter, and the
// range itself in trainscope_records_total.
func TestDeviceUnfinishedIsCounted(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e, err := prom.New(p, prom.WithHostname(host)) // its profiler's sink
	if err != nil {
		t.Fatal(err)
	}
	dev := runtime.Device{Type: runtime.CPU, Index: 6}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	defer func() { close(held); _ = s.Synchronize(context.Background()); _ = s.Destroy() }()
	if err := cpu.Enqueue(s, func() { <-held }); err != nil {
		t.Fatal(err)
	}
	r.StartDevice("hung", s)
	r.End()
	if got := gatherValues(t, e.Registry())[`trainscope_device_unfinished_total{Hostname="`+host+`"}`]; got != 0 {
		t.Errorf("before AbandonPending: %v unfinished, want 0", got)
	}
	n, err := p.AbandonPending(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("AbandonPending = %d, %v; want 1 range given up", n, err)
	}
	got := gatherValues(t, e.Registry())
	if v := got[`trainscope_device_unfinished_total{Hostname="`+host+`"}`]; v != 1 {
		t.Errorf("trainscope_device_unfinished_total = %v, want 1 (series: %v)", v, got)
	}
	if v := got[`trainscope_records_total{Hostname="`+host+`",name="hung"}`]; v != 1 {
		t.Errorf("trainscope_records_total for the hung range = %v, want 1", v)
	}
}

// The run's info series names the run and the trainscope that measured
// it: a test binary of this module is its main module at "(devel)".
func TestRunInfo(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithRunID("20261206-0900-abc"))
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP trainscope_run_info Always 1; its run label identifies the training run these series describe, its version label the trainscope that measured it.
# TYPE trainscope_run_info gauge
trainscope_run_info{Hostname="node-7",run="20261206-0900-abc",version="(devel)"} 1
`
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_run_info"); err != nil {
		t.Error(err)
	}
}
