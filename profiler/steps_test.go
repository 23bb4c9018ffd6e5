package profiler_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

func TestStepBreakdown(t *testing.T) {
	lbl := func(stage int16, ph profiler.Phase) profiler.Labels {
		l := profiler.NoLabels
		l.Stage, l.Phase = stage, ph
		return l
	}
	recs := []profiler.Record{
		// Rank 0: a 1000us step; forward device 100–400, backward device
		// 300–600 (overlapping: union 100–600 = 500us), an optimizer range
		// that does not count, and a forward that spills past the step end
		// (900–1200, clipped to 900–1000 = 100us). Busy 600us.
		{ID: 1, Name: "step", Rank: 0, HostStart: 0, HostEnd: 1000 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Rank: 0, Labels: lbl(0, profiler.Forward), HasDevice: true, DeviceStart: 100 * us, DeviceEnd: 400 * us},
		{ID: 3, Parent: 1, Depth: 1, Name: "backward", Rank: 0, Labels: lbl(0, profiler.Backward), HasDevice: true, DeviceStart: 300 * us, DeviceEnd: 600 * us},
		{ID: 4, Parent: 1, Depth: 1, Name: "optimizer", Rank: 0, Labels: lbl(0, profiler.Optimizer), HasDevice: true, DeviceStart: 600 * us, DeviceEnd: 900 * us},
		{ID: 5, Parent: 1, Depth: 1, Name: "forward", Rank: 0, Labels: lbl(0, profiler.Forward), HasDevice: true, DeviceStart: 900 * us, DeviceEnd: 1200 * us},
		// Rank 1: two steps of 500us and 1500us; host-timed work only.
		{ID: 1, Name: "step", Rank: 1, HostStart: 0, HostEnd: 500 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Rank: 1, Labels: lbl(1, profiler.Forward), HostStart: 0, HostEnd: 250 * us},
		{ID: 3, Name: "step", Rank: 1, HostStart: 600 * us, HostEnd: 2100 * us},
		{ID: 4, Parent: 3, Depth: 1, Name: "backward", Rank: 1, Labels: lbl(1, profiler.Backward), HostStart: 600 * us, HostEnd: 1350 * us},
		// A nested forward (not directly inside a step) is not counted.
		{ID: 5, Parent: 4, Depth: 2, Name: "forward", Rank: 1, Labels: lbl(1, profiler.Forward), HostStart: 1400 * us, HostEnd: 2000 * us},
	}
	got := profiler.StepBreakdown(recs)
	if len(got) != 2 {
		t.Fatalf("%d ranks", len(got))
	}
	r0, r1 := got[0], got[1]
	if r0.Rank != 0 || r0.Steps != 1 || r0.Wall != 1000*us || r0.Busy != 600*us || r0.Stage != 0 {
		t.Errorf("rank 0: %+v, want 1 step, wall 1000us, busy 600us, stage 0", r0)
	}
	if r0.IdleFraction() != 0.4 {
		t.Errorf("rank 0 idle fraction %v, want 0.4", r0.IdleFraction())
	}
	if r1.Steps != 2 || r1.Wall != 2000*us || r1.Busy != 1000*us || r1.MeanStep() != time.Millisecond || r1.Stage != 1 {
		t.Errorf("rank 1: %+v, want 2 steps, wall 2000us, busy 250+750us, mean 1ms", r1)
	}
	var buf bytes.Buffer
	if err := profiler.WriteStepBreakdown(&buf, got, 0.2); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range []string{"Mean step(ms)", "60.0", "40.0", "50.0", "slowest rank: 0", "+0.0%", "ideal pipeline bubble for this schedule: 20.0%"} {
		if !strings.Contains(out, w) {
			t.Errorf("breakdown lacks %q:\n%s", w, out)
		}
	}
}
