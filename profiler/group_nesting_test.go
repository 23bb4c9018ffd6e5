package profiler_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// SetTag inside a step range: the ranges of the new tag's group all run
// inside a range of another group. The group's host total is the time of
// its outermost ranges — here "adam" (nested in "step") and "zero_grad"
// (top level) — so its shares add up to 100 %, and a range that returns
// to the step's group ("deep", under "step" through "mid") is not counted
// in that group a second time. Before, "opt" had "zero_grad" alone as its
// total, and "adam" showed several hundred percent.
func TestReportGroupOfRangesInsideAnother(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	spin := func(d time.Duration) {
		for t0 := time.Now(); time.Since(t0) < d; {
		}
	}
	r.SetStep(0)
	r.Start("step") // group "step 0"
	spin(time.Millisecond)
	p.SetTag("opt")
	r.Start("adam") // group "opt", outermost in it
	spin(3 * time.Millisecond)
	r.Start("adam.inner") // inside adam: not outermost
	spin(time.Millisecond)
	r.End()
	r.End()
	p.SetTag("mid")
	r.Start("mid")
	p.SetTag("")
	r.Start("deep") // group "step 0" again, inside "step"
	spin(time.Millisecond)
	r.End()
	p.SetTag("step 0") // the untagged step's group, named
	r.Start("named")
	r.End()
	r.End() // mid
	r.End() // step
	p.SetTag("opt")
	r.Start("zero_grad") // top level
	spin(time.Millisecond)
	r.End()

	recs := p.Snapshot()
	byName := map[string]profiler.Record{}
	for _, rec := range recs {
		byName[rec.Name] = rec
	}
	for _, n := range []string{"step", "adam", "adam.inner", "mid", "deep", "named", "zero_grad"} {
		if _, ok := byName[n]; !ok {
			t.Fatalf("no record %q in %d", n, len(recs))
		}
	}
	host := func(n string) time.Duration { r := byName[n]; return r.HostDuration() }
	want := map[string]time.Duration{ // each group's outermost ranges, by hand
		"step 0": host("step"),
		"opt":    host("adam") + host("zero_grad"),
		"mid":    host("mid"),
	}
	groups := profiler.Summarize(recs)
	online := profiler.NewSummary()
	online.Consume(recs)
	for _, gs := range [][]profiler.Group{groups, online.Groups()} {
		if len(gs) != len(want) {
			t.Fatalf("%d groups, want %d: %+v", len(gs), len(want), gs)
		}
		for _, g := range gs {
			if g.HostTotal != want[g.Tag] {
				t.Errorf("group %q: host total %v, want %v", g.Tag, g.HostTotal, want[g.Tag])
			}
			for _, ns := range g.Names {
				w := 100 * float64(ns.HostTotal) / float64(want[g.Tag])
				if math.Abs(ns.HostPercent-w) > 1e-9 {
					t.Errorf("group %q, %s: host %.4f %%, want %.4f", g.Tag, ns.Name, ns.HostPercent, w)
				}
				if ns.HostPercent > 100 {
					t.Errorf("group %q, %s: host %.2f %% of the group's time", g.Tag, ns.Name, ns.HostPercent)
				}
			}
		}
	}
	// With one table per rank, the ranges at depth 0 alone are outermost.
	fixed := profiler.NewSummary(profiler.WithSummaryTag("all steps"))
	fixed.Consume(recs)
	if g := fixed.Groups(); len(g) != 1 || g[0].HostTotal != host("step")+host("zero_grad") {
		t.Errorf("one table: %+v, want host total %v", g, host("step")+host("zero_grad"))
	}
}

// The same for device time: a device range inside another group's device
// range is the outermost device time of its own group.
func TestReportGroupDeviceInsideAnother(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: 3}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 3)
	work := func(d time.Duration) {
		if err := cpu.Enqueue(s, func() { time.Sleep(d) }); err != nil {
			t.Fatal(err)
		}
	}
	r.SetStep(0)
	r.StartDevice("forward", s) // group "step 0"
	work(2 * time.Millisecond)
	p.SetTag("kernels")
	r.StartDevice("gemm", s) // group "kernels", device-nested in forward
	work(2 * time.Millisecond)
	r.StartDevice("gemm.tile", s) // inside gemm, same group
	work(time.Millisecond)
	r.End()
	r.End()
	r.Start("host") // a host range of the group: no device time
	r.StartDevice("tanh", s)
	work(time.Millisecond)
	r.End()
	r.End()
	p.SetTag("")
	r.End() // forward
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	byName := map[string]profiler.Record{}
	for _, rec := range recs {
		if !rec.HasDevice && rec.Name != "host" {
			t.Fatalf("%s has no device time", rec.Name)
		}
		byName[rec.Name] = rec
	}
	dur := func(n string) time.Duration { r := byName[n]; return r.DeviceDuration() }
	want := map[string]time.Duration{
		"step 0":  dur("forward"),
		"kernels": dur("gemm") + dur("tanh"),
	}
	for _, g := range profiler.Summarize(recs) {
		if g.DeviceTotal != want[g.Tag] {
			t.Errorf("group %q: device total %v, want %v", g.Tag, g.DeviceTotal, want[g.Tag])
		}
		for _, ns := range g.Names {
			if ns.DevicePercent > 100 {
				t.Errorf("group %q, %s: device %.2f %% of the group's time", g.Tag, ns.Name, ns.DevicePercent)
			}
		}
	}
}

// A fused group's calls carry the labels they were issued with: a call of
// step 1 launched inside step 0's range is outermost in "step 1".
func TestReportGroupOfGroupedCalls(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, err := p.NewRecorder(0, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	r.SetStep(0)
	r.Start("step")
	l := r.Labels()
	l.Step = 1
	same := r.Labels()
	err = r.Grouped([]profiler.GroupedCollective{
		{Name: "send", Collective: profiler.Collective{Peer: 1, Bytes: 8}, Labels: l},
		{Name: "recv", Collective: profiler.Collective{Peer: 1, Bytes: 8}, Labels: same},
	}, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	r.End()
	got := map[string]bool{}
	for _, rec := range p.Snapshot() {
		got[rec.Name] = rec.OuterInGroup
	}
	if want := map[string]bool{"step": false, "send": true, "recv": false}; len(got) != 3 || got["send"] != want["send"] || got["recv"] != want["recv"] || got["step"] {
		t.Errorf("OuterInGroup %v, want %v", got, want)
	}
}
