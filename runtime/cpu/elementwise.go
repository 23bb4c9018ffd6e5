package cpu

import (
	"math"
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Tanh enqueues y[i] = tanh(x[i]) for n float32s.
func (m *Impl) Tanh(sh any, x, y runtime.Buffer, n int) error {
	bufs, s, err := m.vectors("Tanh", sh, n, x, y)
	if err != nil {
		return err
	}
	return s.push("Tanh", &item{kind: opTanh, a: bufs[0], b: bufs[1]})
}

// TanhBackward enqueues dx[i] = dy[i]·(1 − y[i]²) for n float32s.
func (m *Impl) TanhBackward(sh any, y, dy, dx runtime.Buffer, n int) error {
	bufs, s, err := m.vectors("TanhBackward", sh, n, y, dy, dx)
	if err != nil {
		return err
	}
	return s.push("TanhBackward", &item{kind: opTanhBackward, a: bufs[0], b: bufs[1], c: bufs[2]})
}

// Axpy enqueues y[i] += alpha·x[i] for n float32s.
func (m *Impl) Axpy(sh any, alpha float32, x, y runtime.Buffer, n int) error {
	bufs, s, err := m.vectors("Axpy", sh, n, x, y)
	if err != nil {
		return err
	}
	return s.push("Axpy", &item{kind: opAxpy, alpha: alpha, a: bufs[0], b: bufs[1]})
}

// Scale enqueues x[i] *= alpha for n float32s.
func (m *Impl) Scale(sh any, alpha float32, x runtime.Buffer, n int) error {
	bufs, s, err := m.vectors("Scale", sh, n, x)
	if err != nil {
		return err
	}
	return s.push("Scale", &item{kind: opScale, alpha: alpha, a: bufs[0]})
}

// Dot enqueues result[0] = Σ x[i]·y[i] for n float32s, summed in float64.
func (m *Impl) Dot(sh any, x, y, result runtime.Buffer, n int) error {
	const op = "Dot"
	bufs, s, err := m.vectors(op, sh, n, x, y)
	if err != nil {
		return err
	}
	out, _, err := m.vectors(op, sh, 1, result)
	if err != nil {
		return err
	}
	return s.push(op, &item{kind: opDot, a: bufs[0], b: bufs[1], c: out[0]})
}

// vectors resolves the stream and the first n float32s of each buffer, as
// bytes (at most three buffers).
func (m *Impl) vectors(op string, sh any, n int, bufs ...runtime.Buffer) ([3][]byte, *stream, error) {
	var out [3][]byte
	s, err := m.stream(op, sh)
	if err != nil {
		return out, nil, err
	}
	if n < 0 {
		return out, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "n=%d", n)
	}
	for i, b := range bufs {
		v, err := m.view(op, b)
		if err != nil {
			return out, nil, err
		}
		if b.Offset()%4 != 0 {
			return out, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "buffer offset %d is not float32-aligned", b.Offset())
		}
		if int64(n) > int64(len(v))/4 { // not n·4, which may overflow
			return out, nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%d float32s in a %d-byte buffer", n, len(v))
		}
		out[i] = v[:4*n]
	}
	return out, s, nil
}

func tanh(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = float32(math.Tanh(float64(v)))
	}
}

func tanhBackward(y, dy, dx []float32) {
	dy = dy[:len(y)]
	dx = dx[:len(y)]
	for i, v := range y {
		dx[i] = dy[i] * (1 - v*v)
	}
}

func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var sum float64
	for i, v := range x {
		sum += float64(v) * float64(y[i])
	}
	return float32(sum)
}

func scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Sleep enqueues a wait of d: the stream's worker sleeps without using a
// core (runtime.Sleeper).
func (m *Impl) Sleep(sh any, d time.Duration) error {
	s, err := m.stream("Sleep", sh)
	if err != nil {
		return err
	}
	if d < 0 {
		return runtime.Errorf("Sleep", runtime.StatusInvalidArgument, "negative duration %v", d)
	}
	return s.push("Sleep", &item{kind: opFunc, fn: func() { time.Sleep(d) }})
}
