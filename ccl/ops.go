package ccl

import (
	"context"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// AllReduce reduces buf across the group with op, in place on every rank.
func (pg *ProcessGroup) AllReduce(ctx context.Context, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, op ReduceOp) (*Work, error) {
	r, n, err := pg.operand(OpAllReduce, "", buf, dtype)
	if err != nil {
		return nil, err
	}
	c := profiler.Collective{Op: OpAllReduce, Bytes: buf.Size(), Count: int64(n), Peer: -1, Root: -1}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		return pg.impl.AllReduce(buf, buf, n, dtype, op, r.comm, r.stream)
	})
}

// Broadcast copies root's buf into buf on every other rank.
func (pg *ProcessGroup) Broadcast(ctx context.Context, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, root int) (*Work, error) {
	r, n, err := pg.operand(OpBroadcast, "", buf, dtype)
	if err != nil {
		return nil, err
	}
	if err := pg.checkRank(OpBroadcast, "root", root); err != nil {
		return nil, err
	}
	c := profiler.Collective{Op: OpBroadcast, Bytes: buf.Size(), Count: int64(n), Peer: -1, Root: int32(root)}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		return pg.impl.Broadcast(buf, buf, n, dtype, root, r.comm, r.stream)
	})
}

// Reduce reduces buf across the group with op into root's buf, in place;
// the other ranks' buffers are left as they were.
func (pg *ProcessGroup) Reduce(ctx context.Context, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, op ReduceOp, root int) (*Work, error) {
	r, n, err := pg.operand(OpReduce, "", buf, dtype)
	if err != nil {
		return nil, err
	}
	if err := pg.checkRank(OpReduce, "root", root); err != nil {
		return nil, err
	}
	c := profiler.Collective{Op: OpReduce, Bytes: buf.Size(), Count: int64(n), Peer: -1, Root: int32(root)}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		return pg.impl.Reduce(buf, buf, n, dtype, op, root, r.comm, r.stream)
	})
}

// AllGather gathers every rank's send into recv, rank-major; recv must be
// Size() times as large as send.
func (pg *ProcessGroup) AllGather(ctx context.Context, s *runtime.Stream, send, recv runtime.Buffer, dtype runtime.DataType) (*Work, error) {
	r, n, err := pg.operand(OpAllGather, "send ", send, dtype)
	if err != nil {
		return nil, err
	}
	if err := pg.checkPair(OpAllGather, r, recv, dtype, "recv", int64(n)*int64(pg.size), "send"); err != nil {
		return nil, err
	}
	c := profiler.Collective{Op: OpAllGather, Bytes: recv.Size(), Count: int64(n), Peer: -1, Root: -1}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		return pg.impl.AllGather(send, recv, n, dtype, r.comm, r.stream)
	})
}

// ReduceScatter reduces the ranks' send buffers with op and leaves block r
// of the result in rank r's recv; send must be Size() times as large as
// recv.
func (pg *ProcessGroup) ReduceScatter(ctx context.Context, s *runtime.Stream, send, recv runtime.Buffer, dtype runtime.DataType, op ReduceOp) (*Work, error) {
	r, n, err := pg.operand(OpReduceScatter, "recv ", recv, dtype)
	if err != nil {
		return nil, err
	}
	if err := pg.checkPair(OpReduceScatter, r, send, dtype, "send", int64(n)*int64(pg.size), "recv"); err != nil {
		return nil, err
	}
	c := profiler.Collective{Op: OpReduceScatter, Bytes: send.Size(), Count: int64(n), Peer: -1, Root: -1}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		return pg.impl.ReduceScatter(send, recv, n, dtype, op, r.comm, r.stream)
	})
}

// Send sends buf to rank peer, which receives it with Recv.
func (pg *ProcessGroup) Send(ctx context.Context, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, peer int) (*Work, error) {
	return pg.p2p(ctx, OpSend, s, buf, dtype, peer)
}

// Recv receives into buf what rank peer sends with Send; sizes must match.
func (pg *ProcessGroup) Recv(ctx context.Context, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, peer int) (*Work, error) {
	return pg.p2p(ctx, OpRecv, s, buf, dtype, peer)
}

func (pg *ProcessGroup) p2p(ctx context.Context, op string, s *runtime.Stream, buf runtime.Buffer, dtype runtime.DataType, peer int) (*Work, error) {
	r, n, err := pg.operand(op, "", buf, dtype)
	if err != nil {
		return nil, err
	}
	if err := pg.checkRank(op, "peer", peer); err != nil {
		return nil, err
	}
	if peer == r.rank {
		return nil, Errorf(op, StatusInvalidArgument, "group %q: rank %d cannot %s itself", pg.name, peer, map[string]string{OpSend: "send to", OpRecv: "receive from"}[op])
	}
	c := profiler.Collective{Op: op, Bytes: buf.Size(), Count: int64(n), Peer: int32(peer), Root: -1}
	return pg.issue(ctx, s, r, dtype, c, func() error {
		if op == OpSend {
			return pg.impl.Send(buf, n, dtype, peer, r.comm, r.stream)
		}
		return pg.impl.Recv(buf, n, dtype, peer, r.comm, r.stream)
	})
}

// operand finds the local rank of buf's device and buf's element count.
func (pg *ProcessGroup) operand(op, what string, buf runtime.Buffer, dtype runtime.DataType) (*localRank, int, error) {
	if pg == nil {
		return nil, 0, errNilGroup(op)
	}
	if buf.IsZero() {
		return nil, 0, Errorf(op, StatusInvalidArgument, "group %q: zero %sbuffer", pg.name, what)
	}
	r, err := pg.local(op, buf.Device())
	if err != nil {
		return nil, 0, err
	}
	n, err := elems(op, what, buf, dtype)
	return r, n, err
}

// checkPair checks the second buffer of AllGather or ReduceScatter: on the
// same device as the first, want elements long.
func (pg *ProcessGroup) checkPair(op string, r *localRank, buf runtime.Buffer, dtype runtime.DataType, what string, want int64, other string) error {
	if buf.IsZero() {
		return Errorf(op, StatusInvalidArgument, "group %q: zero %s buffer", pg.name, what)
	}
	if buf.Device() != r.dev {
		return Errorf(op, StatusInvalidArgument, "group %q: %s buffer on %s, %s buffer on %s", pg.name, what, buf.Device(), other, r.dev)
	}
	n, err := elems(op, what+" ", buf, dtype)
	if err != nil {
		return err
	}
	if int64(n) != want {
		return Errorf(op, StatusInvalidArgument, "group %q: %s buffer holds %d %s elements, expected %d (%d ranks × the %s count)", pg.name, what, n, dtype, want, pg.size, other)
	}
	return nil
}

func elems(op, what string, buf runtime.Buffer, dtype runtime.DataType) (int, error) {
	es := int64(dtype.Size())
	if es == 0 {
		return 0, Errorf(op, StatusInvalidArgument, "%s", dtype)
	}
	if buf.Size()%es != 0 {
		return 0, Errorf(op, StatusInvalidArgument, "%sbuffer of %d bytes is not a whole number of %s elements (%d bytes each)", what, buf.Size(), dtype, es)
	}
	return int(buf.Size() / es), nil
}

func (pg *ProcessGroup) checkRank(op, what string, rank int) error {
	if rank < 0 || rank >= pg.size {
		return Errorf(op, StatusInvalidArgument, "group %q: %s %d outside [0, %d)", pg.name, what, rank, pg.size)
	}
	return nil
}

// issue orders an operation after the work on s, enqueues it on r's
// communication stream inside a profiled range, and returns its Work.
func (pg *ProcessGroup) issue(ctx context.Context, s *runtime.Stream, r *localRank, dtype runtime.DataType, c profiler.Collective, enqueue func() error) (*Work, error) {
	if s == nil {
		return nil, Errorf(c.Op, StatusInvalidArgument, "group %q: nil stream", pg.name)
	}
	if s.Device().Type != pg.backend {
		return nil, Errorf(c.Op, StatusInvalidArgument, "group %q is on %s devices, the stream is on %s", pg.name, pg.backend, s.Device())
	}
	if pg.destroyed.Load() { // at once, not after Destroy's wait for the rank (checked again below)
		return nil, Errorf(c.Op, StatusInvalidArgument, "group %q used after Destroy", pg.name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pg.destroyed.Load() {
		return nil, Errorf(c.Op, StatusInvalidArgument, "group %q used after Destroy", pg.name)
	}
	done, slot, err := pg.completion(r)
	if err != nil {
		return nil, err
	}
	// Inside a group the call is only queued: its kernel is launched by
	// the outermost GroupEnd, which times it then (launchTimed).
	grouped := pg.groupOpen()
	// The operation follows what the caller enqueued on s: at once, or
	// inside a group what s holds at the outermost GroupEnd, when the
	// group's kernels are enqueued (as NCCL's follow their streams).
	// A caller that enqueues on the group's own stream (Stream) is
	// ordered already and costs the device no wait.
	var after *runtime.Stream
	if s != r.stream {
		if grouped {
			after = s
		} else if err := pg.follow(r, s); err != nil {
			return nil, err
		}
	}

	c.DType = dtype.String()
	c.Group = pg.name
	c.GroupSize = int32(pg.size)
	c.GroupRank = int32(r.rank)
	seq := r.seqOf(&c, pg.size)
	c.Seq = *seq
	c.BusFactor = BusFactor(c.Op, pg.size)
	rec := profiler.FromContext(ctx)
	if !grouped {
		rec.StartCollective(c.Op, r.stream, c)
	}
	err = enqueueIn(rec, !grouped, enqueue)
	if !grouped {
		// The backend enqueues on the handle (see Stream.Ops); inside a
		// group it does at the outermost GroupEnd, which marks the stream
		// then (launchTimed), after the ranges' starts.
		r.stream.MarkEnqueued()
	}
	if err != nil {
		if !grouped {
			rec.End()
		}
		return nil, err
	}
	w := &Work{pg: pg, r: r, op: c.Op, seq: r.seq, done: done, after: after, recorded: make(chan struct{})}
	slot.owner = w
	r.seq++
	*seq++
	if grouped {
		w.rec, w.call = rec, profiler.GroupedCollective{Name: c.Op, Stream: r.stream, Collective: c, Labels: rec.Labels()}
	}
	// The completion mark is inside the range, so that the range's end is
	// the last thing this call puts on the stream and a next call can start
	// where it ends (profiler: adjacent ranges share an event).
	if !pg.hold(w) {
		w.record()
	}
	if !grouped {
		rec.End()
	}
	return w, nil
}

// enqueueIn runs enqueue; with a range of rec open for it (ranged), a
// panic of the backend ends the range, cut short, before it goes on, so
// that the recorder's later ranges do not nest under it.
func enqueueIn(rec *profiler.Recorder, ranged bool, enqueue func() error) error {
	if ranged {
		defer func() {
			if v := recover(); v != nil {
				rec.EndCutShort()
				panic(v)
			}
		}()
	}
	return enqueue()
}
