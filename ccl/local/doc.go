// Package local is the in-process collective-communication backend for
// runtime.CPU: the ranks of a communicator are goroutines of one process,
// each driving one virtual cpu device, and data really moves between
// their buffers.
//
// Every operation is enqueued on the caller's cpu stream (cpu.Enqueue), so
// it is asynchronous exactly like a GPU collective: when a rank's stream
// reaches a collective it blocks until every rank's stream has reached the
// same collective — matched per communicator by the order in which the
// ranks issued them — and then the data is combined. Send is eager: when
// the sender's stream reaches it, the bytes are copied into a FIFO mailbox
// for the (sender, receiver) pair and the send completes. Recv blocks the
// receiver's stream until a message from that peer is there.
//
// Every wait has a deadline (WithTimeout, default 60 s); CommInitRankContext
// (which ProcessGroupFactory.GetOrCreateRank uses) also gives up when its
// context ends, naming the ranks that had not joined. A rank that never
// arrives, ranks that disagree on a collective's count, type, reduction or
// root, or a Send and Recv of different sizes fail the whole communicator:
// the error, which names the operation, the communicator and the ranks
// concerned, becomes every rank's asynchronous error (GetAsyncError),
// pending operations fail at once and the streams move on; later calls on
// the communicator return the error. CommAbort fails it the same way.
//
// A communicator has at most MaxRanks ranks; CommInitAll and CommInitRank
// refuse more with an error naming the size and the bound. What one holds
// grows with the pairs of ranks that exchange messages, not with ranks².
//
// Operations are matched by number, not by when the streams reach them:
// a communicator's collectives in the order each rank issued them, and the
// k-th Send from one rank to another with the other's k-th Recv from it.
// As in NCCL, a rank may send to and receive from itself, so NCCL's
// recipes for AllToAll, Gather and Scatter (grouped Sends and Recvs to
// every rank) run unchanged; a shared backend (below) accepts such a pair
// only inside a group, where NCCL needs it too.
//
// GroupStart and GroupEnd belong to the calling goroutine, as NCCL's
// groups belong to the calling thread; they nest, and GroupEnd without
// GroupStart on that goroutine is an error. The operations a goroutine
// issues inside its group are held back and, at its outermost GroupEnd,
// enqueued as one item per stream that runs them concurrently. Eager sends
// alone would not do: a stream that reaches a Recv blocks, so a rank whose
// Recv comes before its Send in a ring would never send. Outside a group
// every operation is enqueued at once.
//
// Reductions (Sum, Prod, Max, Min, Avg) support float32, float64, int32
// and int64; Avg of integers truncates. Broadcast, AllGather, Send and
// Recv move any data type.
//
// # Shared devices
//
// NewShared makes a backend for any device type, for ranks of one process
// that share devices — several pipeline stages on one GPU, say, where
// NCCL refuses two ranks on one device. It moves data only through the
// runtime's own operations on the ranks' streams: device-to-device copies,
// and the Elementwise Axpy and Scale for float32 Sum and Avg reductions
// (other reductions are refused with StatusNotSupported), ordered by
// events, so on CUDA the data never leaves the devices and the host never
// waits for a device. The host waits only for the peers' calls: an
// operation is matched with its peers' when they issue it (at the
// outermost GroupEnd inside a group), as NCCL's rendezvous does, bounded
// by the timeout. A Send completes when the Recv's copy has, so a buffer
// may be reused on its stream right after the call. Results are combined
// in rank order, so they do not depend on which rank arrives last. The
// events that order them are kept per endpoint and reused (at most 64
// each, destroyed with the communicator), so a transfer makes no driver
// call to create or destroy one. See shared.go for the protocol.
//
// The package registers a Backend for runtime.CPU in init and does nothing
// else there; New makes private ones (with a short timeout in tests, say).
package local
