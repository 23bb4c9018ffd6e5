package profiler_test

import (
	"context"
	"fmt"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// A rank records a step holding a device-timed forward range; the report
// groups the ranges by rank and step.
func Example() {
	ctx := context.Background()
	p, err := profiler.New()
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)

	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	stream, _ := runtime.NewStream(dev)
	defer stream.Destroy()
	rec, _ := p.NewRecorder(0, dev)

	rec.SetStep(1)
	rec.Start("step")
	rec.SetMicrobatch(0)
	rec.SetPhase(profiler.Forward)
	rec.StartDevice("forward", stream) // records an event; nothing waits
	rec.End()
	rec.End()

	_ = p.Flush(ctx) // resolve device times, off the hot path
	for _, g := range profiler.Summarize(p.Snapshot()) {
		for _, n := range g.Names {
			fmt.Printf("rank %d, %s: %s ×%d, device-timed ×%d\n", g.Rank, g.Tag, n.Name, n.Count, n.DeviceCount)
		}
	}
	// Output:
	// rank 0, step 1: forward ×1, device-timed ×1
	// rank 0, step 1: step ×1, device-timed ×0
}
