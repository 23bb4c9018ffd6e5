package local_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// sharedGroup is n ranks of a shared backend on cpu devices, rank r on
// device r mod devs.
func sharedGroup(t *testing.T, b *local.Backend, n, devs int) *group {
	t.Helper()
	ds := make([]runtime.Device, n)
	for r := range ds {
		ds[r] = runtime.Device{Type: runtime.CPU, Index: r % devs}
	}
	comms, err := b.CommInitAll(ds)
	if err != nil {
		t.Fatalf("CommInitAll(%v): %v", ds, err)
	}
	return withComms(t, b, comms)
}

// layouts are the rank and device counts the shared tests run: ranks
// sharing one device, ranks spread over two, and one rank a device.
var layouts = []struct{ ranks, devs int }{{2, 1}, {3, 1}, {4, 2}, {3, 3}}

func TestSharedCollectives(t *testing.T) {
	noLeaks(t)
	const count = 5
	for _, l := range layouts {
		t.Run(fmt.Sprintf("%dranks-%ddevs", l.ranks, l.devs), func(t *testing.T) {
			b := local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
			g := sharedGroup(t, b, l.ranks, l.devs)
			n := l.ranks
			// Rank r's value at element i is 10·r + i + 1.
			vals := func(r, k int) []float64 {
				v := make([]float64, k)
				for i := range v {
					v[i] = float64(10*r + i + 1)
				}
				return v
			}
			sum := make([]float64, count)
			for r := range n {
				for i, v := range vals(r, count) {
					sum[i] += v
				}
			}
			avg := make([]float64, count)
			for i := range sum {
				avg[i] = sum[i] / float64(n)
			}
			const root = 1
			results := make([]map[string]runtime.Buffer, n)
			g.each(func(r int) error {
				dev, c, s := g.comms[r].Device(), g.comms[r], g.streams[r]
				out := map[string]runtime.Buffer{}
				results[r] = out
				mk := func(name string, v []float64) runtime.Buffer {
					buf := alloc(t, dev, runtime.Float32, v)
					out[name] = buf
					return buf
				}
				inPlace := mk("allreduce-inplace", vals(r, count))
				calls := []func() error{
					func() error {
						return b.AllReduce(mk("send", vals(r, count)), mk("allreduce", make([]float64, count)), count, runtime.Float32, ccl.Sum, c, s)
					},
					func() error { return b.AllReduce(inPlace, inPlace, count, runtime.Float32, ccl.Sum, c, s) },
					func() error {
						return b.AllReduce(mk("send-avg", vals(r, count)), mk("avg", make([]float64, count)), count, runtime.Float32, ccl.Avg, c, s)
					},
					func() error {
						return b.Broadcast(mk("bsend", vals(r, count)), mk("broadcast", make([]float64, count)), count, runtime.Float32, root, c, s)
					},
					func() error {
						return b.Reduce(mk("rsend", vals(r, count)), mk("reduce", make([]float64, count)), count, runtime.Float32, ccl.Sum, root, c, s)
					},
					func() error {
						return b.AllGather(mk("gsend", vals(r, 2)), mk("allgather", make([]float64, 2*n)), 2, runtime.Float32, c, s)
					},
					func() error {
						return b.ReduceScatter(mk("rssend", vals(r, 2*n)), mk("reducescatter", make([]float64, 2)), 2, runtime.Float32, ccl.Sum, c, s)
					},
				}
				for i, call := range calls {
					if err := call(); err != nil {
						return fmt.Errorf("call %d: %w", i, err)
					}
				}
				return g.sync(r)
			})
			for r := range n {
				if err := b.GetAsyncError(g.comms[r]); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				got := func(name string) []float64 { return decode(t, runtime.Float32, results[r][name]) }
				checkValues(t, fmt.Sprintf("rank %d allreduce", r), runtime.Float32, got("allreduce"), sum)
				checkValues(t, fmt.Sprintf("rank %d allreduce in place", r), runtime.Float32, got("allreduce-inplace"), sum)
				checkValues(t, fmt.Sprintf("rank %d avg", r), runtime.Float32, got("avg"), avg)
				checkValues(t, fmt.Sprintf("rank %d broadcast", r), runtime.Float32, got("broadcast"), vals(root, count))
				wantReduce := make([]float64, count) // untouched off the root
				if r == root {
					wantReduce = sum
				}
				checkValues(t, fmt.Sprintf("rank %d reduce", r), runtime.Float32, got("reduce"), wantReduce)
				var gathered []float64
				for q := range n {
					gathered = append(gathered, vals(q, 2)...)
				}
				checkValues(t, fmt.Sprintf("rank %d allgather", r), runtime.Float32, got("allgather"), gathered)
				block := make([]float64, 2)
				for q := range n {
					v := vals(q, 2*n)
					block[0] += v[2*r]
					block[1] += v[2*r+1]
				}
				checkValues(t, fmt.Sprintf("rank %d reducescatter", r), runtime.Float32, got("reducescatter"), block)
				// The sends are untouched.
				checkValues(t, fmt.Sprintf("rank %d send", r), runtime.Float32, got("send"), vals(r, count))
			}
		})
	}
}

// TestSharedBuffersHoldStill reuses every buffer on the caller's stream
// right after the operation: a Send's buffer is overwritten at once, an
// all-reduce's input too. The data each operation moved must be the data
// before the overwrite, which holds only if the streams wait for the
// copies out of those buffers.
func TestSharedBuffersHoldStill(t *testing.T) {
	noLeaks(t)
	for _, l := range layouts {
		t.Run(fmt.Sprintf("%dranks-%ddevs", l.ranks, l.devs), func(t *testing.T) {
			b := local.NewShared(runtime.CPU, local.WithTimeout(5*time.Second))
			g := sharedGroup(t, b, l.ranks, l.devs)
			n := l.ranks
			const count, rounds = 4096, 20
			got := make([][]float64, n)  // ring receives, round-major
			sums := make([][]float64, n) // all-reduce results
			g.each(func(r int) error {
				dev, c, s := g.comms[r].Device(), g.comms[r], g.streams[r]
				send := alloc(t, dev, runtime.Float32, make([]float64, count))
				recv := alloc(t, dev, runtime.Float32, make([]float64, count))
				acc := alloc(t, dev, runtime.Float32, make([]float64, count))
				out := alloc(t, dev, runtime.Float32, make([]float64, rounds))
				one := alloc(t, dev, runtime.Float32, filled(count, 1))
				for k := range rounds {
					// send = r·1000 + k everywhere: set it on the stream.
					if err := runtime.Memset(send, 0, s); err != nil {
						return err
					}
					if err := runtime.Axpy(s, float32(r*1000+k), one, send, count); err != nil {
						return err
					}
					if err := ccl.Group(b, func() error {
						if err := b.Send(send, count, runtime.Float32, (r+1)%n, c, s); err != nil {
							return err
						}
						return b.Recv(recv, count, runtime.Float32, (r+n-1)%n, c, s)
					}); err != nil {
						return err
					}
					// Overwrite the send at once; then keep the last element
					// received.
					if err := runtime.Memset(send, 0xff, s); err != nil {
						return err
					}
					last, _ := recv.Elems(runtime.Float32, count-1, 1)
					slot, _ := out.Elems(runtime.Float32, k, 1)
					if err := runtime.Copy(slot, last, s); err != nil {
						return err
					}
					// acc = send before the all-reduce; overwritten after.
					if err := runtime.Memset(acc, 0, s); err != nil {
						return err
					}
					if err := runtime.Axpy(s, float32(r+1), one, acc, count); err != nil {
						return err
					}
					if err := b.AllReduce(acc, recv, count, runtime.Float32, ccl.Sum, c, s); err != nil {
						return err
					}
					if err := runtime.Memset(acc, 0xff, s); err != nil {
						return err
					}
				}
				if err := g.sync(r); err != nil {
					return err
				}
				got[r] = decode(t, runtime.Float32, out)
				sums[r] = decode(t, runtime.Float32, recv)
				return nil
			})
			wantSum := float64(n * (n + 1) / 2)
			for r := range n {
				if err := b.GetAsyncError(g.comms[r]); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				prev := (r + n - 1) % n
				for k, v := range got[r] {
					if want := float64(prev*1000 + k); v != want {
						t.Fatalf("rank %d round %d received %v, want %v (rank %d's data before it overwrote it)", r, k, v, want, prev)
					}
				}
				for i, v := range sums[r] {
					if v != wantSum {
						t.Fatalf("rank %d all-reduce element %d = %v, want %v", r, i, v, wantSum)
					}
				}
			}
		})
	}
}

func TestSharedRefusals(t *testing.T) {
	noLeaks(t)
	b := local.NewShared(runtime.CPU, local.WithTimeout(time.Second))
	if got := b.Type(); got != runtime.CPU || !b.Shared() {
		t.Fatalf("Type %v Shared %v", got, b.Shared())
	}
	g := sharedGroup(t, b, 2, 1)
	dev, c, s := g.comms[0].Device(), g.comms[0], g.streams[0]
	f32 := alloc(t, dev, runtime.Float32, make([]float64, 4))
	i32 := alloc(t, dev, runtime.Int32, make([]float64, 4))
	for _, tc := range []struct {
		name string
		call func() error
		want ccl.Status
	}{
		{"max", func() error { return b.AllReduce(f32, f32, 4, runtime.Float32, ccl.Max, c, s) }, ccl.StatusNotSupported},
		{"int32 sum", func() error { return b.AllReduce(i32, i32, 4, runtime.Int32, ccl.Sum, c, s) }, ccl.StatusNotSupported},
		{"too short", func() error { return b.AllReduce(f32, f32, 5, runtime.Float32, ccl.Sum, c, s) }, ccl.StatusInvalidArgument},
		{"send to self outside a group", func() error { return b.Send(f32, 4, runtime.Float32, 0, c, s) }, ccl.StatusInvalidArgument},
		{"stream of another device", func() error {
			other, err := runtime.NewStream(runtime.Device{Type: runtime.CPU, Index: 1})
			if err != nil {
				return err
			}
			defer other.Destroy()
			return b.Recv(f32, 4, runtime.Float32, 1, c, other)
		}, ccl.StatusInvalidArgument},
		// A stream that cannot take work is refused before the call is
		// numbered, as NCCL's backend refuses it; posting on it failed
		// the whole communicator.
		{"destroyed stream", func() error {
			gone, err := runtime.NewStream(dev)
			if err != nil {
				return err
			}
			if err := gone.Destroy(); err != nil {
				return err
			}
			return b.AllReduce(f32, f32, 4, runtime.Float32, ccl.Sum, c, gone)
		}, ccl.StatusInvalidArgument},
		{"zero stream", func() error { return b.Send(f32, 4, runtime.Float32, 1, c, &runtime.Stream{}) }, ccl.StatusInvalidArgument},
	} {
		err := tc.call()
		if ccl.StatusOf(err) != tc.want {
			t.Errorf("%s: got %v, want status %v", tc.name, err, tc.want)
		}
	}
	// Refusals take no number: the ranks still agree afterwards.
	g.each(func(r int) error {
		buf := alloc(t, g.comms[r].Device(), runtime.Float32, []float64{float64(r + 1)})
		if err := b.AllReduce(buf, buf, 1, runtime.Float32, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		checkValues(t, "after refusals", runtime.Float32, decode(t, runtime.Float32, buf), []float64{3})
		return nil
	})
}

func TestSharedFailures(t *testing.T) {
	noLeaks(t)
	t.Run("missing rank", func(t *testing.T) {
		b := local.NewShared(runtime.CPU, local.WithTimeout(200*time.Millisecond))
		g := sharedGroup(t, b, 3, 1)
		g.each(func(r int) error {
			if r == 2 {
				return nil // never arrives
			}
			buf := alloc(t, g.comms[r].Device(), runtime.Float32, []float64{1})
			return b.AllReduce(buf, buf, 1, runtime.Float32, ccl.Sum, g.comms[r], g.streams[r])
		})
		err := b.GetAsyncError(g.comms[0])
		if ccl.StatusOf(err) != ccl.StatusTimeout || !strings.Contains(err.Error(), "ranks [2] did not arrive") {
			t.Fatalf("got %v, want a timeout naming rank 2", err)
		}
	})
	t.Run("recv without send", func(t *testing.T) {
		b := local.NewShared(runtime.CPU, local.WithTimeout(200*time.Millisecond))
		g := sharedGroup(t, b, 2, 1)
		buf := alloc(t, g.comms[1].Device(), runtime.Float32, []float64{1})
		start := time.Now()
		if err := b.Recv(buf, 1, runtime.Float32, 0, g.comms[1], g.streams[1]); err != nil {
			t.Fatal(err) // issued; the failure is asynchronous
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Recv returned after %v", d)
		}
		err := b.GetAsyncError(g.comms[0])
		if ccl.StatusOf(err) != ccl.StatusTimeout || !strings.Contains(err.Error(), "received nothing from rank 0") {
			t.Fatalf("got %v", err)
		}
		// Later calls say the communicator failed.
		if err := b.Send(buf, 1, runtime.Float32, 0, g.comms[1], g.streams[1]); ccl.StatusOf(err) != ccl.StatusTimeout {
			t.Fatalf("Send after the failure: %v", err)
		}
	})
	t.Run("size mismatch", func(t *testing.T) {
		b := local.NewShared(runtime.CPU, local.WithTimeout(2*time.Second))
		g := sharedGroup(t, b, 2, 1)
		g.each(func(r int) error {
			buf := alloc(t, g.comms[r].Device(), runtime.Float32, make([]float64, 4))
			if r == 0 {
				return b.Send(buf, 4, runtime.Float32, 1, g.comms[r], g.streams[r])
			}
			return b.Recv(buf, 2, runtime.Float32, 0, g.comms[r], g.streams[r])
		})
		err := b.GetAsyncError(g.comms[1])
		if !strings.Contains(fmt.Sprint(err), "received 16 bytes from rank 0 but expected 8") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("abort", func(t *testing.T) {
		b := local.NewShared(runtime.CPU, local.WithTimeout(time.Minute))
		g := sharedGroup(t, b, 2, 1)
		buf := alloc(t, g.comms[0].Device(), runtime.Float32, []float64{1})
		done := make(chan error, 1)
		go func() { done <- b.AllReduce(buf, buf, 1, runtime.Float32, ccl.Sum, g.comms[0], g.streams[0]) }()
		time.Sleep(10 * time.Millisecond)
		if err := b.CommAbort(g.comms[1]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("AllReduce still waiting 10 s after the peer aborted")
		}
		if err := b.GetAsyncError(g.comms[0]); err == nil {
			t.Fatal("no error after abort")
		}
	})
}
