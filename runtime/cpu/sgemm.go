package cpu

import (
	"sync"
	"unsafe"
)

// Blocking for sgemm, after GotoBLAS: op(B) is packed kc×nc at a time
// (kept in L2/L3), op(A) mc×kc at a time (kept in L2, alpha folded in),
// both in slivers of mr rows or nr columns that the micro-kernel reads
// front to back; packing is the only code that depends on transposition.
const (
	mr = 2    // rows of a micro-tile (see kernel)
	nr = 3    // columns of a micro-tile
	kc = 256  // depth of a packed panel
	mc = 128  // rows of a packed A block; a multiple of mr
	nc = 1023 // columns of a packed B panel; a multiple of nr
)

// sgemmScratch holds the packing buffers of one sgemm call; they grow to
// the largest blocks seen (at most mc×kc and kc×nc) and are reused.
type sgemmScratch struct {
	a, b []float32
}

var scratchPool = sync.Pool{New: func() any { return new(sgemmScratch) }}

// grow returns buf with length n, reallocating only when it is too short.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// sgemm computes C = alpha·op(A)·op(B) + beta·C for column-major float32
// matrices, with the arguments of BLAS's SGEMM.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	scaleC(m, n, beta, c, ldc)
	if alpha == 0 || k == 0 {
		return
	}
	w := scratchPool.Get().(*sgemmScratch)
	defer scratchPool.Put(w)
	w.a = grow(w.a, min(mc, roundUp(m, mr))*min(kc, k))
	w.b = grow(w.b, min(kc, k)*min(nc, roundUp(n, nr)))
	for j0 := 0; j0 < n; j0 += nc {
		nb := min(nc, n-j0)
		for p0 := 0; p0 < k; p0 += kc {
			kb := min(kc, k-p0)
			packB(transB, b, ldb, p0, j0, kb, nb, w.b)
			for i0 := 0; i0 < m; i0 += mc {
				mb := min(mc, m-i0)
				packA(transA, a, lda, i0, p0, mb, kb, alpha, w.a)
				macroKernel(mb, nb, kb, w.a, w.b, c[i0+j0*ldc:], ldc)
			}
		}
	}
}

// scaleC sets C = beta·C; beta 0 overwrites C without reading it.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for j := range n {
		col := c[j*ldc : j*ldc+m]
		if beta == 0 {
			clear(col)
			continue
		}
		for i := range col {
			col[i] *= beta
		}
	}
}

// packA copies alpha·op(A)[i0:i0+mb, p0:p0+kb] into dst as slivers of mr
// rows: sliver s holds, for each p, the mr elements of rows s·mr… at p.
// Rows past mb are zero.
func packA(trans bool, a []float32, lda, i0, p0, mb, kb int, alpha float32, dst []float32) {
	for s := 0; s < mb; s += mr {
		rows := min(mr, mb-s)
		d := dst[s*kb : (s+mr)*kb]
		if rows < mr {
			clear(d)
		}
		if !trans {
			// op(A)(i, p) = A[i + p·lda]: column p is contiguous.
			for p := range kb {
				col := a[i0+s+(p0+p)*lda:]
				col = col[:rows]
				dp := d[p*mr : p*mr+mr]
				for i, v := range col {
					dp[i] = alpha * v
				}
			}
			continue
		}
		// op(A)(i, p) = A[p + i·lda]: row i of op(A) is contiguous.
		for i := range rows {
			row := a[p0+(i0+s+i)*lda:]
			row = row[:kb]
			for p, v := range row {
				d[p*mr+i] = alpha * v
			}
		}
	}
}

// packB copies op(B)[p0:p0+kb, j0:j0+nb] into dst as slivers of nr
// columns: sliver s holds, for each p, the nr elements of columns s·nr… at
// p. Columns past nb are zero.
func packB(trans bool, b []float32, ldb, p0, j0, kb, nb int, dst []float32) {
	for s := 0; s < nb; s += nr {
		cols := min(nr, nb-s)
		d := dst[s*kb : (s+nr)*kb]
		if cols < nr {
			clear(d)
		}
		if !trans {
			// op(B)(p, j) = B[p + j·ldb]: column j is contiguous.
			for j := range cols {
				col := b[p0+(j0+s+j)*ldb:]
				col = col[:kb]
				for p, v := range col {
					d[p*nr+j] = v
				}
			}
			continue
		}
		// op(B)(p, j) = B[j + p·ldb]: row p of op(B) is contiguous.
		for p := range kb {
			row := b[j0+s+(p0+p)*ldb:]
			row = row[:cols]
			copy(d[p*nr:p*nr+nr], row)
		}
	}
}

// macroKernel adds packed A (mb×kb) times packed B (kb×nb) into C.
func macroKernel(mb, nb, kb int, ap, bp []float32, c []float32, ldc int) {
	var edge [mr * nr]float32
	for js := 0; js < nb; js += nr {
		b := bp[js*kb : (js+nr)*kb]
		cols := min(nr, nb-js)
		for is := 0; is < mb; is += mr {
			a := ap[is*kb : (is+mr)*kb]
			rows := min(mr, mb-is)
			if rows == mr && cols == nr {
				kernel(kb, a, b, c[is+js*ldc:], ldc)
				continue
			}
			clear(edge[:])
			kernel(kb, a, b, edge[:], mr)
			for j := range cols {
				cj := c[is+(js+j)*ldc:]
				for i := range rows {
					cj[i] += edge[i+j*mr]
				}
			}
		}
	}
}

// kernel adds the mr×nr product of an A sliver and a B sliver, kb deep,
// into C (column-major, leading dimension ldc).
//
// Go does not vectorise, so the shape is chosen for its register
// allocator: six independent sums (enough to hide the add latency), two A
// and one B value and a temporary fit in the 15 usable XMM registers
// without spilling, where 4×4 and 2×4 spill. The loads are bounds-checked
// once, before the loop.
func kernel(kb int, a, b []float32, c []float32, ldc int) {
	_ = a[kb*mr-1]
	_ = b[kb*nr-1]
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	var c00, c10, c01, c11, c02, c12 float32
	for p := range kb {
		ap := (*[mr]float32)(unsafe.Add(pa, p*mr*4))
		bp := (*[nr]float32)(unsafe.Add(pb, p*nr*4))
		a0, a1 := ap[0], ap[1]
		b0 := bp[0]
		c00 += a0 * b0
		c10 += a1 * b0
		b1 := bp[1]
		c01 += a0 * b1
		c11 += a1 * b1
		b2 := bp[2]
		c02 += a0 * b2
		c12 += a1 * b2
	}
	c0 := c[0:mr:mr]
	c0[0] += c00
	c0[1] += c10
	c1 := c[ldc : ldc+mr : ldc+mr]
	c1[0] += c01
	c1[1] += c11
	c2 := c[2*ldc : 2*ldc+mr : 2*ldc+mr]
	c2[0] += c02
	c2[1] += c12
}
