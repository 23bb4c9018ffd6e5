package profiler

import "time"

// Collective describes a collective or point-to-point call carried by a
// range: what moved, between whom, and the factor that turns its
// algorithm bandwidth into bus bandwidth.
type Collective struct {
	Op    string // "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv"
	Bytes int64  // message size S as nccl-tests defines it (for AllGather and ReduceScatter the total gathered size)
	Count int64  // elements per rank buffer as passed to the call
	DType string // element type, e.g. "float32"
	Peer  int32  // peer rank of a Send or Recv, -1 otherwise
	Root  int32  // root rank of Broadcast or Reduce, -1 otherwise
	Group string // process group name
	// GroupID tells apart communicators that share a name (NCCL's
	// commHash for a wrapped job's operations: Megatron-LM names every
	// data-parallel group alike); 0 where the name alone identifies the
	// group. Records match across ranks by Group, GroupID and Seq.
	GroupID   uint64
	GroupSize int32  // ranks in the group
	GroupRank int32  // this rank's position in the group
	Seq       uint64 // the call's number in the group: a collective's equal on every rank; a Send's equal to its Recv's (numbered per peer)
	BusFactor float64
	// TransferEnd is, for a p2p or an all-to-all over a network
	// transport, when this rank's part of the transfer was done (NCCL's
	// proxy finished moving the data), on the record's clock; 0 when
	// unknown. A send's kernel may stop long before: it only hands the
	// data over.
	TransferEnd time.Duration
}

// AlgBandwidth is S/t in bytes per second; 0 when t is 0.
func AlgBandwidth(bytes int64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) / seconds
}
