package ccl_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trainscope/trainscope/ccl"
	_ "github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// Two ranks, goroutines driving cpu:0 and cpu:1, all-reduce a vector.
func Example() {
	f, err := ccl.Instance(runtime.CPU)
	if err != nil {
		fmt.Println(err)
		return
	}
	devs := []runtime.Device{{Type: runtime.CPU, Index: 0}, {Type: runtime.CPU, Index: 1}}
	pg, err := f.GetOrCreate("example", devs)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pg.Destroy()

	results := make([]string, len(devs))
	var wg sync.WaitGroup
	for r, dev := range devs {
		wg.Go(func() {
			results[r] = rank(pg, r, dev)
		})
	}
	wg.Wait()
	for r, res := range results {
		fmt.Printf("rank %d: %s\n", r, res)
	}
	// Output:
	// rank 0: [11 22 33]
	// rank 1: [11 22 33]
}

// rank runs one rank: copy its data in, all-reduce, copy the result out.
func rank(pg *ccl.ProcessGroup, r int, dev runtime.Device) string {
	s, err := runtime.NewStream(dev)
	if err != nil {
		return err.Error()
	}
	defer s.Destroy()
	buf, err := runtime.Malloc(dev, 3*4)
	if err != nil {
		return err.Error()
	}
	defer runtime.Free(buf)

	scale := []float32{1, 10}[r]
	if err := runtime.CopyToDevice(buf, float32Bytes(scale, 2*scale, 3*scale), s); err != nil {
		return err.Error()
	}
	w, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
	if err != nil {
		return err.Error()
	}
	if err := w.Wait(5 * time.Second); err != nil {
		return err.Error()
	}
	out := make([]byte, 3*4)
	if err := runtime.CopyToHost(out, buf, nil); err != nil {
		return err.Error()
	}
	return fmt.Sprint(bytesFloat32(out))
}
