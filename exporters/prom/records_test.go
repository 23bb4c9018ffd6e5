package prom_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// A step range whose end precedes its start (clocks of an imported trace,
// a record made by hand) has no wall time: its idle time is not negative,
// which a counter cannot take (client_golang panics, and the profiler
// would drop the exporter), and the step histogram's sum does not go down.
func TestInvertedStepRange(t *testing.T) {
	buckets := []float64{0.001, 0.004, 0.016}
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithNativeBucketFactor(1), prom.WithStepBuckets(buckets))
	if err != nil {
		t.Fatal(err)
	}
	step := rec(1, 0, 0, "step", profiler.KindHost, 10, 5, 0, 0)
	e.Consume([]profiler.Record{action(2, 1, "forward", profiler.Forward, 0, 0, 6, 7), step})

	// A well-formed step after it: 0–4 ms, forward busy 1–2 ms.
	next := rec(3, 0, 0, "step", profiler.KindHost, 20, 24, 0, 0)
	next.Step = 1
	fwd := action(4, 3, "forward", profiler.Forward, 0, 0, 21, 22)
	fwd.Step = 1
	e.Consume([]profiler.Record{fwd, next})

	stage := []string{"Hostname", host, "rank", "0", "gpu", "0", "UUID", "", "stage", "0"}
	want := family("trainscope_step_seconds", "histogram", help(t, e.Registry(), "trainscope_step_seconds"),
		histogram("trainscope_step_seconds", buckets, []float64{0, 0.004}, stage...)) +
		family("trainscope_stage_busy_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_busy_seconds_total"),
			series("trainscope_stage_busy_seconds_total", 0.001, stage...)) +
		family("trainscope_stage_idle_seconds_total", "counter", help(t, e.Registry(), "trainscope_stage_idle_seconds_total"),
			series("trainscope_stage_idle_seconds_total", 0.003, stage...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want),
		"trainscope_step_seconds", "trainscope_stage_busy_seconds_total", "trainscope_stage_idle_seconds_total"); err != nil {
		t.Error(err)
	}
}

// Ranges whose end precedes their start count as lasting 0 s: a
// histogram's sum is a counter to Prometheus (rate, increase), and one
// that goes down reads as a reset.
func TestInvertedRangesKeepSumsMonotonic(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	r := rec(1, 0, 1, "forward", profiler.KindDevice, 3, 2, 0, 0)
	r.HasDevice, r.DeviceStart, r.DeviceEnd = true, ms(9), ms(8)
	c := collective(2, 0, "AllReduce", "dp0", 4096, 1.0, 2, 0, 0)
	c.HostStart, c.HostEnd = ms(5), ms(4)
	e.Consume([]profiler.Record{rec(3, 0, 1, "forward", profiler.KindDevice, 0, 1, 0, 0), r, c})
	got := gatherValues(t, e.Registry())
	for k, want := range map[string]float64{
		`trainscope_range_host_seconds_sum{Hostname="node-7",name="forward"}`:                                        0.001,
		`trainscope_range_host_seconds_count{Hostname="node-7",name="forward"}`:                                      2,
		`trainscope_range_device_seconds_sum{Hostname="node-7",name="forward"}`:                                      0,
		`trainscope_range_device_seconds_count{Hostname="node-7",name="forward"}`:                                    1,
		`trainscope_collective_seconds_sum{Hostname="node-7",UUID="",gpu="0",group="dp0",op="AllReduce",rank="0"}`:   0,
		`trainscope_collective_seconds_count{Hostname="node-7",UUID="",gpu="0",group="dp0",op="AllReduce",rank="0"}`: 1,
	} {
		if v, ok := got[k]; !ok || math.Abs(v-want) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// A collective with a negative size or bus factor, or a bandwidth that is
// not a number, neither panics (a counter cannot decrease) nor turns a
// sum into NaN or infinity for good; the call's duration still counts.
func TestCollectiveWithUnusableFigures(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	nan := collective(1, 0, "AllReduce", "dp0", 4096, 1.0, 2, 8, 9)
	nan.AlgBandwidth, nan.BusBandwidth = math.NaN(), math.Inf(1)
	neg := collective(2, 0, "AllReduce", "dp0", -1, 1.0, 2, 9, 10)
	neg.AlgBandwidth, neg.BusBandwidth = -1000, -1000
	badFactor := collective(3, 0, "AllReduce", "dp0", 1000, math.NaN(), 2, 10, 12)
	badFactor.BusBandwidth = math.NaN()
	good := collective(4, 0, "AllReduce", "dp0", 2000, 2.0, 2, 12, 13)
	e.Consume([]profiler.Record{nan, neg, badFactor, good})

	got := gatherValues(t, e.Registry())
	l := `{Hostname="node-7",UUID="",gpu="0",group="dp0",op="AllReduce",rank="0"}`
	bw := `{Hostname="node-7",op="AllReduce"}`
	for k, want := range map[string]float64{
		"trainscope_collective_bytes_total" + l:                   4096 + 1000 + 2000,
		"trainscope_collective_bus_bytes_total" + l:               4096 + 2000*2,
		"trainscope_collective_seconds_count" + l:                 4,
		"trainscope_collective_seconds_sum" + l:                   0.005,
		"trainscope_collective_algbw_bytes_per_second_count" + bw: 2,
		"trainscope_collective_algbw_bytes_per_second_sum" + bw:   1000/0.002 + 2000/0.001,
		"trainscope_collective_busbw_bytes_per_second_count" + bw: 1,
		"trainscope_collective_busbw_bytes_per_second_sum" + bw:   2 * 2000 / 0.001,
	} {
		if v, ok := got[k]; !ok || math.Abs(v-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// An exporter name is a label value, which must be UTF-8: a collector
// emitting one that is not panics in the scrape's goroutine, taking the
// training process down. AddDelivery refuses it.
func TestDeliveryNameNotUTF8(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddDelivery("ot\xffel", prom.DeliveryFunc(func() prom.Delivery { return prom.Delivery{Delivered: 1} })); err == nil {
		t.Fatal("AddDelivery took a name that is not UTF-8")
	}
	if _, err := e.Registry().Gather(); err != nil {
		t.Error(err)
	}
}

// A trace id that cannot be an exemplar label value — longer than the 128
// runes OpenMetrics allows an exemplar's labels, or not UTF-8 — made
// client_golang panic inside Consume, taking the step-time observation
// (and the exporter) with it. The observation counts without an
// exemplar; a fit id still gets one.
func TestStepTraceIDUnfitForExemplar(t *testing.T) {
	buckets := []float64{0.001, 0.004, 0.016}
	long := strings.Repeat("ab", 64) // 128 runes, plus the 8 of "trace_id"
	ids := map[int32]string{0: long, 1: "7f\xff00", 2: "4bf92f3577b34da6a3ce929d0e0e4736"}
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithNativeBucketFactor(1), prom.WithStepBuckets(buckets),
		prom.WithStepTraces(func(step int32, _ time.Duration) (string, bool) { return ids[step], true }))
	if err != nil {
		t.Fatal(err)
	}
	for step := range int32(3) {
		// Steps of 3 ms, 5 ms and 7 ms.
		r := rec(uint64(step+1), 0, 0, "step", profiler.KindHost, 0, 3+2*float64(step), 0, 0)
		r.Step = step
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("step %d, trace id %q: Consume panicked: %v", step, ids[step], p)
				}
			}()
			e.Consume([]profiler.Record{r})
		}()
	}
	stage := []string{"Hostname", host, "rank", "0", "gpu", "0", "UUID", "", "stage", "0"}
	want := family("trainscope_step_seconds", "histogram", help(t, e.Registry(), "trainscope_step_seconds"),
		histogram("trainscope_step_seconds", buckets, []float64{0.003, 0.005, 0.007}, stage...))
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "trainscope_step_seconds"); err != nil {
		t.Error(err)
	}
	// Exemplars: only the 7 ms step's, in the 16 ms bucket.
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "trainscope_step_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if x := b.GetExemplar(); x != nil {
					for _, l := range x.GetLabel() {
						got = append(got, l.GetName()+"="+l.GetValue())
					}
					if b.GetUpperBound() != 0.016 || x.GetValue() != 0.007 {
						t.Errorf("exemplar %v of %v s in bucket le=%v, want the 0.007 s step in le=0.016", x.GetLabel(), x.GetValue(), b.GetUpperBound())
					}
				}
			}
		}
	}
	if want := "trace_id=" + ids[2]; len(got) != 1 || got[0] != want {
		t.Errorf("exemplars %q, want [%s]", got, want)
	}
}

// A UUID is a label value, which must be UTF-8; it comes from a backend
// (WithDescriber, a DeviceDescriber of the caller's), and one that is
// not UTF-8 made client_golang panic inside Consume as the device's first
// series was made. The series carry the UUID made valid, as range names
// are.
func TestDeviceUUIDNotUTF8(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host),
		prom.WithDescriber(func(runtime.DeviceType) runtime.DeviceDescriber { return latin1Describer{} }))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Consume panicked: %v", p)
			}
		}()
		e.Consume([]profiler.Record{rec(1, 0, 0, "step", profiler.KindHost, 0, 2, 0, 0)})
	}()
	got := gatherValues(t, e.Registry())
	k := "trainscope_step_seconds_sum{Hostname=\"node-7\",UUID=\"GPU-caf\uFFFD\",gpu=\"0\",rank=\"0\",stage=\"0\"}"
	if got[k] != 0.002 {
		t.Errorf("%s = %v, want 0.002; have %v", k, got[k], keys(got, "trainscope_step_seconds_sum"))
	}
}

type latin1Describer struct{}

func (latin1Describer) DeviceName(int) (string, error) { return "Fake GPU", nil }
func (latin1Describer) DeviceUUID(int) (string, error) { return "GPU-caf\xe9", nil }

// A late record (device work that arrived after its step was accounted)
// under a stage its step does not have — a kernel without a stage label —
// is counted as late under its own stage; that stage gets no step
// histogram and no busy or idle counters, which would read as an empty
// stage beside the real one. A step whose busy time is not known (no
// compute timed in it, as a wrapped command's) gets its histogram and no
// busy or idle counters either.
func TestLateRecordMakesNoPhantomStage(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	step := rec(1, 0, 0, "step", profiler.KindHost, 0, 10, 0, 0)
	fwd := action(2, 1, "forward", profiler.Forward, 0, 0, 1, 4)
	e.Consume([]profiler.Record{fwd, step}) // step 0 of stage 0 accounted: busy 3 ms of 10
	kernel := rec(3, 0, 0, "gemm", profiler.KindKernel, 2, 2, 2, 3)
	kernel.Stage = profiler.None
	e.Consume([]profiler.Record{kernel}) // late: before step 0's end
	untimed := rec(4, 0, 0, "step", profiler.KindHost, 20, 25, 0, 0)
	untimed.Step, untimed.Stage = 1, 1 // stage 1's step with nothing timed in it
	e.Consume([]profiler.Record{untimed})

	got := gatherValues(t, e.Registry())
	var series []string
	for k := range got {
		if strings.HasPrefix(k, "trainscope_stage_") || strings.HasPrefix(k, "trainscope_step_seconds_count") {
			series = append(series, k)
		}
	}
	slices.Sort(series)
	l := func(stage string) string {
		return `{Hostname="` + host + `",UUID="",gpu="0",rank="0",stage="` + stage + `"}`
	}
	want := map[string]float64{
		"trainscope_stage_busy_seconds_total" + l("0"): 0.003,
		"trainscope_stage_idle_seconds_total" + l("0"): 0.007,
		"trainscope_stage_late_ranges_total" + l(""):   1,
		"trainscope_step_seconds_count" + l("0"):       1,
		"trainscope_step_seconds_count" + l("1"):       1,
	}
	if len(series) != len(want) {
		t.Errorf("step series %q, want %d: %v", series, len(want), want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
