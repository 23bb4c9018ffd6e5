package local_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestGroupedRecvsWithUngroupedPeers: rank 0 receives from ranks 2 and 1
// in one group; rank 1, outside any group, sends to 0 and then to 2; rank
// 2 receives from 1 and then sends to 0. NCCL runs this (rank 0's receives
// are concurrent), so neither backend may wait on rank 0's receive from 2
// before its receive from 1.
func TestGroupedRecvsWithUngroupedPeers(t *testing.T) {
	noLeaks(t)
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			const timeout = 3 * time.Second
			b := local.New(local.WithTimeout(timeout))
			var g *group
			if shared {
				b = local.NewShared(runtime.CPU, local.WithTimeout(timeout))
				g = sharedGroup(t, b, 3, 1)
			} else {
				g = newGroup(t, b, 3)
			}
			const count = 4
			dt := runtime.Float32
			payload := func(src, dst int) []float64 {
				v := make([]float64, count)
				for i := range v {
					v[i] = float64(100*src + 10*dst + i)
				}
				return v
			}
			got := map[[2]int][]float64{} // by (src, dst), written after each's wait
			out := make([]map[[2]int]runtime.Buffer, 3)
			g.each(func(r int) error {
				c, s, dev := g.comms[r], g.streams[r], g.comms[r].Device()
				out[r] = map[[2]int]runtime.Buffer{}
				recv := func(src int) error {
					buf := alloc(t, dev, dt, filled(count, -1))
					out[r][[2]int{src, r}] = buf
					return b.Recv(buf, count, dt, src, c, s)
				}
				send := func(dst int) error {
					return b.Send(alloc(t, dev, dt, payload(r, dst)), count, dt, dst, c, s)
				}
				var err error
				switch r {
				case 0:
					err = ccl.Group(b, func() error {
						if err := recv(2); err != nil {
							return err
						}
						return recv(1)
					})
				case 1:
					if err = send(0); err == nil {
						err = send(2)
					}
				case 2:
					if err = recv(1); err == nil {
						err = send(0)
					}
				}
				if err != nil {
					return err
				}
				if err := g.sync(r); err != nil {
					return err
				}
				return b.GetAsyncError(c)
			})
			for r := range 3 {
				for k, buf := range out[r] {
					got[k] = decode(t, dt, buf)
				}
			}
			for _, k := range [][2]int{{2, 0}, {1, 0}, {1, 2}} {
				checkValues(t, fmt.Sprintf("message %d→%d", k[0], k[1]), dt, got[k], payload(k[0], k[1]))
			}
		})
	}
}
