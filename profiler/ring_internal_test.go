package profiler

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/trainscope/trainscope/internal/testmem"
	"github.com/trainscope/trainscope/runtime"
)

// queueBytes is what a recorder's two queues hold with every slot of a
// buffer of capacity ranges in memory: one pending and one extra a range.
func queueBytes(capacity int) uint64 {
	return uint64(capacity) * uint64(unsafe.Sizeof(pending{})+unsafe.Sizeof(extra{}))
}

// fillQueues takes every slot of r's two queues, as a recorder whose
// buffer has filled with device ranges and not been collected.
func fillQueues(r *Recorder) {
	for {
		slot, seq := r.pending.reserve()
		if slot == nil {
			break
		}
		r.pending.publish(seq)
	}
	for {
		slot, seq := r.extras.reserve()
		if slot == nil {
			break
		}
		r.extras.publish(seq)
	}
}

// heldPerRecorder is the live heap n recorders made with opts hold, each
// after fill (nil: as made), less the heap before they were made, per
// recorder.
func heldPerRecorder(t testing.TB, n int, fill func(*Recorder), opts ...Option) uint64 {
	t.Helper()
	p, err := New(append([]Option{WithCollectInterval(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*Recorder, n)
	before := testmem.LiveHeap()
	for i := range recs {
		if recs[i], err = p.NewRecorder(i, runtime.Device{Type: runtime.DeviceType(99)}); err != nil {
			t.Fatal(err)
		}
		if fill != nil {
			fill(recs[i])
		}
	}
	after := testmem.LiveHeap()
	goruntime.KeepAlive(recs)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after < before {
		return 0
	}
	return (after - before) / uint64(n)
}

// A recorder holds memory for the ranges it has had in flight at once,
// not for its whole buffer: a new one holds a small part of what its two
// queues take full, and one whose queues have filled holds what they take
// full and no more, whatever the buffer size.
func TestRecorderMemoryGrowsWithUse(t *testing.T) {
	for _, c := range []struct {
		asked, capacity int
	}{{1, 1}, {100, 128}, {8192, 8192}, {1 << 15, 1 << 15}} {
		t.Run(fmt.Sprint(c.asked), func(t *testing.T) {
			full := queueBytes(c.capacity)
			n := max(4, min(64, int((32<<20)/full)))
			fresh := heldPerRecorder(t, n, nil, WithBufferSize(c.asked))
			filled := heldPerRecorder(t, n, fillQueues, WithBufferSize(c.asked))
			t.Logf("buffer %d: a new recorder holds %d B, a filled one %d B; the two queues full are %d B", c.capacity, fresh, filled, full)
			if c.capacity >= 8192 && fresh > full/20 {
				t.Errorf("a new recorder holds %d B, want at most a twentieth of its queues full (%d B)", fresh, full)
			}
			// What a new one holds, its queues full, and a little more for
			// whatever keeps track of their parts and for allocation
			// rounding: not a size class up for every part (an eighth).
			if bound := fresh + full + full/32 + 4096; filled < full || filled > bound {
				t.Errorf("a filled recorder holds %d B, want from %d to %d B", filled, full, bound)
			}
		})
	}
}

// The queue delivers every value once, in order, while the producer and
// the consumer run at once and the producer keeps filling it; a value
// that finds it full is offered again (the log says how often). The
// capacities give one slot, one segment, and several segments.
func TestRingConcurrentOrder(t *testing.T) {
	for _, size := range []int{1, 3, 64, 1000, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			const total = 50000
			q := newRing[pending](size)
			var wg sync.WaitGroup
			var full int
			wg.Go(func() {
				for v := uint64(0); v < total; {
					slot, seq := q.reserve()
					if slot == nil {
						full++
						goruntime.Gosched()
						continue
					}
					slot.id, slot.name = v, "v"
					q.publish(seq)
					v++
				}
			})
			next := uint64(0)
			for next < total {
				h, tl := q.head.Load(), q.tail.Load()
				for i := h; i < tl; i++ {
					pd := q.at(i)
					if pd.id != next || pd.name != "v" {
						t.Fatalf("slot %d holds %d %q, want %d", i, pd.id, pd.name, next)
					}
					next++
				}
				q.head.Store(tl)
				if h == tl {
					goruntime.Gosched()
				}
			}
			wg.Wait()
			t.Logf("capacity %d: the producer found the queue full %d times", q.mask+1, full)
		})
	}
}

// BenchmarkRecorderMemory is the heap a recorder holds with the default
// buffer: new, and with its queues filled (what every recorder held when
// the queues were allocated whole, the baseline).
func BenchmarkRecorderMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		fill func(*Recorder)
		n    int
	}{{"new", nil, 64}, {"filled", fillQueues, 8}} {
		b.Run(c.name, func(b *testing.B) {
			var held uint64
			for b.Loop() {
				held = heldPerRecorder(b, c.n, c.fill)
			}
			b.ReportMetric(float64(held), "B/recorder")
			b.ReportMetric(float64(queueBytes(8192)), "B-queues-full")
		})
	}
}

var benchRing *ring[pending]

// BenchmarkRingPublish is a queue's producer side alone, as
// Recorder.publish drives it: reserve a slot, fill it, publish it; the
// consumer's head moves on every half ring, so the queue never fills.
func BenchmarkRingPublish(b *testing.B) {
	q := newRing[pending](8192)
	benchRing = q // on the heap, as a recorder's are
	pd := pending{name: "op", depth: 1}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		slot, seq := q.tryReserve()
		if slot == nil {
			if slot, seq = q.reserve(); slot == nil {
				b.Fatal("the queue is full")
			}
		}
		pd.id = seq
		*slot = pd
		q.publish(seq)
		if n++; n == 4096 {
			q.head.Store(q.tail.Load())
			n = 0
		}
	}
}
