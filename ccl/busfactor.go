package ccl

// Operation names, as profiler records and BusFactor use them.
const (
	OpAllReduce     = "AllReduce"
	OpBroadcast     = "Broadcast"
	OpReduce        = "Reduce"
	OpAllGather     = "AllGather"
	OpReduceScatter = "ReduceScatter"
	OpSend          = "Send"
	OpRecv          = "Recv"
	OpAllToAll      = "AllToAll"
	OpGather        = "Gather"
	OpScatter       = "Scatter"
	// OpSendRecv is NCCL's name for the kernels and operations that run
	// a group's sends and receives together.
	OpSendRecv = "SendRecv"
)

// BusFactor is the factor nccl-tests multiplies algorithm bandwidth by to
// get bus bandwidth for op over n ranks: 2(n−1)/n for AllReduce, (n−1)/n
// for AllGather and ReduceScatter (whose message size is the total
// gathered size), for Gather and Scatter (likewise: the root's whole
// buffer) and for AllToAll (whose message size is the total a rank
// sends, to itself included), 1 for Broadcast, Reduce, Send, Recv and
// SendRecv. It is 0 for an unlisted op or n < 1.
func BusFactor(op string, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch op {
	case OpAllReduce:
		return 2 * f
	case OpAllGather, OpReduceScatter, OpAllToAll, OpGather, OpScatter:
		return f
	case OpBroadcast, OpReduce, OpSend, OpRecv, OpSendRecv:
		return 1
	}
	return 0
}
