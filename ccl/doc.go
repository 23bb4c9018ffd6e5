// Package ccl is trainscope's collective-communication layer: a registry
// of collective backends (one Impl per device type), the group guard, unique-id exchange through files, and
// process groups that run collectives and point-to-point transfers on a
// backend's streams.
//
// A backend implements Impl for one device type and registers it from init
// (ccl/local for runtime.CPU, ccl/nccl for runtime.CUDA); Lookup and
// Available find it, and an unknown type's error names what is registered
// and the import that is probably missing. Calls return errors that wrap a
// Status, so callers test them with errors.Is(err, ccl.StatusTimeout).
//
// Group and NewGroupGuard bracket a GroupStart/GroupEnd region and always
// end it. WriteUniqueID, ReadUniqueID and CleanupUniqueID move a UniqueID
// between processes through a shared directory using only its bytes; the
// reader waits with a deadline, never forever.
//
// A ProcessGroup is a named communicator bound to a backend DeviceType. It
// may hold several local ranks, one per device, each driven by its own
// goroutine (CommInitAll), or one rank of a multi-process group
// (CommInitRank). Each operation is addressed to a local rank by the device
// of the buffer passed in, is ordered after the work already on the
// caller's stream, runs on the rank's own communication stream and returns
// a Work to wait on. With a profiler.Recorder in the context, every
// operation is recorded as a collective range carrying its size, peers and
// bus-bandwidth factor. A ProcessGroup's GroupStart/GroupEnd regions
// belong to the calling goroutine, as NCCL's belong to the calling thread,
// and span every process group on the backend, whichever factory made it.
// ProcessGroupFactory creates groups once per name; Instance(backend)
// returns the process-wide factory of a backend.
package ccl
