// Package testmem holds what the memory-bound tests share: a reading of
// the live heap that garbage not yet collected does not blur.
package testmem
