// Package dl opens native libraries at run time and calls their functions
// without cgo, on top of github.com/ebitengine/purego. It is what
// runtime/cuda and ccl/nccl load libcudart, libcublas, libcuda and libnccl
// with.
//
// Libraries are opened from a list of candidates, first that loads wins,
// and the error for none names every path tried. Symbols are looked up one
// by one (Binder), so a missing one is an error value naming it rather
// than a panic. Calls go through Call with arguments in a pooled,
// heap-allocated Frame: a call allocates nothing, and pointers the C side
// writes through (Frame.Out) never point into a Go stack that could move.
package dl
