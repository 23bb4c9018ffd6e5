//go:build amd64 || arm64

package goid

// get returns the address of the calling goroutine's descriptor (the
// runtime's g), which the runtime keeps in thread-local storage on amd64
// and in a register on arm64.
func get() uint64
