package cuda

import "unsafe"

// unsafePointer is unsafe.Pointer for the address of a Go heap value
// passed to C; the caller keeps the value alive across the call.
func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
