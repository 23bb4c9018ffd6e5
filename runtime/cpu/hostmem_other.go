//go:build !linux

package cpu

// hostMemory returns 0, 0 (unknown) where there is no Linux interface to
// read.
func hostMemory() (total, avail int64) { return 0, 0 }
