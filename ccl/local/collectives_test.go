package local_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

var (
	reduceTypes = []runtime.DataType{runtime.Float32, runtime.Float64, runtime.Int32, runtime.Int64}
	reduceOps   = []ccl.ReduceOp{ccl.Sum, ccl.Prod, ccl.Max, ccl.Min, ccl.Avg}
	counts      = []int{1, 7, 1000}
	rankCounts  = []int{1, 2, 3, 4, 8}
)

// input is rank r's element i: small non-zero numbers for products,
// spread-out signed ones otherwise, rounded to dt.
func input(dt runtime.DataType, op ccl.ReduceOp, r, i int) float64 {
	var v float64
	isInt := dt == runtime.Int32 || dt == runtime.Int64
	switch {
	case op == ccl.Prod && isInt:
		v = float64((r+i)%3 + 1)
		if (r*5+i)%4 == 0 {
			v = -v
		}
	case op == ccl.Prod:
		v = 1 + 0.01*float64((r*3+i)%7) - 0.02
	case isInt:
		v = float64((r*37+i*11)%201 - 100)
	default:
		v = float64((r*37+i*11)%201-100) * 0.37
	}
	if dt == runtime.Float32 {
		v = float64(float32(v))
	}
	return v
}

func inputs(dt runtime.DataType, op ccl.ReduceOp, n, count int) [][]float64 {
	in := make([][]float64, n)
	for r := range in {
		in[r] = make([]float64, count)
		for i := range in[r] {
			in[r][i] = input(dt, op, r, i)
		}
	}
	return in
}

// want folds element i of every rank's values with op, in rank order,
// in float64; integer averages truncate toward zero.
func want(dt runtime.DataType, op ccl.ReduceOp, in [][]float64, i int) float64 {
	acc := in[0][i]
	for r := 1; r < len(in); r++ {
		v := in[r][i]
		switch op {
		case ccl.Sum, ccl.Avg:
			acc += v
		case ccl.Prod:
			acc *= v
		case ccl.Max:
			acc = math.Max(acc, v)
		case ccl.Min:
			acc = math.Min(acc, v)
		}
	}
	if op == ccl.Avg {
		acc /= float64(len(in))
		if dt == runtime.Int32 || dt == runtime.Int64 {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

func filled(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestReductions(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(10 * time.Second))
	for _, n := range rankCounts {
		g := newGroup(t, b, n)
		for _, dt := range reduceTypes {
			for _, op := range reduceOps {
				for _, count := range counts {
					name := fmt.Sprintf("n=%d/%s/%s/count=%d", n, dt, op, count)
					t.Run("AllReduce/"+name, func(t *testing.T) { checkAllReduce(t, g, dt, op, count) })
					t.Run("Reduce/"+name, func(t *testing.T) { checkReduce(t, g, dt, op, count, n-1) })
					t.Run("ReduceScatter/"+name, func(t *testing.T) { checkReduceScatter(t, g, dt, op, count) })
				}
			}
		}
	}
}

func checkAllReduce(t *testing.T, g *group, dt runtime.DataType, op ccl.ReduceOp, count int) {
	n := len(g.comms)
	in := inputs(dt, op, n, count)
	got := make([][]float64, n)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		send, recv := alloc(t, dev, dt, in[r]), alloc(t, dev, dt, filled(count, 99))
		if err := g.b.AllReduce(send, recv, count, dt, op, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, recv)
		return g.b.GetAsyncError(g.comms[r])
	})
	for r := range n {
		w := make([]float64, count)
		for i := range w {
			w[i] = want(dt, op, in, i)
		}
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], w)
	}
}

func checkReduce(t *testing.T, g *group, dt runtime.DataType, op ccl.ReduceOp, count, root int) {
	n := len(g.comms)
	in := inputs(dt, op, n, count)
	got := make([][]float64, n)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		send, recv := alloc(t, dev, dt, in[r]), alloc(t, dev, dt, filled(count, 99))
		if err := g.b.Reduce(send, recv, count, dt, op, root, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, recv)
		return g.b.GetAsyncError(g.comms[r])
	})
	for r := range n {
		w := filled(count, 99) // untouched off the root
		if r == root {
			for i := range w {
				w[i] = want(dt, op, in, i)
			}
		}
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], w)
	}
}

func checkReduceScatter(t *testing.T, g *group, dt runtime.DataType, op ccl.ReduceOp, count int) {
	n := len(g.comms)
	in := inputs(dt, op, n, n*count)
	got := make([][]float64, n)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		send, recv := alloc(t, dev, dt, in[r]), alloc(t, dev, dt, filled(count, 99))
		if err := g.b.ReduceScatter(send, recv, count, dt, op, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, recv)
		return g.b.GetAsyncError(g.comms[r])
	})
	for r := range n {
		w := make([]float64, count)
		for i := range w {
			w[i] = want(dt, op, in, r*count+i)
		}
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], w)
	}
}

func TestBroadcastAndAllGather(t *testing.T) {
	noLeaks(t)
	b := local.New(local.WithTimeout(10 * time.Second))
	// Data movement is type-blind: include types that cannot be reduced.
	types := []runtime.DataType{runtime.Float32, runtime.Float64, runtime.Int32, runtime.Int64, runtime.Float16, runtime.Int8}
	for _, n := range rankCounts {
		g := newGroup(t, b, n)
		for _, dt := range types {
			for _, count := range counts {
				name := fmt.Sprintf("n=%d/%s/count=%d", n, dt, count)
				for _, root := range []int{0, n / 2, n - 1} {
					t.Run(fmt.Sprintf("Broadcast/%s/root=%d", name, root), func(t *testing.T) { checkBroadcast(t, g, dt, count, root) })
				}
				t.Run("AllGather/"+name, func(t *testing.T) { checkAllGather(t, g, dt, count) })
			}
		}
	}
}

// movable is rank r's element i for a data-movement test, small enough
// for every type.
func movable(r, i int) float64 { return float64((r*13+i*7)%100 + 1) }

func checkBroadcast(t *testing.T, g *group, dt runtime.DataType, count, root int) {
	n := len(g.comms)
	got := make([][]float64, n)
	src := make([]float64, count)
	for i := range src {
		src[i] = movable(root, i)
	}
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		mine := make([]float64, count)
		for i := range mine {
			mine[i] = movable(r, i)
		}
		buf := alloc(t, dev, dt, mine)
		// In place, as a ProcessGroup calls it.
		if err := g.b.Broadcast(buf, buf, count, dt, root, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, buf)
		return g.b.GetAsyncError(g.comms[r])
	})
	for r := range n {
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], src)
	}
}

func checkAllGather(t *testing.T, g *group, dt runtime.DataType, count int) {
	n := len(g.comms)
	got := make([][]float64, n)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		mine := make([]float64, count)
		for i := range mine {
			mine[i] = movable(r, i)
		}
		send, recv := alloc(t, dev, dt, mine), alloc(t, dev, dt, filled(n*count, 0))
		if err := g.b.AllGather(send, recv, count, dt, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		got[r] = decode(t, dt, recv)
		return g.b.GetAsyncError(g.comms[r])
	})
	w := make([]float64, 0, n*count)
	for r := range n {
		for i := range count {
			w = append(w, movable(r, i))
		}
	}
	for r := range n {
		checkValues(t, fmt.Sprintf("rank %d", r), dt, got[r], w)
	}
}

// TestInPlace runs AllGather and ReduceScatter with the send buffer inside
// the receive buffer (and the reverse), as NCCL defines in-place calls,
// and AllReduce on views at odd byte offsets.
func TestInPlace(t *testing.T) {
	noLeaks(t)
	const n, count = 4, 7
	b := local.New(local.WithTimeout(10 * time.Second))
	g := newGroup(t, b, n)
	dt := runtime.Float64
	es := int64(dt.Size())

	gathered := make([][]float64, n)
	scattered := make([][]float64, n)
	odd := make([][]float64, n)
	in := inputs(dt, ccl.Sum, n, n*count)
	g.each(func(r int) error {
		dev := g.comms[r].Device()
		// AllGather: my block already sits at position r of recv.
		all := filled(n*count, 0)
		for i := range count {
			all[r*count+i] = movable(r, i)
		}
		recv := alloc(t, dev, dt, all)
		send, err := recv.Slice(int64(r*count)*es, count*es)
		if err != nil {
			return err
		}
		if err := b.AllGather(send, recv, count, dt, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		// ReduceScatter: the result lands in block r of send.
		sbuf := alloc(t, dev, dt, in[r])
		rview, err := sbuf.Slice(int64(r*count)*es, count*es)
		if err != nil {
			return err
		}
		if err := b.ReduceScatter(sbuf, rview, count, dt, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		// AllReduce on a view 3 bytes into its allocation.
		raw := alloc(t, dev, runtime.Uint8, filled(3+count*int(es), 0))
		view, err := raw.Slice(3, count*es)
		if err != nil {
			return err
		}
		if err := b.AllReduce(sbuf, view, count, dt, ccl.Sum, g.comms[r], g.streams[r]); err != nil {
			return err
		}
		if err := g.sync(r); err != nil {
			return err
		}
		gathered[r] = decode(t, dt, recv)
		scattered[r] = decode(t, dt, rview)
		odd[r] = decode(t, dt, view)
		return b.GetAsyncError(g.comms[r])
	})
	var wantAll []float64
	for r := range n {
		for i := range count {
			wantAll = append(wantAll, movable(r, i))
		}
	}
	for r := range n {
		checkValues(t, fmt.Sprintf("AllGather rank %d", r), dt, gathered[r], wantAll)
		w := make([]float64, count)
		for i := range w {
			w[i] = want(dt, ccl.Sum, in, r*count+i)
		}
		checkValues(t, fmt.Sprintf("ReduceScatter rank %d", r), dt, scattered[r], w)
	}
	// The odd-offset AllReduce summed the first count elements of each
	// rank's send buffer after the ReduceScatter wrote into it.
	for i := range count {
		var sum float64
		for r := range n {
			v := in[r][i]
			if r == 0 { // rank 0's block 0 now holds the ReduceScatter result
				v = want(dt, ccl.Sum, in, i)
			}
			sum += v
		}
		for r := range n {
			if !same(dt, odd[r][i], sum) {
				t.Fatalf("odd-offset AllReduce rank %d element %d = %v, want %v", r, i, odd[r][i], sum)
			}
		}
	}
}
