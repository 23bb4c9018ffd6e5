package testmem

import "runtime"

// LiveHeap is the heap in use after two collections (the second frees
// what the first's finalizers released), in bytes.
func LiveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
