// Package cpu is trainscope's host backend for the runtime package. It is
// always available and registers itself for runtime.CPU when imported.
//
// It models a GPU closely enough that the profiler and the built-in trainer
// behave on a laptop as they do on a cluster: the host has a configurable
// number of virtual devices (cpu:0 … cpu:63 by default, one per rank of an
// in-process run); each stream runs its work in order on its own goroutine
// behind a bounded queue, so work is asynchronous, events complete when the
// stream reaches them and take their timestamps then, and streams order
// themselves on each other's events. Memory is Go memory, aligned for
// float32 and float64 views; GEMM is a cache-blocked float32 SGEMM in pure
// Go, and the Elementwise kernels run on the stream as well.
//
// As runtime.MemoryDescriber it reports the host's memory, which every
// virtual device shares.
//
// Recording an event does not allocate. Bytes, Float32s and Enqueue give
// other in-process backends (the local collective backend) access to the
// memory behind a buffer and to a stream's order.
package cpu
