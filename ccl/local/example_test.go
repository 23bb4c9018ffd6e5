package local_test

import (
	"context"
	"fmt"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// Three ranks on cpu:0..2, driven from one goroutine: each rank's
// AllReduce is enqueued on its stream and completes once all three
// streams have reached it.
func ExampleBackend_AllReduce() {
	b := local.New(local.WithTimeout(5 * time.Second))
	devs := []runtime.Device{{Type: runtime.CPU, Index: 0}, {Type: runtime.CPU, Index: 1}, {Type: runtime.CPU, Index: 2}}
	comms, err := b.CommInitAll(devs)
	if err != nil {
		fmt.Println(err)
		return
	}
	bufs := make([]runtime.Buffer, len(devs))
	streams := make([]*runtime.Stream, len(devs))
	for r, dev := range devs {
		streams[r], _ = runtime.NewStream(dev)
		defer streams[r].Destroy()
		bufs[r], _ = runtime.Malloc(dev, 2*4)
		defer runtime.Free(bufs[r])
		f, _ := cpu.Float32s(bufs[r])
		f[0], f[1] = float32(r+1), float32(10*(r+1))
		if err := b.AllReduce(bufs[r], bufs[r], 2, runtime.Float32, ccl.Sum, comms[r], streams[r]); err != nil {
			fmt.Println(err)
			return
		}
	}
	for r := range devs {
		if err := streams[r].Synchronize(context.Background()); err != nil {
			fmt.Println(err)
		}
		f, _ := cpu.Float32s(bufs[r])
		fmt.Printf("rank %d: %v (async error: %v)\n", r, f, b.GetAsyncError(comms[r]))
	}
	// Output:
	// rank 0: [6 60] (async error: <nil>)
	// rank 1: [6 60] (async error: <nil>)
	// rank 2: [6 60] (async error: <nil>)
}
