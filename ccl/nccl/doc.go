// Package nccl is trainscope's collective-communication backend for CUDA:
// NCCL's libnccl.so.2 opened at run time through purego (no cgo), on the
// streams and buffers of runtime/cuda. Importing it registers the backend
// for runtime.CUDA; the library loads in Init (WithLibrary, else
// TRAINSCOPE_NCCL_LIB, else libnccl.so.2), and where it or the CUDA
// runtime is missing Init returns an error wrapping ccl.StatusUnavailable
// that lists what was tried.
//
// Communicators are created non-blocking (ncclConfig_t.blocking = 0), so
// no call into NCCL can wait forever: creation, and any operation NCCL
// answers with ncclInProgress (connection setup, say), is polled through
// ncclCommGetAsyncError until it completes, fails, or the backend's
// timeout passes, and a communicator whose peers never join is aborted and
// reported with an error wrapping ccl.StatusTimeout. Device work that never
// completes because a peer never issued its side (an NCCL kernel spins on
// the GPU) is bounded by whoever waits for it — ccl.Work.Wait polls
// GetAsyncError and has a deadline — and is ended by CommAbort.
//
// Non-blocking communicators launch every group on a thread NCCL starts
// for it; WithBlockingOps (or TRAINSCOPE_NCCL_BLOCKING=1) trades that cost
// for calls that can block on a peer (see its documentation).
//
// CommInitAll creates one communicator per device of this process, one
// goroutine (locked to its thread, with its device current) per device.
// Groups (GroupStart/GroupEnd) belong to the calling goroutine, as NCCL's
// belong to the calling thread: GroupStart locks the goroutine to its
// thread until the matching GroupEnd.
package nccl
