package ccl

import (
	"context"
	"strconv"

	"github.com/trainscope/trainscope/runtime"
)

// ReduceOp is the reduction of AllReduce, Reduce and ReduceScatter.
type ReduceOp int

// Reductions.
const (
	Sum ReduceOp = iota
	Prod
	Max
	Min
	Avg
)

var reduceOpNames = [...]string{Sum: "sum", Prod: "prod", Max: "max", Min: "min", Avg: "avg"}

func (o ReduceOp) String() string {
	if o >= 0 && int(o) < len(reduceOpNames) {
		return reduceOpNames[o]
	}
	return "unsupported reduce op " + strconv.Itoa(int(o))
}

// UniqueID identifies a communicator being created across ranks: one rank
// gets it from the backend and every rank passes it to CommInitRank. The
// platform-independent helpers (WriteUniqueID, ReadUniqueID) move it between
// processes through its bytes alone.
type UniqueID interface {
	// Data returns the id's bytes (Size of them).
	Data() []byte
	// Size is the id's length in bytes, fixed per backend.
	Size() int
	// Load replaces the id's bytes; b must be exactly Size bytes long.
	Load(b []byte) error
}

// Comm is one rank's endpoint of a communicator.
type Comm interface {
	Rank() int
	Size() int
	Device() runtime.Device
}

// Impl is the collective-communication backend for one device type. Every
// operation is enqueued on a stream of that device
// type and returns once enqueued; completion is observed through the
// stream (events, synchronisation). Counts are in elements of dtype.
//
// Errors wrap a Status. Operations never wait forever: a backend gives up
// on a peer that does not arrive and reports it through GetAsyncError.
type Impl interface {
	// Type is the device type whose streams and buffers this backend uses.
	Type() runtime.DeviceType
	// Init loads the backend; an error wrapping StatusUnavailable means it
	// does not apply on this host and says what was tried.
	Init() error

	// GroupStart and GroupEnd bracket calls that the backend may fuse and
	// must not serialise against each other (a Send and Recv between the
	// same pair, say). Prefer Group or NewGroupGuard to calling them.
	// Calls between them enqueue nothing on their streams before the
	// outermost GroupEnd, as NCCL's do not: a ProcessGroup orders them
	// after their callers' streams just before it.
	GroupStart() error
	GroupEnd() error
	// GetAsyncError returns the communicator's asynchronous error: nil
	// while healthy, an error wrapping StatusInProgress while it is being
	// set up, a failure after a peer or the transport failed.
	GetAsyncError(c Comm) error

	// GetUniqueID creates a new id for CommInitRank.
	GetUniqueID() (UniqueID, error)
	// NewUniqueID returns an empty id of the backend's size, to Load into.
	NewUniqueID() UniqueID
	// CommInitAll creates one communicator per device, all in this
	// process; ranks are the devices' positions in the slice.
	CommInitAll(devices []runtime.Device) ([]Comm, error)
	// CommInitRank creates rank's endpoint of an nranks communicator; it
	// returns once every rank has joined, or with an error wrapping
	// StatusTimeout when some never do.
	CommInitRank(nranks int, id UniqueID, rank int, dev runtime.Device) (Comm, error)
	// CommDestroy frees a communicator once its work has completed;
	// CommAbort frees it at once, abandoning pending work.
	CommDestroy(c Comm) error
	CommAbort(c Comm) error

	AllReduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ReduceOp, c Comm, s *runtime.Stream) error
	Broadcast(send, recv runtime.Buffer, count int, dtype runtime.DataType, root int, c Comm, s *runtime.Stream) error
	Reduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ReduceOp, root int, c Comm, s *runtime.Stream) error
	// AllGather gathers sendCount elements from every rank into recv,
	// rank-major.
	AllGather(send, recv runtime.Buffer, sendCount int, dtype runtime.DataType, c Comm, s *runtime.Stream) error
	// ReduceScatter reduces the ranks' send buffers and leaves rank r's
	// recvCount-element block in recv.
	ReduceScatter(send, recv runtime.Buffer, recvCount int, dtype runtime.DataType, op ReduceOp, c Comm, s *runtime.Stream) error
	Send(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c Comm, s *runtime.Stream) error
	Recv(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c Comm, s *runtime.Stream) error
}

// ContextCommIniter is an optional capability of an Impl: CommInitRank
// bounded by ctx as well as by the backend's own timeout, so that a rank
// whose peers never arrive returns when its caller gives up.
// ProcessGroupFactory.GetOrCreateRank uses it where the backend has it.
type ContextCommIniter interface {
	CommInitRankContext(ctx context.Context, nranks int, id UniqueID, rank int, dev runtime.Device) (Comm, error)
}
