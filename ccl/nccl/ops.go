package nccl

import (
	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// ncclDataType_t for each runtime.DataType NCCL supports.
var dataTypes = map[runtime.DataType]uintptr{
	runtime.Int8: 0, runtime.Uint8: 1, runtime.Int32: 2, runtime.Int64: 4,
	runtime.Float16: 6, runtime.Float32: 7, runtime.Float64: 8, runtime.BFloat16: 9,
}

// ncclRedOp_t for each ccl.ReduceOp; ncclAvg exists since NCCL 2.10.
var reduceOps = map[ccl.ReduceOp]uintptr{ccl.Sum: 0, ccl.Prod: 1, ccl.Max: 2, ccl.Min: 3, ccl.Avg: 4}

// operand checks a buffer of an operation: on the communicator's device,
// holding at least count elements; it returns its device address.
func operand(op, what string, c *comm, buf runtime.Buffer, count int, dtype runtime.DataType) (uintptr, error) {
	if count == 0 && buf.IsZero() {
		return 0, nil
	}
	if buf.IsZero() {
		return 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "zero %s buffer", what)
	}
	if buf.Device() != c.dev {
		return 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer on %s, %s", what, buf.Device(), c)
	}
	if need := int64(count) * int64(dtype.Size()); need > buf.Size() {
		return 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer holds %d bytes, the call needs %d", what, buf.Size(), need)
	}
	p, err := cuda.DevicePointer(buf)
	if err != nil {
		return 0, &ccl.Error{Op: op, Status: ccl.StatusInvalidArgument, Detail: what + " buffer", Err: err}
	}
	return p, nil
}

// call is one NCCL operation, ready to issue on a communicator and stream.
type call struct {
	op     string
	c      *comm
	stream uintptr
	fn     uintptr
	args   [8]uintptr // the arguments before comm and stream, with room for both
	nargs  int
}

// prepare resolves the communicator, stream, data type and count shared
// by every operation.
func (b *Backend) prepare(op string, c ccl.Comm, s *runtime.Stream, count int, dtype runtime.DataType) (*comm, uintptr, uintptr, error) {
	if err := b.ready(op); err != nil {
		return nil, 0, 0, err
	}
	nc, err := asComm(op, c)
	if err != nil {
		return nil, 0, 0, err
	}
	if s == nil {
		return nil, 0, 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "nil stream")
	}
	if s.Device() != nc.dev {
		return nil, 0, 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "stream on %s, %s", s.Device(), nc)
	}
	sp, err := cuda.StreamPointer(s)
	if err != nil {
		return nil, 0, 0, &ccl.Error{Op: op, Status: ccl.StatusInvalidArgument, Detail: "stream", Err: err}
	}
	dt, ok := dataTypes[dtype]
	if !ok {
		return nil, 0, 0, ccl.Errorf(op, ccl.StatusNotSupported, "NCCL has no data type for %s", dtype)
	}
	if count < 0 {
		return nil, 0, 0, ccl.Errorf(op, ccl.StatusInvalidArgument, "count %d", count)
	}
	return nc, sp, dt, nil
}

func (b *Backend) reduceOp(op string, r ccl.ReduceOp) (uintptr, error) {
	v, ok := reduceOps[r]
	if !ok {
		return 0, ccl.Errorf(op, ccl.StatusNotSupported, "NCCL has no reduction %s", r)
	}
	return v, nil
}

func (b *Backend) checkPeer(op, what string, c *comm, peer int) error {
	if peer < 0 || peer >= c.size {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s %d outside [0, %d)", what, peer, c.size)
	}
	return nil
}

// issue enqueues k: inside the calling goroutine's group it is queued
// until GroupEnd; outside, an ncclInProgress answer is waited out (within
// the timeout) so that the operation is on the stream when issue returns.
func (b *Backend) issue(k *call) error {
	c := k.c
	args := k.args[:k.nargs]
	args = append(args, c.h, k.stream)
	if g := b.groups.current(); g != nil {
		if err := g.join(k.op, c); err != nil {
			return err
		}
		rc := int32(dl.Call(k.fn, args...))
		if rc != ncclSuccess && rc != ncclInProgress {
			return b.ncclErr(k.op, rc, c.h, c.String())
		}
		return nil
	}
	if err := c.acquire(k.op); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	switch rc := int32(dl.Call(k.fn, args...)); rc {
	case ncclSuccess:
		return nil
	case ncclInProgress:
		return b.wait(k.op, c)
	default:
		return b.ncclErr(k.op, rc, c.h, c.String())
	}
}

// AllReduce reduces count elements of send across the ranks into recv.
func (b *Backend) AllReduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ccl.ReduceOp, c ccl.Comm, s *runtime.Stream) error {
	const name = "AllReduce"
	nc, sp, dt, err := b.prepare(name, c, s, count, dtype)
	if err != nil {
		return err
	}
	ro, err := b.reduceOp(name, op)
	if err != nil {
		return err
	}
	sb, err := operand(name, "send", nc, send, count, dtype)
	if err != nil {
		return err
	}
	rb, err := operand(name, "recv", nc, recv, count, dtype)
	if err != nil {
		return err
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: b.api.allReduce, args: [8]uintptr{sb, rb, uintptr(count), dt, ro}, nargs: 5})
}

// Broadcast copies root's send into every rank's recv.
func (b *Backend) Broadcast(send, recv runtime.Buffer, count int, dtype runtime.DataType, root int, c ccl.Comm, s *runtime.Stream) error {
	const name = "Broadcast"
	nc, sp, dt, err := b.prepare(name, c, s, count, dtype)
	if err != nil {
		return err
	}
	if err := b.checkPeer(name, "root", nc, root); err != nil {
		return err
	}
	var sb uintptr
	if nc.rank == root {
		if sb, err = operand(name, "send", nc, send, count, dtype); err != nil {
			return err
		}
	}
	rb, err := operand(name, "recv", nc, recv, count, dtype)
	if err != nil {
		return err
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: b.api.broadcast, args: [8]uintptr{sb, rb, uintptr(count), dt, uintptr(root)}, nargs: 5})
}

// Reduce reduces the ranks' send into root's recv.
func (b *Backend) Reduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ccl.ReduceOp, root int, c ccl.Comm, s *runtime.Stream) error {
	const name = "Reduce"
	nc, sp, dt, err := b.prepare(name, c, s, count, dtype)
	if err != nil {
		return err
	}
	ro, err := b.reduceOp(name, op)
	if err != nil {
		return err
	}
	if err := b.checkPeer(name, "root", nc, root); err != nil {
		return err
	}
	sb, err := operand(name, "send", nc, send, count, dtype)
	if err != nil {
		return err
	}
	var rb uintptr
	if nc.rank == root {
		if rb, err = operand(name, "recv", nc, recv, count, dtype); err != nil {
			return err
		}
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: b.api.reduce, args: [8]uintptr{sb, rb, uintptr(count), dt, ro, uintptr(root)}, nargs: 6})
}

// AllGather gathers sendCount elements from every rank into recv,
// rank-major.
func (b *Backend) AllGather(send, recv runtime.Buffer, sendCount int, dtype runtime.DataType, c ccl.Comm, s *runtime.Stream) error {
	const name = "AllGather"
	nc, sp, dt, err := b.prepare(name, c, s, sendCount, dtype)
	if err != nil {
		return err
	}
	sb, err := operand(name, "send", nc, send, sendCount, dtype)
	if err != nil {
		return err
	}
	rb, err := operand(name, "recv", nc, recv, sendCount*nc.size, dtype)
	if err != nil {
		return err
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: b.api.allGather, args: [8]uintptr{sb, rb, uintptr(sendCount), dt}, nargs: 4})
}

// ReduceScatter reduces the ranks' send buffers and leaves block rank of
// the result, recvCount elements, in recv.
func (b *Backend) ReduceScatter(send, recv runtime.Buffer, recvCount int, dtype runtime.DataType, op ccl.ReduceOp, c ccl.Comm, s *runtime.Stream) error {
	const name = "ReduceScatter"
	nc, sp, dt, err := b.prepare(name, c, s, recvCount, dtype)
	if err != nil {
		return err
	}
	ro, err := b.reduceOp(name, op)
	if err != nil {
		return err
	}
	sb, err := operand(name, "send", nc, send, recvCount*nc.size, dtype)
	if err != nil {
		return err
	}
	rb, err := operand(name, "recv", nc, recv, recvCount, dtype)
	if err != nil {
		return err
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: b.api.reduceScatter, args: [8]uintptr{sb, rb, uintptr(recvCount), dt, ro}, nargs: 5})
}

// Send sends count elements of buf to peer.
func (b *Backend) Send(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	return b.p2p("Send", buf, count, dtype, peer, c, s)
}

// Recv receives count elements from peer into buf.
func (b *Backend) Recv(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	return b.p2p("Recv", buf, count, dtype, peer, c, s)
}

func (b *Backend) p2p(name string, buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	nc, sp, dt, err := b.prepare(name, c, s, count, dtype)
	if err != nil {
		return err
	}
	if err := b.checkPeer(name, "peer", nc, peer); err != nil {
		return err
	}
	if peer == nc.rank {
		return ccl.Errorf(name, ccl.StatusInvalidArgument, "%s cannot %s itself", nc, name)
	}
	p, err := operand(name, "p2p", nc, buf, count, dtype)
	if err != nil {
		return err
	}
	fn := b.api.send
	if name == "Recv" {
		fn = b.api.recv
	}
	return b.issue(&call{op: name, c: nc, stream: sp, fn: fn, args: [8]uintptr{p, uintptr(count), dt, uintptr(peer)}, nargs: 4})
}
