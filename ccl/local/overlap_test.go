package local_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestBroadcastOverlappingRootBuffers: the root's recv overlaps its send
// one element further on. Every rank must receive the root's send as it
// was before the call, whichever rank's copy is made first.
func TestBroadcastOverlappingRootBuffers(t *testing.T) {
	noLeaks(t)
	const n, count = 3, 4
	dt := runtime.Int64
	orig := []float64{11, 22, 33, 44}
	for _, shared := range []bool{false, true} {
		for _, root := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("shared=%v/root%d", shared, root), func(t *testing.T) {
				testBroadcastOverlap(t, shared, root, n, count, dt, orig)
			})
		}
	}
}

func testBroadcastOverlap(t *testing.T, shared bool, root, n, count int, dt runtime.DataType, orig []float64) {
	t.Helper()
	var b *local.Backend
	var g *group
	if shared {
		b = local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
		g = sharedGroup(t, b, n, 1) // every rank on one device
	} else {
		b = local.New(local.WithTimeout(5 * time.Second))
		g = newGroup(t, b, n)
	}
	got := make([][]float64, n)
	g.each(func(r int) error {
		c, s := g.comms[r], g.streams[r]
		var send, recv runtime.Buffer
		if r == root {
			raw := alloc(t, c.Device(), dt, append(append([]float64(nil), orig...), -1))
			var err error
			if send, err = raw.Elems(dt, 0, count); err != nil {
				return err
			}
			if recv, err = raw.Elems(dt, 1, count); err != nil {
				return err
			}
		} else {
			recv = alloc(t, c.Device(), dt, filled(count, -1))
		}
		if err := b.Broadcast(send, recv, count, dt, root, c, s); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, recv)
		return b.GetAsyncError(c)
	})
	for r := range n {
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], orig)
	}
}
