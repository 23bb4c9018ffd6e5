package local_test

import (
	"context"
	"encoding/binary"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// eventCounter is the registered cpu backend counting the events created
// and destroyed through it.
type eventCounter struct {
	*cpu.Impl
	created, destroyed atomic.Int64
}

func (c *eventCounter) EventCreate(device int, flags runtime.EventFlag) (any, error) {
	c.created.Add(1)
	return c.Impl.EventCreate(device, flags)
}

func (c *eventCounter) EventDestroy(h any) error {
	c.destroyed.Add(1)
	return c.Impl.EventDestroy(h)
}

// TestSharedEventsReused: a shared backend's transfers reuse the events
// of the ones before (creating and destroying events are driver calls on
// CUDA, and ones the driver holds back behind another thread's queued
// copy), the data still arrives in order, and the communicators destroy
// every event they made.
func TestSharedEventsReused(t *testing.T) {
	noLeaks(t)
	reg, err := runtime.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	impl := &eventCounter{Impl: reg.(*cpu.Impl)}
	b := local.NewShared(runtime.CPU, local.WithTimeout(10*time.Second))
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	comms, err := b.CommInitAll([]runtime.Device{dev, dev})
	if err != nil {
		t.Fatal(err)
	}
	var streams []*runtime.Stream
	for range comms {
		s, err := runtime.NewStreamWith(impl, dev)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	destroyed := false
	teardown := func() {
		if destroyed {
			return
		}
		destroyed = true
		for r, s := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.Synchronize(ctx); err != nil {
				t.Errorf("rank %d stream: %v", r, err)
			}
			cancel()
		}
		for _, c := range comms {
			if err := b.CommDestroy(c); err != nil {
				t.Error(err)
			}
		}
		for _, s := range streams {
			_ = s.Destroy()
		}
	}
	t.Cleanup(teardown)

	// Per round, rank 0 writes the round's number into its send buffer
	// on its stream and sends it; rank 1 receives it and checks it on its
	// stream. Then both all-reduce 1 + the round: the sum is 2 + 2·round.
	const rounds, count = 300, 16
	bufs := make([][3]runtime.Buffer, 2) // send or recv, all-reduce in, all-reduce out
	for r := range bufs {
		for i := range bufs[r] {
			bufs[r][i] = alloc(t, dev, runtime.Float32, make([]float64, count))
		}
	}
	fill := func(s *runtime.Stream, buf runtime.Buffer, v float32) error {
		mem, err := cpu.Bytes(buf)
		if err != nil {
			return err
		}
		return cpu.Enqueue(s, func() {
			for i := range count {
				binary.NativeEndian.PutUint32(mem[4*i:], math.Float32bits(v))
			}
		})
	}
	var wrong atomic.Int64
	check := func(s *runtime.Stream, buf runtime.Buffer, want float32) error {
		mem, err := cpu.Bytes(buf)
		if err != nil {
			return err
		}
		return cpu.Enqueue(s, func() {
			for i := range count {
				if math.Float32frombits(binary.NativeEndian.Uint32(mem[4*i:])) != want {
					wrong.Add(1)
					return
				}
			}
		})
	}
	g := &group{t: t, b: b, comms: comms, streams: streams}
	g.each(func(r int) error {
		c, s := comms[r], streams[r]
		for k := range rounds {
			if r == 0 {
				if err := fill(s, bufs[0][0], float32(k)); err != nil {
					return err
				}
				if err := b.Send(bufs[0][0], count, runtime.Float32, 1, c, s); err != nil {
					return err
				}
			} else {
				if err := b.Recv(bufs[1][0], count, runtime.Float32, 0, c, s); err != nil {
					return err
				}
				if err := check(s, bufs[1][0], float32(k)); err != nil {
					return err
				}
			}
			if err := fill(s, bufs[r][1], float32(1+k)); err != nil {
				return err
			}
			if err := b.AllReduce(bufs[r][1], bufs[r][2], count, runtime.Float32, ccl.Sum, c, s); err != nil {
				return err
			}
			if err := check(s, bufs[r][2], float32(2+2*k)); err != nil {
				return err
			}
		}
		return nil
	})
	teardown()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of %d checks found the wrong data", n, 3*rounds)
	}
	// Without reuse every round makes 6 events: the send's ready, the
	// receive's copy, each rank's ready for the all-reduce, its done, and
	// the other rank's copy of the result.
	if got := impl.created.Load(); got > 16 {
		t.Errorf("%d events created for %d rounds of a send and an all-reduce; want at most 16, the ones in flight at once", got, rounds)
	}
	if c, d := impl.created.Load(), impl.destroyed.Load(); c != d {
		t.Errorf("%d events created, %d destroyed once the communicators are", c, d)
	}
}
