package profiler

import (
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// A run without step ranges: every record has no step label, so no step
// range ever comes for them. The accountant must not keep their device
// intervals for the whole run: past 1<<20 of them it gives the step up.
func TestStepAccountantBoundsWorkWithoutStepRange(t *testing.T) {
	const bound = 1 << 20
	a := NewStepAccountant()
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	r := Record{Name: "kernel", Kind: KindKernel, Device: dev, Labels: NoLabels, Stream: 7, HasDevice: true}
	abandoned := 0
	onAbandon := func(d runtime.Device, rank int) {
		if d != dev || rank != 0 {
			t.Errorf("abandoned device %v rank %d, want %v rank 0", d, rank, dev)
		}
		abandoned++
	}
	emitted := 0
	emit := func(StepTime) { emitted++ }
	const batch = 4096
	total := 0
	for total <= bound+batch {
		for range batch {
			r.DeviceStart = time.Duration(total) * 10 * time.Microsecond
			r.DeviceEnd = r.DeviceStart + 5*time.Microsecond
			a.Add(&r)
			total++
		}
		a.FinishAfter(2, emit, onAbandon)
		held := 0
		for _, s := range a.open {
			held += len(s.work)
		}
		if held > bound+batch {
			t.Fatalf("after %d records the accountant holds %d intervals, want at most %d", total, held, bound+batch)
		}
	}
	if abandoned != 1 || emitted != 0 {
		t.Errorf("%d steps abandoned and %d emitted after %d step-less records, want 1 and 0", abandoned, emitted, total)
	}
}
