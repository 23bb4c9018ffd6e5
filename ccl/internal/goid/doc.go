// Package goid identifies the calling goroutine. ccl uses it to give
// GroupStart/GroupEnd regions the scope NCCL gives them, the calling
// thread, which in Go is the calling goroutine; it is asked only while a
// region is open.
package goid
