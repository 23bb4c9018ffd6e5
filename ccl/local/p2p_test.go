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

// TestSendRecvOrder sends several messages of different sizes between one
// pair before the receiver starts; they arrive in the order sent.
func TestSendRecvOrder(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(10 * time.Second))
	g := newGroup(t, b, 2)
	const msgs = 6
	dt := runtime.Int32
	payload := func(k int) []float64 {
		v := make([]float64, k+1)
		for i := range v {
			v[i] = float64(100*k + i)
		}
		return v
	}
	got := make([][]float64, msgs)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		if r == 0 {
			for k := range msgs {
				if err := b.Send(alloc(t, dev, dt, payload(k)), k+1, dt, 1, g.comms[0], g.streams[0]); err != nil {
					return err
				}
			}
			return g.sync(0)
		}
		// Let the sends land in the mailbox first.
		if err := g.sync(1); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
		bufs := make([]runtime.Buffer, msgs)
		for k := range msgs {
			bufs[k] = alloc(t, dev, dt, filled(k+1, -1))
			if err := b.Recv(bufs[k], k+1, dt, 0, g.comms[1], g.streams[1]); err != nil {
				return err
			}
		}
		if err := g.sync(1); err != nil {
			return err
		}
		for k := range msgs {
			got[k] = decode(t, dt, bufs[k])
		}
		return b.GetAsyncError(g.comms[1])
	})
	for k := range msgs {
		checkValues(t, fmt.Sprintf("message %d", k), dt, got[k], payload(k))
	}
}

// TestRingInGroup has every rank send to rank+1 and receive from rank−1
// inside GroupStart/GroupEnd.
func TestRingInGroup(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := local.New(local.WithTimeout(10 * time.Second))
			g := newGroup(t, b, n)
			const count = 33
			dt := runtime.Float32
			got := make([][]float64, n)
			g.each(func(r int) error {
				dev := g.comms[r].Device()
				mine := make([]float64, count)
				for i := range mine {
					mine[i] = movable(r, i)
				}
				send, recv := alloc(t, dev, dt, mine), alloc(t, dev, dt, filled(count, 0))
				err := ccl.Group(b, func() error {
					if err := b.Recv(recv, count, dt, (r+n-1)%n, g.comms[r], g.streams[r]); err != nil {
						return err
					}
					return b.Send(send, count, dt, (r+1)%n, g.comms[r], g.streams[r])
				})
				if err != nil {
					return err
				}
				if err := g.sync(r); err != nil {
					return err
				}
				got[r] = decode(t, dt, recv)
				return b.GetAsyncError(g.comms[r])
			})
			for r := range n {
				w := make([]float64, count)
				for i := range w {
					w[i] = movable((r+n-1)%n, i)
				}
				checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], w)
			}
		})
	}
}

func TestGroupNesting(t *testing.T) {
	b := local.New()
	if err := b.GroupEnd(); !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "without GroupStart") {
		t.Fatalf("GroupEnd without GroupStart: %v", err)
	}
	for range 2 {
		if err := b.GroupStart(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := b.GroupEnd(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.GroupEnd(); err == nil {
		t.Fatal("third GroupEnd after two GroupStarts succeeded")
	}
}

func TestSendRecvSizeMismatch(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(5 * time.Second))
	g := newGroup(t, b, 2)
	dt := runtime.Float32
	if err := b.Send(alloc(t, g.comms[0].Device(), dt, filled(8, 1)), 8, dt, 1, g.comms[0], g.streams[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(alloc(t, g.comms[1].Device(), dt, filled(5, 0)), 5, dt, 0, g.comms[1], g.streams[1]); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if err := g.sync(r); err != nil {
			t.Fatal(err)
		}
	}
	err := b.GetAsyncError(g.comms[1])
	if !errors.Is(err, ccl.StatusInvalidArgument) {
		t.Fatalf("async error %v, want InvalidArgument", err)
	}
	for _, s := range []string{"received 32 bytes from rank 0", "expected 20"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if err := b.GetAsyncError(g.comms[0]); err == nil {
		t.Error("the sender's communicator did not fail with the receiver's")
	}
}

func TestRecvTimeout(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(50 * time.Millisecond))
	g := newGroup(t, b, 2)
	start := time.Now()
	if err := b.Recv(alloc(t, g.comms[1].Device(), runtime.Float32, filled(4, 0)), 4, runtime.Float32, 0, g.comms[1], g.streams[1]); err != nil {
		t.Fatal(err)
	}
	if err := g.sync(1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Recv gave up after %v", d)
	}
	err := b.GetAsyncError(g.comms[1])
	if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), "nothing from rank 0") {
		t.Fatalf("async error %v, want a timeout naming rank 0", err)
	}
}

// TestOneGoroutineDrivesAll issues, from one goroutine and inside one
// group, every rank's Recv before its Send and an AllReduce, as
// CommInitAll's single-thread mode drives several devices from one thread.
func TestOneGoroutineDrivesAll(t *testing.T) {
	noLeaks(t)
	const n, count = 4, 5
	b := local.New(local.WithTimeout(5 * time.Second))
	g := newGroup(t, b, n)
	dt := runtime.Int64
	sends, recvs, sums := make([]runtime.Buffer, n), make([]runtime.Buffer, n), make([]runtime.Buffer, n)
	in := inputs(dt, ccl.Sum, n, count)
	for r := range n {
		dev := g.comms[r].Device()
		mine := make([]float64, count)
		for i := range mine {
			mine[i] = movable(r, i)
		}
		sends[r], recvs[r], sums[r] = alloc(t, dev, dt, mine), alloc(t, dev, dt, filled(count, 0)), alloc(t, dev, dt, in[r])
	}
	err := ccl.Group(b, func() error {
		for r := range n {
			if err := b.Recv(recvs[r], count, dt, (r+1)%n, g.comms[r], g.streams[r]); err != nil {
				return err
			}
			if err := b.AllReduce(sums[r], sums[r], count, dt, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
				return err
			}
			if err := b.Send(sends[r], count, dt, (r+n-1)%n, g.comms[r], g.streams[r]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range n {
		if err := g.sync(r); err != nil {
			t.Fatal(err)
		}
		if err := b.GetAsyncError(g.comms[r]); err != nil {
			t.Fatal(err)
		}
		w := make([]float64, count)
		s := make([]float64, count)
		for i := range w {
			w[i] = movable((r+1)%n, i)
			s[i] = want(dt, ccl.Sum, in, i)
		}
		checkValues(t, fmt.Sprintf("Recv rank %d", r), dt, decode(t, dt, recvs[r]), w)
		checkValues(t, fmt.Sprintf("AllReduce rank %d", r), dt, decode(t, dt, sums[r]), s)
	}
}

// TestGroupsArePerGoroutine: a group held open on one goroutine does not
// hold back what another goroutine issues.
func TestGroupsArePerGoroutine(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(5 * time.Second))
	g := newGroup(t, b, 2)
	if err := b.GroupStart(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.GroupEnd(); err != nil {
			t.Error(err)
		}
	}()
	dt := runtime.Float32
	got := make(chan []float64, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			src := alloc(t, g.comms[0].Device(), dt, []float64{1, 2, 3})
			dst := alloc(t, g.comms[1].Device(), dt, filled(3, 0))
			if err := b.Send(src, 3, dt, 1, g.comms[0], g.streams[0]); err != nil {
				return err
			}
			if err := b.Recv(dst, 3, dt, 0, g.comms[1], g.streams[1]); err != nil {
				return err
			}
			if err := g.sync(1); err != nil {
				return err
			}
			got <- decode(t, dt, dst)
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	checkValues(t, "received", dt, <-got, []float64{1, 2, 3})
	if err := b.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	if err := b.GroupStart(); err != nil { // for the deferred GroupEnd
		t.Fatal(err)
	}
}
