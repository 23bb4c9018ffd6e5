package local_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestAllToAllThroughSendRecv runs NCCL's recipe for AllToAll: in one
// group every rank sends block j of its buffer to rank j and receives
// block j from rank j, itself included, as NCCL allows.
func TestAllToAllThroughSendRecv(t *testing.T) {
	noLeaks(t)
	const count = 3
	dt := runtime.Float32
	// Rank r's block for rank j holds 100·r + 10·j + i.
	value := func(r, j, i int) float64 { return float64(100*r + 10*j + i) }
	for _, tc := range []struct {
		name string
		make func(t *testing.T) (*local.Backend, *group)
	}{
		{"host", func(t *testing.T) (*local.Backend, *group) {
			b := local.New(local.WithTimeout(5 * time.Second))
			return b, newGroup(t, b, 3)
		}},
		{"shared-1dev", func(t *testing.T) (*local.Backend, *group) {
			b := local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
			return b, sharedGroup(t, b, 3, 1)
		}},
		{"shared-2devs", func(t *testing.T) (*local.Backend, *group) {
			b := local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
			return b, sharedGroup(t, b, 4, 2)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, g := tc.make(t)
			n := len(g.comms)
			got := make([][]float64, n)
			g.each(func(r int) error {
				c, s := g.comms[r], g.streams[r]
				var in []float64
				for j := range n {
					for i := range count {
						in = append(in, value(r, j, i))
					}
				}
				send := alloc(t, c.Device(), dt, in)
				recv := alloc(t, c.Device(), dt, filled(n*count, -1))
				err := ccl.Group(b, func() error {
					for j := range n {
						sv, err := send.Elems(dt, j*count, count)
						if err != nil {
							return err
						}
						rv, err := recv.Elems(dt, j*count, count)
						if err != nil {
							return err
						}
						if err := b.Send(sv, count, dt, j, c, s); err != nil {
							return fmt.Errorf("send to %d: %w", j, err)
						}
						if err := b.Recv(rv, count, dt, j, c, s); err != nil {
							return fmt.Errorf("recv from %d: %w", j, err)
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				if err := g.sync(r); err != nil {
					return err
				}
				got[r] = decode(t, dt, recv)
				return b.GetAsyncError(c)
			})
			for r := range n {
				var want []float64
				for j := range n {
					for i := range count {
						want = append(want, value(j, r, i))
					}
				}
				checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], want)
			}
		})
	}
}

// TestSelfSendRecvUngrouped: the host backend's eager Send to itself is
// received by a later Recv on the same stream. A shared backend's Send
// returns only once its Recv has taken the data, which the same rank can
// issue only after it: outside a group it is refused at once, with a
// message saying so, instead of waiting out the timeout.
func TestSelfSendRecvUngrouped(t *testing.T) {
	noLeaks(t)
	dt := runtime.Int32
	t.Run("host", func(t *testing.T) {
		b := local.New(local.WithTimeout(5 * time.Second))
		g := newGroup(t, b, 2)
		c, s := g.comms[1], g.streams[1]
		send := alloc(t, c.Device(), dt, []float64{7, 8, 9})
		recv := alloc(t, c.Device(), dt, filled(3, 0))
		if err := b.Send(send, 3, dt, 1, c, s); err != nil {
			t.Fatal(err)
		}
		if err := b.Recv(recv, 3, dt, 1, c, s); err != nil {
			t.Fatal(err)
		}
		if err := g.sync(1); err != nil {
			t.Fatal(err)
		}
		if err := b.GetAsyncError(c); err != nil {
			t.Fatal(err)
		}
		checkValues(t, "received from itself", dt, decode(t, dt, recv), []float64{7, 8, 9})
	})
	t.Run("shared", func(t *testing.T) {
		b := local.NewShared(runtime.CPU, local.WithTimeout(time.Minute))
		g := sharedGroup(t, b, 2, 1)
		c, s := g.comms[1], g.streams[1]
		buf := alloc(t, c.Device(), dt, []float64{7, 8, 9})
		start := time.Now()
		for _, call := range []func() error{
			func() error { return b.Send(buf, 3, dt, 1, c, s) },
			func() error { return b.Recv(buf, 3, dt, 1, c, s) },
		} {
			err := call()
			if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(fmt.Sprint(err), "group") {
				t.Fatalf("got %v, want InvalidArgument asking for a group", err)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("refusals took %v", d)
		}
		// Refused calls take no number: the pair still works.
		if err := ccl.Group(b, func() error {
			out := alloc(t, c.Device(), dt, filled(3, 0))
			if err := b.Send(buf, 3, dt, 1, c, s); err != nil {
				return err
			}
			return b.Recv(out, 3, dt, 1, c, s)
		}); err != nil {
			t.Fatal(err)
		}
		if err := b.GetAsyncError(c); err != nil {
			t.Fatal(err)
		}
	})
}
