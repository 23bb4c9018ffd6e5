package cpu_test

import (
	"context"
	"fmt"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// A GEMM enqueued on a stream runs when the stream reaches it; an event
// recorded after it completes once it has.
func Example() {
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	s, err := runtime.NewStream(dev)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	done, err := runtime.NewEvent(dev, runtime.EventDefault)
	if err != nil {
		panic(err)
	}
	defer done.Destroy()

	// 2×2 column-major matrices: A = [1 2; 3 4], B = identity·2.
	a, _ := runtime.Malloc(dev, 16)
	b, _ := runtime.Malloc(dev, 16)
	c, _ := runtime.Malloc(dev, 16)
	defer runtime.Free(a)
	defer runtime.Free(b)
	defer runtime.Free(c)
	fa, _ := cpu.Float32s(a)
	fb, _ := cpu.Float32s(b)
	copy(fa, []float32{1, 3, 2, 4})
	copy(fb, []float32{2, 0, 0, 2})

	err = runtime.Gemm(s, runtime.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1, A: a, B: b, C: c,
		LDA: 2, LDB: 2, LDC: 2, Type: runtime.Float32})
	if err != nil {
		panic(err)
	}
	if err := done.Record(s); err != nil {
		panic(err)
	}
	if err := done.Synchronize(context.Background()); err != nil {
		panic(err)
	}
	fc, _ := cpu.Float32s(c)
	fmt.Println("C =", fc)
	fmt.Println("query:", done.Query())
	// Output:
	// C = [2 6 4 8]
	// query: <nil>
}

// Enqueue runs host code in a stream's order, as cudaLaunchHostFunc does.
func ExampleEnqueue() {
	s, err := runtime.NewStream(runtime.Device{Type: runtime.CPU, Index: 1})
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	for i := range 3 {
		if err := cpu.Enqueue(s, func() { fmt.Println("step", i) }); err != nil {
			panic(err)
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// step 0
	// step 1
	// step 2
}
