package cpu

import (
	"time"
	"unsafe"
)

// opKind says what a queued item does.
type opKind uint8

const (
	opRecord       opKind = iota + 1 // complete generation gen of ev
	opWait                           // block until src has run its item number gen
	opRelease                        // account mem as freed (FreeAsync)
	opCopy                           // copy b into a
	opSet                            // set every byte of a to val
	opGemm                           // run gemm
	opTanh                           // b = tanh(a)
	opTanhBackward                   // c = b·(1 − a²)
	opAxpy                           // b += alpha·a
	opScale                          // a *= alpha
	opDot                            // c[0] = Σ a[i]·b[i]
	opFunc                           // call fn
)

// item is one entry of a stream's queue: an op kind and its operands, held
// by value so that enqueuing (EventRecord above all) does not allocate.
type item struct {
	kind  opKind
	val   byte
	alpha float32
	gen   uint64
	ev    *event
	src   *stream
	mem   *allocation
	a     []byte
	b     []byte
	c     []byte
	gemm  *gemmCall
	fn    func()
	// tr is the work trace running when the item was enqueued, and
	// issued when that was; nil when none ran.
	tr     *workTrace
	issued time.Time
}

// exec runs the item on the stream's goroutine (or on the caller's, for
// a synchronous memory operation).
func (it *item) exec() {
	switch it.kind {
	case opRecord:
		it.ev.complete(it.gen)
	case opWait:
		it.src.reached(it.gen)
	case opRelease:
		it.mem.owner.release(it.mem)
	case opCopy:
		copy(it.a, it.b)
	case opSet:
		fill(it.a, it.val)
	case opGemm:
		it.gemm.run()
	case opTanh:
		tanh(f32(it.a), f32(it.b))
	case opTanhBackward:
		tanhBackward(f32(it.a), f32(it.b), f32(it.c))
	case opAxpy:
		axpy(it.alpha, f32(it.a), f32(it.b))
	case opScale:
		scale(it.alpha, f32(it.a))
	case opDot:
		f32(it.c)[0] = dot(f32(it.a), f32(it.b))
	case opFunc:
		it.fn()
	}
}

// f32 views b, which starts 4-byte aligned, as float32s.
func f32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func fill(b []byte, v byte) {
	if v == 0 {
		clear(b)
		return
	}
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
