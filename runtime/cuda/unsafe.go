package cuda

import "unsafe"

// unsafePointer is unsafe.Pointer for the address of a Go heap value
// passed to C; the caller keeps the value alive across the call.
func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// cPointer is unsafe.Pointer for an address C returned: memory outside
// Go's heap, which the garbage collector neither moves nor frees.
func cPointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
