package goid

// Get returns an identifier of the calling goroutine, unique among the
// goroutines alive at the same time (an exited goroutine's identifier may
// be reused). On amd64 and arm64 it is the address of the runtime's
// goroutine descriptor, read in a few instructions; elsewhere it is parsed
// from the header of a stack trace, which is far slower.
func Get() uint64 { return get() }
