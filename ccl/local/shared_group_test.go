package local_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestSharedCollectivesInOneGroup drives both ranks from one goroutine,
// each with two all-reduces in one group: the last rank to post executes
// both, and each must keep its own result.
func TestSharedCollectivesInOneGroup(t *testing.T) {
	noLeaks(t)
	for _, devs := range []int{1, 2} {
		t.Run(fmt.Sprintf("%ddevs", devs), func(t *testing.T) {
			b := local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
			g := sharedGroup(t, b, 2, devs)
			const count = 3
			dt := runtime.Float32
			// Rank 0 holds {1, 2, 3} and {100, 200, 300}; rank 1 holds
			// {10, 20, 30} and {1000, 2000, 3000}.
			in := [2][2][]float64{
				{{1, 2, 3}, {100, 200, 300}},
				{{10, 20, 30}, {1000, 2000, 3000}},
			}
			want := [2][]float64{{11, 22, 33}, {1100, 2200, 3300}}
			var out [2][2]runtime.Buffer
			for r := range 2 {
				for k := range 2 {
					out[r][k] = alloc(t, g.comms[r].Device(), dt, in[r][k])
				}
			}
			err := ccl.Group(b, func() error {
				for r := range 2 {
					for k := range 2 {
						if err := b.AllReduce(out[r][k], out[r][k], count, dt, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				if err := g.sync(r); err != nil {
					t.Fatal(err)
				}
				if err := b.GetAsyncError(g.comms[r]); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r := range 2 {
				for k := range 2 {
					checkValues(t, fmt.Sprintf("rank %d all-reduce %d", r, k), dt, decode(t, dt, out[r][k]), want[k])
				}
			}
		})
	}
}
