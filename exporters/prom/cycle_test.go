package prom_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// Rank 0 repeats three all-reduces (two of 25 MiB, one of 6) every 40
// ms, timed on the device, with a kernel of 12 ms a cycle: its GPU busy
// 12 ms of it; rank 1 issues two operations, too few for a cycle, and has
// no series. Within the refresh interval a scrape shows the last
// search's result, whatever arrived since.
func TestCycleCollector(t *testing.T) {
	coll := func(rank int, at time.Duration, mib int64) profiler.Record {
		return profiler.Record{Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank, HostStart: at,
			Collective: profiler.Collective{Op: "AllReduce", Bytes: mib << 20, Group: "dp", Peer: -1, Root: -1}}
	}
	var recs []profiler.Record
	for k := range 10 {
		at := time.Duration(k) * 40 * time.Millisecond
		recs = append(recs, coll(0, at, 25), coll(0, at+2*time.Millisecond, 25), coll(0, at+4*time.Millisecond, 6))
		for i := range recs[len(recs)-3:] {
			r := &recs[len(recs)-3+i]
			r.HasDevice, r.DeviceStart, r.DeviceEnd, r.Stream = true, r.HostStart+time.Millisecond, r.HostStart+2*time.Millisecond, 1
		}
		recs = append(recs, profiler.Record{Name: "gemm", Kind: profiler.KindKernel, Stream: 2, HasDevice: true,
			DeviceStart: at + 10*time.Millisecond, DeviceEnd: at + 22*time.Millisecond})
	}
	recs = append(recs, coll(1, 0, 1), coll(1, time.Millisecond, 2))
	s := cycle.NewSink(0)
	s.Consume(recs)
	c := prom.NewCycleCollector(s, time.Hour)
	want := `
# HELP trainscope_collective_cycle_busy_seconds Median time within a cycle of the rank's collectives that its GPU was busy (its traced kernels, less transfers on their streams); absent where no kernel was traced.
# TYPE trainscope_collective_cycle_busy_seconds gauge
trainscope_collective_cycle_busy_seconds{rank="0"} 0.012
# HELP trainscope_collective_cycle_operations Collectives and point-to-point operations in one cycle of the rank's.
# TYPE trainscope_collective_cycle_operations gauge
trainscope_collective_cycle_operations{rank="0"} 3
# HELP trainscope_collective_cycle_seconds Median time of the cycle the rank's collectives repeat (the step, most likely, of a job that marks none), from its latest operations kept (up to 32768).
# TYPE trainscope_collective_cycle_seconds gauge
trainscope_collective_cycle_seconds{rank="0"} 0.04
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// Rank 1 now repeats too; the hour-long refresh keeps the first
	// result.
	var more []profiler.Record
	for k := range 10 {
		more = append(more, coll(1, time.Second+time.Duration(k)*10*time.Millisecond, 1), coll(1, time.Second+time.Duration(k)*10*time.Millisecond+time.Millisecond, 2))
	}
	s.Consume(more)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Errorf("within the refresh interval: %v", err)
	}
	if n := testutil.CollectAndCount(prom.NewCycleCollector(s, 0)); n != 5 {
		t.Errorf("a fresh collector: %d series, want 5 (both ranks' two, rank 0's busy time)", n)
	}
}

// Every cycle of the run: 200 steps of three all-reduces 40 ms apart, the
// 101st 400 ms longer. Once the Sink has them all (Finish), a scrape
// holds the 199 cycles timed (the last has no next), their sum, their
// quantiles within 1 % and the longest.
func TestCycleCollectorRun(t *testing.T) {
	var recs []profiler.Record
	at := time.Duration(0)
	for k := range 200 {
		for i, mib := range []int64{25, 25, 6} {
			recs = append(recs, profiler.Record{Name: "AllReduce", Kind: profiler.KindCollective, HostStart: at + time.Duration(i)*2*time.Millisecond,
				Collective: profiler.Collective{Op: "AllReduce", Bytes: mib << 20, Group: "dp", Peer: -1, Root: -1}})
		}
		at += 40 * time.Millisecond
		if k == 100 {
			at += 400 * time.Millisecond
		}
	}
	s := cycle.NewSink(0)
	s.Consume(recs)
	s.Finish()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCycleCollector(s, 0))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var summary *dto.Summary
	longest := -1.0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "trainscope_collective_cycle_run_seconds":
			summary = mf.GetMetric()[0].GetSummary()
		case "trainscope_collective_cycle_longest_seconds":
			longest = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if summary == nil {
		t.Fatal("no trainscope_collective_cycle_run_seconds")
	}
	if summary.GetSampleCount() != 199 || math.Abs(summary.GetSampleSum()-(199*0.040+0.400)) > 1e-9 {
		t.Errorf("count %d sum %v; want 199 and %v", summary.GetSampleCount(), summary.GetSampleSum(), 199*0.040+0.400)
	}
	for _, q := range summary.GetQuantile() {
		if v := q.GetValue(); math.Abs(v-0.040) > 0.040*cycle.QuantileAccuracy {
			t.Errorf("quantile %v: %v, want 0.040 within 1%%", q.GetQuantile(), v)
		}
	}
	if len(summary.GetQuantile()) != 3 || math.Abs(longest-0.440) > 1e-9 {
		t.Errorf("%d quantiles, longest %v; want 3 and 0.44", len(summary.GetQuantile()), longest)
	}
}
