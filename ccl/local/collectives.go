package local

import (
	"math"
	"sync"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// part is one rank's side of a collective, with its buffers resolved.
type part struct {
	op    string
	count int
	dtype runtime.DataType
	redop ccl.ReduceOp
	root  int // -1 for operations without one
	send  []byte
	recv  []byte
}

// round is one collective as the ranks reach it.
type round struct {
	parts   []*part // by rank; nil until that rank arrives
	ref     *part   // the first arrival's, which the others must agree with
	refRank int
	arrived int
	done    chan struct{} // closed once the data is combined
}

// issuer numbers a rank's operations in the order they are issued:
// collectives per communicator, sends and receives per peer. The ranks
// match operations by these numbers, not by when their streams reach
// them. A number is taken only when the submission succeeds, so the
// ranks' numbering stays aligned.
type issuer struct {
	mu          sync.Mutex
	collectives uint64
	sent        map[int]uint64 // by peer; a peer absent has 0
	received    map[int]uint64 // by peer
}

// AllReduce reduces count elements of every rank's send with op into every
// rank's recv; send and recv may be the same buffer.
func (b *Backend) AllReduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ccl.ReduceOp, c ccl.Comm, s *runtime.Stream) error {
	p := &part{op: ccl.OpAllReduce, count: count, dtype: dtype, redop: op, root: -1}
	lc, n, err := b.prepare(p, c, s)
	if err != nil {
		return err
	}
	if b.shared {
		return b.deviceCollective(lc, s, p, send, recv, n)
	}
	if p.send, err = bytesOf(p.op, "send", lc, send, n); err != nil {
		return err
	}
	if p.recv, err = bytesOf(p.op, "recv", lc, recv, n); err != nil {
		return err
	}
	return b.issue(lc, s, p)
}

// Broadcast copies count elements of root's send into every rank's recv.
// send is read on root only.
func (b *Backend) Broadcast(send, recv runtime.Buffer, count int, dtype runtime.DataType, root int, c ccl.Comm, s *runtime.Stream) error {
	p := &part{op: ccl.OpBroadcast, count: count, dtype: dtype, root: root}
	lc, n, err := b.prepare(p, c, s)
	if err != nil {
		return err
	}
	if b.shared {
		return b.deviceCollective(lc, s, p, send, recv, n)
	}
	if lc.rank == root {
		if p.send, err = bytesOf(p.op, "send", lc, send, n); err != nil {
			return err
		}
	}
	if p.recv, err = bytesOf(p.op, "recv", lc, recv, n); err != nil {
		return err
	}
	return b.issue(lc, s, p)
}

// Reduce reduces count elements of every rank's send with op into root's
// recv. recv is written on root only.
func (b *Backend) Reduce(send, recv runtime.Buffer, count int, dtype runtime.DataType, op ccl.ReduceOp, root int, c ccl.Comm, s *runtime.Stream) error {
	p := &part{op: ccl.OpReduce, count: count, dtype: dtype, redop: op, root: root}
	lc, n, err := b.prepare(p, c, s)
	if err != nil {
		return err
	}
	if b.shared {
		return b.deviceCollective(lc, s, p, send, recv, n)
	}
	if p.send, err = bytesOf(p.op, "send", lc, send, n); err != nil {
		return err
	}
	if lc.rank == root {
		if p.recv, err = bytesOf(p.op, "recv", lc, recv, n); err != nil {
			return err
		}
	}
	return b.issue(lc, s, p)
}

// AllGather gathers sendCount elements from every rank into every rank's
// recv, rank-major.
func (b *Backend) AllGather(send, recv runtime.Buffer, sendCount int, dtype runtime.DataType, c ccl.Comm, s *runtime.Stream) error {
	p := &part{op: ccl.OpAllGather, count: sendCount, dtype: dtype, root: -1}
	lc, n, err := b.prepare(p, c, s)
	if err != nil {
		return err
	}
	if b.shared {
		return b.deviceCollective(lc, s, p, send, recv, n)
	}
	if p.send, err = bytesOf(p.op, "send", lc, send, n); err != nil {
		return err
	}
	if p.recv, err = bytesOf(p.op, "recv", lc, recv, n*int64(lc.w.n)); err != nil {
		return err
	}
	return b.issue(lc, s, p)
}

// ReduceScatter reduces every rank's send (Size()·recvCount elements) with
// op and leaves block r of the result in rank r's recv.
func (b *Backend) ReduceScatter(send, recv runtime.Buffer, recvCount int, dtype runtime.DataType, op ccl.ReduceOp, c ccl.Comm, s *runtime.Stream) error {
	p := &part{op: ccl.OpReduceScatter, count: recvCount, dtype: dtype, redop: op, root: -1}
	lc, n, err := b.prepare(p, c, s)
	if err != nil {
		return err
	}
	if b.shared {
		return b.deviceCollective(lc, s, p, send, recv, n)
	}
	if p.send, err = bytesOf(p.op, "send", lc, send, n*int64(lc.w.n)); err != nil {
		return err
	}
	if p.recv, err = bytesOf(p.op, "recv", lc, recv, n); err != nil {
		return err
	}
	return b.issue(lc, s, p)
}

// reduces reports whether op combines values (and so has a reduction).
func reduces(op string) bool {
	return op == ccl.OpAllReduce || op == ccl.OpReduce || op == ccl.OpReduceScatter
}

// prepare checks what every collective shares and returns the
// communicator and the byte size of count elements.
func (b *Backend) prepare(p *part, c ccl.Comm, s *runtime.Stream) (*comm, int64, error) {
	lc, err := usable(p.op, c)
	if err != nil {
		return nil, 0, err
	}
	if err := checkStream(p.op, lc, s); err != nil {
		return nil, 0, err
	}
	if p.count < 0 {
		return nil, 0, ccl.Errorf(p.op, ccl.StatusInvalidArgument, "count %d", p.count)
	}
	es := p.dtype.Size()
	if es == 0 {
		return nil, 0, ccl.Errorf(p.op, ccl.StatusInvalidArgument, "%s", p.dtype)
	}
	blocks := 1 // a rank's buffer holds this many blocks of count elements
	if p.op == ccl.OpAllGather || p.op == ccl.OpReduceScatter {
		blocks = lc.w.n
	}
	if err := checkBytes(p.op, p.count, es, blocks); err != nil {
		return nil, 0, err
	}
	if reduces(p.op) {
		check := checkReduction
		if b.shared {
			check = checkDeviceReduction
		}
		if err := check(p.op, p.dtype, p.redop); err != nil {
			return nil, 0, err
		}
	}
	if p.root != -1 || p.op == ccl.OpBroadcast || p.op == ccl.OpReduce {
		if p.root < 0 || p.root >= lc.w.n {
			return nil, 0, ccl.Errorf(p.op, ccl.StatusInvalidArgument, "root %d outside [0, %d)", p.root, lc.w.n)
		}
	}
	return lc, int64(p.count) * int64(es), nil
}

// checkBytes refuses a count whose buffer of blocks·count elements of es
// bytes would hold more bytes than an int64 counts.
func checkBytes(op string, count, es, blocks int) error {
	if int64(count) > math.MaxInt64/int64(es)/int64(blocks) {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "count %d: %d elements of %d bytes do not fit any buffer", count, count, es*blocks)
	}
	return nil
}

// issue numbers the collective and submits it on s.
func (b *Backend) issue(c *comm, s *runtime.Stream, p *part) error {
	c.issue.mu.Lock()
	defer c.issue.mu.Unlock()
	seq := c.issue.collectives
	if err := b.submit(c, s, func() { c.collective(seq, p) }); err != nil {
		return err
	}
	c.issue.collectives++
	return nil
}

// collective runs on the rank's stream: it joins round seq, waits for the
// other ranks, and the last to arrive combines the data for all. Failures
// fail the communicator; the stream then moves on.
func (c *comm) collective(seq uint64, p *part) {
	w := c.w
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	rd := w.rounds[seq]
	if rd == nil {
		rd = &round{parts: make([]*part, w.n), ref: p, refRank: c.rank, done: make(chan struct{})}
		w.rounds[seq] = rd
	}
	if err := agree(describe(p.op, seq, w), rd, c.rank, p); err != nil {
		w.failLocked(err)
		w.mu.Unlock()
		return
	}
	rd.parts[c.rank] = p
	rd.arrived++
	if rd.arrived == w.n {
		// Every other rank waits for done, so their buffers hold still.
		delete(w.rounds, seq)
		w.mu.Unlock()
		combine(rd.parts)
		close(rd.done)
		return
	}
	w.mu.Unlock()

	timer, stop := c.waitTimer()
	defer stop()
	timedOut := false
	select {
	case <-rd.done:
		return
	case <-w.broken:
	case <-timer:
		timedOut = true
	}
	w.mu.Lock()
	if rd.arrived == w.n {
		// Complete: the last rank is combining; wait for it, it is quick.
		w.mu.Unlock()
		<-rd.done
		return
	}
	if timedOut {
		var missing, present []int
		for r, pp := range rd.parts {
			if pp == nil {
				missing = append(missing, r)
			} else {
				present = append(present, r)
			}
		}
		w.failLocked(ccl.Errorf(p.op, ccl.StatusTimeout, "%s: ranks %v did not arrive within %v (ranks %v did)", describe(p.op, seq, w), missing, c.timeout, present))
	}
	w.mu.Unlock()
}

// agree checks p against the round's first arrival.
func agree(what string, rd *round, rank int, p *part) error {
	ref, rr := rd.ref, rd.refRank
	bad := func(field string, a, b any) error {
		return ccl.Errorf(p.op, ccl.StatusInvalidArgument, "%s: ranks disagree on the %s: rank %d has %v, rank %d has %v", what, field, rr, a, rank, b)
	}
	switch {
	case p.op != ref.op:
		return ccl.Errorf(p.op, ccl.StatusInvalidArgument, "%s: ranks called different collectives: rank %d called %s, rank %d called %s", what, rr, ref.op, rank, p.op)
	case p.count != ref.count:
		return bad("count", ref.count, p.count)
	case p.dtype != ref.dtype:
		return bad("data type", ref.dtype, p.dtype)
	case reduces(p.op) && p.redop != ref.redop:
		return bad("reduction", ref.redop, p.redop)
	case p.root != ref.root:
		return bad("root", ref.root, p.root)
	}
	return nil
}

// combine moves the data of a complete round.
func combine(parts []*part) {
	p0 := parts[0]
	n := len(parts)
	switch p0.op {
	case ccl.OpAllReduce:
		res := reduceBytes(p0.dtype, p0.redop, sends(parts, 0, len(p0.send)))
		for _, p := range parts {
			copy(p.recv, res)
		}
	case ccl.OpReduce:
		res := reduceBytes(p0.dtype, p0.redop, sends(parts, 0, len(p0.send)))
		copy(parts[p0.root].recv, res)
	case ccl.OpBroadcast:
		// The root's own copy last: its recv may overlap its send.
		src := parts[p0.root].send
		for r, p := range parts {
			if r != p0.root {
				copy(p.recv, src)
			}
		}
		copy(parts[p0.root].recv, src)
	case ccl.OpAllGather:
		// Gather first: a rank's send may lie inside its recv (in place).
		block := len(p0.send)
		all := make([]byte, 0, n*block)
		for _, p := range parts {
			all = append(all, p.send...)
		}
		for _, p := range parts {
			copy(p.recv, all)
		}
	case ccl.OpReduceScatter:
		// Reduce every block before writing any: recv may lie inside send.
		block := len(p0.recv)
		res := make([][]byte, n)
		for r := range parts {
			res[r] = reduceBytes(p0.dtype, p0.redop, sends(parts, r*block, block))
		}
		for r, p := range parts {
			copy(p.recv, res[r])
		}
	}
}

// sends returns bytes [off, off+n) of every rank's send buffer.
func sends(parts []*part, off, n int) [][]byte {
	out := make([][]byte, len(parts))
	for i, p := range parts {
		out[i] = p.send[off : off+n]
	}
	return out
}
