package local_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestHugeCounts: a count whose byte size does not fit an int64 is
// refused like any other count too large for the buffers, never a panic.
func TestHugeCounts(t *testing.T) {
	noLeaks(t)
	// math.MaxInt/2 float32s is 2^63−4 bytes past the end of an int64 on
	// 64-bit platforms; math.MaxInt/4 float32s scattered over 2 ranks too.
	half, quarter := math.MaxInt/2, math.MaxInt/4
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			b := local.New(local.WithTimeout(time.Second))
			if shared {
				b = local.NewShared(runtime.CPU, local.WithTimeout(time.Second))
			}
			g := newGroup(t, b, 2)
			c, s := g.comms[0], g.streams[0]
			buf := alloc(t, c.Device(), runtime.Float32, filled(8, 1))
			dt := runtime.Float32
			for _, tc := range []struct {
				name string
				call func() error
			}{
				{"AllReduce", func() error { return b.AllReduce(buf, buf, half, dt, ccl.Sum, c, s) }},
				{"Broadcast", func() error { return b.Broadcast(buf, buf, half, dt, 0, c, s) }},
				{"Reduce", func() error { return b.Reduce(buf, buf, half, dt, ccl.Sum, 0, c, s) }},
				{"AllGather", func() error { return b.AllGather(buf, buf, half, dt, c, s) }},
				{"ReduceScatter", func() error { return b.ReduceScatter(buf, buf, quarter, dt, ccl.Sum, c, s) }},
				{"Send", func() error { return b.Send(buf, half, dt, 1, c, s) }},
				{"Recv", func() error { return b.Recv(buf, half, dt, 1, c, s) }},
			} {
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panic: %v", p)
						}
					}()
					return tc.call()
				}()
				if !errors.Is(err, ccl.StatusInvalidArgument) {
					t.Errorf("%s: %v, want an error wrapping %s", tc.name, err, ccl.StatusInvalidArgument)
				}
			}
			if err := b.GetAsyncError(c); err != nil {
				t.Errorf("refused calls failed the communicator: %v", err)
			}
		})
	}
}
