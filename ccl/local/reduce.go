package local

import (
	"unsafe"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// number is an element type the backend reduces.
type number interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// checkReduction refuses a reduction the backend cannot compute.
func checkReduction(op string, dtype runtime.DataType, r ccl.ReduceOp) error {
	switch r {
	case ccl.Sum, ccl.Prod, ccl.Max, ccl.Min, ccl.Avg:
	default:
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s", r)
	}
	switch dtype {
	case runtime.Float32, runtime.Float64, runtime.Int32, runtime.Int64:
		return nil
	}
	return ccl.Errorf(op, ccl.StatusNotSupported, "the local backend reduces float32, float64, int32 and int64, not %s", dtype)
}

// reduceBytes reduces equal-length byte images of dtype elements, in rank
// order, and returns the result's image.
func reduceBytes(dtype runtime.DataType, op ccl.ReduceOp, srcs [][]byte) []byte {
	switch dtype {
	case runtime.Float32:
		return reduce[float32](op, srcs)
	case runtime.Float64:
		return reduce[float64](op, srcs)
	case runtime.Int32:
		return reduce[int32](op, srcs)
	case runtime.Int64:
		return reduce[int64](op, srcs)
	}
	panic("local: reduceBytes of " + dtype.String()) // checkReduction refused it
}

func reduce[T number](op ccl.ReduceOp, srcs [][]byte) []byte {
	var zero T
	size := int(unsafe.Sizeof(zero))
	acc := make([]T, len(srcs[0])/size)
	out := image(acc)
	copy(out, srcs[0])
	var tmp []T
	for _, src := range srcs[1:] {
		x, aligned := view[T](src)
		if !aligned {
			// A view at an odd offset: copy it to aligned memory.
			if tmp == nil {
				tmp = make([]T, len(acc))
			}
			copy(image(tmp), src)
			x = tmp
		}
		fold(op, acc, x)
	}
	if op == ccl.Avg {
		n := T(len(srcs))
		for i := range acc {
			acc[i] /= n
		}
	}
	return out
}

// fold combines x into acc element by element.
func fold[T number](op ccl.ReduceOp, acc, x []T) {
	x = x[:len(acc)]
	switch op {
	case ccl.Sum, ccl.Avg:
		for i, v := range x {
			acc[i] += v
		}
	case ccl.Prod:
		for i, v := range x {
			acc[i] *= v
		}
	case ccl.Max:
		for i, v := range x {
			acc[i] = max(acc[i], v)
		}
	case ccl.Min:
		for i, v := range x {
			acc[i] = min(acc[i], v)
		}
	}
}

// image is the memory of s as bytes.
func image[T number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// view reads b as T elements in place when b is aligned for T.
func view[T number](b []byte) ([]T, bool) {
	var zero T
	size := unsafe.Sizeof(zero)
	if len(b) == 0 {
		return nil, true
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%unsafe.Alignof(zero) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(p), uintptr(len(b))/size), true
}
