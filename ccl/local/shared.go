package local

import (
	"errors"
	"fmt"
	"sync"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/internal/goid"
	"github.com/trainscope/trainscope/runtime"
)

// Shared devices (NewShared). Data moves through the runtime's own
// operations, enqueued on the ranks' streams and ordered by events; the
// host only matches operations and hands events from one rank to another.
//
// Each operation is posted, then resolved. Posting records a "ready"
// event on the caller's stream (its data is in place once the stream gets
// there) and registers the operation with its peers; it never waits.
// Resolving waits on the host — bounded by the backend's timeout — for
// what the peers posted or enqueued, and makes the caller's stream wait
// for the events they recorded:
//
//   - A collective is executed by the last rank to post it, on its own
//     stream: it waits for every rank's ready event, combines the sends
//     into a scratch buffer of its endpoint, in rank order (so the result
//     does not depend on which rank executes), and records "done". Every
//     rank then copies its part of the result into its own recv on its
//     own stream, after done; the executor's stream waits for those
//     copies before its scratch can be used again.
//   - A Recv copies the matching Send's buffer on the receiver's stream,
//     after the sender's ready event, and records "copied"; the sender's
//     stream waits for copied before it may touch its buffer again. So a
//     Send completes when its data has arrived, as NCCL's does.
//
// Inside a group every operation is posted at the outermost GroupEnd
// before any is resolved, receives and results are taken concurrently,
// and only then are sends and scratch released: a rank waits only for
// what its peers post or take, never for a peer's own wait, so the ranks
// of a group cannot wait for each other in a circle. Outside a group an
// operation is posted and resolved at once, so a Send returns when its
// Recv has taken the data. Either way the host waits only for the peers' host calls;
// the devices do the rest asynchronously.

// sharedOp is an operation of a shared backend between posting and
// resolving.
type sharedOp interface {
	post() error
	// take is the first half of resolving: receives and results.
	take()
	// release is the second half: sends and the executor's scratch.
	release()
	world() *world
}

// checkDeviceReduction accepts what the runtime's elementwise operations
// can reduce.
func checkDeviceReduction(op string, dtype runtime.DataType, r ccl.ReduceOp) error {
	switch r {
	case ccl.Sum, ccl.Prod, ccl.Max, ccl.Min, ccl.Avg:
	default:
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s", r)
	}
	if dtype != runtime.Float32 || (r != ccl.Sum && r != ccl.Avg) {
		return ccl.Errorf(op, ccl.StatusNotSupported, "shared-device collectives reduce float32 with sum or avg (through the runtime's Axpy and Scale), not %s with %s", dtype, r)
	}
	return nil
}

// checkBuffer checks that buf holds n bytes on c's device and returns its
// first n bytes as a view. With n 0 the buffer may be the zero Buffer.
func checkBuffer(op, what string, c *comm, buf runtime.Buffer, n int64) (runtime.Buffer, error) {
	if n == 0 {
		return runtime.Buffer{}, nil
	}
	if buf.IsZero() {
		return runtime.Buffer{}, ccl.Errorf(op, ccl.StatusInvalidArgument, "zero %s buffer", what)
	}
	if buf.Device() != c.dev {
		return runtime.Buffer{}, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer on %s, %s", what, buf.Device(), c)
	}
	if buf.Size() < n {
		return runtime.Buffer{}, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer holds %d bytes, the call needs %d", what, buf.Size(), n)
	}
	return buf.Slice(0, n)
}

// recordOn records an untimed event of c's pool on s, which must be a
// stream of c's device.
func (c *comm) recordOn(s *runtime.Stream) (*runtime.Event, error) {
	e, err := c.events.get(s)
	if err != nil {
		return nil, err
	}
	if err := e.Record(s); err != nil {
		c.events.put(s.Impl(), e)
		return nil, err
	}
	return e, nil
}

// submitShared posts and resolves op now or, inside a group of the calling
// goroutine, keeps it for GroupEnd. The caller holds the issuer's lock and
// has numbered op; a failure to post fails the communicator, since the
// ranks' numbering would no longer agree.
func (b *Backend) submitShared(op sharedOp) error {
	if b.groups.open.Load() > 0 {
		id := goid.Get()
		b.groups.mu.Lock()
		if g := b.groups.m[id]; g != nil {
			g.shared = append(g.shared, op)
			b.groups.mu.Unlock()
			return nil
		}
		b.groups.mu.Unlock()
	}
	return runShared([]sharedOp{op})
}

// inGroup reports whether the calling goroutine has a group open.
func (b *Backend) inGroup() bool {
	if b.groups.open.Load() == 0 {
		return false
	}
	id := goid.Get()
	b.groups.mu.Lock()
	defer b.groups.mu.Unlock()
	return b.groups.m[id] != nil
}

// runShared posts every op, then takes, then releases.
func runShared(ops []sharedOp) error {
	var errs []error
	posted := ops[:0:0]
	for _, op := range ops {
		if err := op.post(); err != nil {
			op.world().fail(err)
			errs = append(errs, err)
			continue
		}
		posted = append(posted, op)
	}
	// The takes wait concurrently. Each waits only for a peer's post, but
	// a peer outside a group posts its next operation only once its
	// previous one is released, which may wait for another of these
	// takes: taken one after the other, a take waiting for such a peer
	// would hold back the take that peer waits for (rank 0 receiving from
	// 2 and then from 1 in a group, while 1 sends to 0 and then to 2, and
	// 2 receives from 1 before it sends to 0).
	if len(posted) == 1 {
		posted[0].take()
	} else {
		var wg sync.WaitGroup
		for _, op := range posted {
			wg.Go(op.take)
		}
		wg.Wait()
	}
	for _, op := range posted {
		op.release()
	}
	return errors.Join(errs...)
}

// wait blocks until ch is closed, the communicator fails or the timeout
// passes; it returns false unless ch was closed. On a timeout it fails the
// communicator with the error timeout returns.
func (c *comm) wait(ch <-chan struct{}, timeout func() error) bool {
	select {
	case <-ch:
		return true
	default:
	}
	timer, stop := c.waitTimer()
	defer stop()
	select {
	case <-ch:
		return true
	case <-c.w.broken:
		return false
	case <-timer:
		c.w.fail(timeout())
		return false
	}
}

// sharedPart is one rank's side of a shared collective.
type sharedPart struct {
	c          *comm
	s          *runtime.Stream
	p          *part // op, count, dtype, reduction, root
	send, recv runtime.Buffer
	ready      *runtime.Event // recorded at posting
	pulled     *runtime.Event // recorded after the copy of its result
	rd         *sharedRound
	seq        uint64
	executor   bool
}

// sharedRound is one shared collective as the ranks post it.
type sharedRound struct {
	parts    []*sharedPart
	ref      *part
	refRank  int
	arrived  int
	exec     *sharedPart
	acc      runtime.Buffer // the result, in the executor's scratch
	private  runtime.Buffer // scratch of this round alone, when the endpoint's was held
	done     *runtime.Event // recorded on the executor's stream after acc
	executed chan struct{}  // closed once done is recorded (or on failure)
	taken    int            // ranks other than the executor that have taken
	allTaken chan struct{}
}

func (sp *sharedPart) world() *world { return sp.c.w }

// deviceCollective issues a collective of a shared backend. n is the byte
// size of count elements.
func (b *Backend) deviceCollective(c *comm, s *runtime.Stream, p *part, send, recv runtime.Buffer, n int64) error {
	size := int64(c.w.n)
	sendN, recvN := n, n
	switch p.op {
	case ccl.OpAllGather:
		recvN = n * size
	case ccl.OpReduceScatter:
		sendN = n * size
	}
	sp := &sharedPart{c: c, s: s, p: p}
	var err error
	if p.op != ccl.OpBroadcast || c.rank == p.root {
		if sp.send, err = checkBuffer(p.op, "send", c, send, sendN); err != nil {
			return err
		}
	}
	if p.op != ccl.OpReduce || c.rank == p.root {
		if sp.recv, err = checkBuffer(p.op, "recv", c, recv, recvN); err != nil {
			return err
		}
	}
	c.issue.mu.Lock()
	defer c.issue.mu.Unlock()
	sp.seq = c.issue.collectives
	c.issue.collectives++
	return b.submitShared(sp)
}

func (sp *sharedPart) post() error {
	c, w, p := sp.c, sp.c.w, sp.p
	ready, err := c.recordOn(sp.s)
	if err != nil {
		return &ccl.Error{Op: p.op, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d: mark its data ready", describe(p.op, sp.seq, w), c.rank), Err: err}
	}
	sp.ready = ready
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return nil // take and release see the failure
	}
	rd := w.shared[sp.seq]
	if rd == nil {
		rd = &sharedRound{parts: make([]*sharedPart, w.n), ref: p, refRank: c.rank, executed: make(chan struct{}), allTaken: make(chan struct{})}
		w.shared[sp.seq] = rd
	}
	sp.rd = rd
	if err := agree(describe(p.op, sp.seq, w), &round{ref: rd.ref, refRank: rd.refRank}, c.rank, p); err != nil {
		w.failLocked(err)
		w.mu.Unlock()
		return nil
	}
	rd.parts[c.rank] = sp
	rd.arrived++
	last := rd.arrived == w.n
	if last {
		delete(w.shared, sp.seq)
		rd.exec, sp.executor = sp, true
	}
	w.mu.Unlock()
	if !last {
		return nil
	}
	if err := sp.execute(); err != nil {
		w.fail(&ccl.Error{Op: p.op, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d combining the data", describe(p.op, sp.seq, w), c.rank), Err: err})
	}
	close(rd.executed)
	return nil
}

// execute combines every rank's data into the executor's scratch, on its
// stream, and records done.
func (sp *sharedPart) execute() error {
	rd, s, p, w := sp.rd, sp.s, sp.p, sp.c.w
	for _, o := range rd.parts {
		if o != sp {
			if err := s.WaitEvent(o.ready); err != nil {
				return err
			}
		}
	}
	var block int64 // bytes of the combined result
	for _, o := range rd.parts {
		block = max(block, o.send.Size())
	}
	if p.op == ccl.OpAllGather {
		block *= int64(w.n)
	}
	if block == 0 { // count 0: nothing to combine
		done, err := sp.c.recordOn(s)
		rd.done = done
		return err
	}
	reduce := reduces(p.op)
	cross := false
	for _, o := range rd.parts {
		cross = cross || (reduce && o.c.dev != sp.c.dev)
	}
	need := block
	if cross {
		need *= 2 // a staging copy of a send on another device
	}
	scratch, private, err := sp.c.scratch(need, s)
	if err != nil {
		return err
	}
	if private {
		rd.private = scratch
	}
	acc, err := scratch.Slice(0, block)
	if err != nil {
		return err
	}
	rd.acc = acc
	switch p.op {
	case ccl.OpBroadcast:
		if err := runtime.Copy(acc, rd.parts[p.root].send, s); err != nil {
			return err
		}
	case ccl.OpAllGather:
		for r, o := range rd.parts {
			dst, err := acc.Slice(int64(r)*o.send.Size(), o.send.Size())
			if err != nil {
				return err
			}
			if err := runtime.Copy(dst, o.send, s); err != nil {
				return err
			}
		}
	default: // reductions, in rank order
		elems := int(block / 4)
		for r, o := range rd.parts {
			src := o.send
			if r == 0 {
				if err := runtime.Copy(acc, src, s); err != nil {
					return err
				}
				continue
			}
			if src.Device() != sp.c.dev {
				stage, err := scratch.Slice(block, block)
				if err != nil {
					return err
				}
				if err := runtime.Copy(stage, src, s); err != nil {
					return err
				}
				src = stage
			}
			if err := runtime.Axpy(s, 1, src, acc, elems); err != nil {
				return err
			}
		}
		if p.redop == ccl.Avg {
			if err := runtime.Scale(s, 1/float32(w.n), acc, elems); err != nil {
				return err
			}
		}
	}
	done, err := sp.c.recordOn(s)
	if err != nil {
		return err
	}
	rd.done = done
	return nil
}

// result is the part of the combined data that belongs in sp's recv, or
// the zero Buffer when its recv takes nothing.
func (sp *sharedPart) result() (runtime.Buffer, error) {
	if sp.recv.IsZero() {
		return runtime.Buffer{}, nil
	}
	if sp.p.op == ccl.OpReduceScatter {
		n := sp.recv.Size()
		return sp.rd.acc.Slice(int64(sp.c.rank)*n, n)
	}
	return sp.rd.acc.Slice(0, sp.recv.Size())
}

func (sp *sharedPart) take() {
	c, w, rd := sp.c, sp.c.w, sp.rd
	if rd == nil {
		return // the communicator failed before this part joined
	}
	ok := c.wait(rd.executed, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		var missing, present []int
		for r, o := range rd.parts {
			if o == nil {
				missing = append(missing, r)
			} else {
				present = append(present, r)
			}
		}
		return ccl.Errorf(sp.p.op, ccl.StatusTimeout, "%s: ranks %v did not arrive within %v (ranks %v did)", describe(sp.p.op, sp.seq, w), missing, c.timeout, present)
	})
	if !ok || rd.done == nil {
		return
	}
	fail := func(err error) {
		w.fail(&ccl.Error{Op: sp.p.op, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d taking its result", describe(sp.p.op, sp.seq, w), c.rank), Err: err})
	}
	if !sp.executor {
		if err := sp.s.WaitEvent(rd.done); err != nil {
			fail(err)
			return
		}
	}
	res, err := sp.result()
	if err != nil {
		fail(err)
		return
	}
	if !res.IsZero() {
		if err := runtime.Copy(sp.recv, res, sp.s); err != nil {
			fail(err)
			return
		}
		if !sp.executor {
			if sp.pulled, err = c.recordOn(sp.s); err != nil {
				fail(err)
				return
			}
		}
	}
	if sp.executor {
		return
	}
	w.mu.Lock()
	rd.taken++
	if rd.taken == w.n-1 {
		close(rd.allTaken)
	}
	w.mu.Unlock()
}

func (sp *sharedPart) release() {
	rd := sp.rd
	if !sp.executor {
		return
	}
	c, w := sp.c, sp.c.w
	if w.n > 1 && !c.wait(rd.allTaken, func() error {
		return ccl.Errorf(sp.p.op, ccl.StatusTimeout, "%s: not every rank took its result within %v", describe(sp.p.op, sp.seq, w), c.timeout)
	}) {
		return
	}
	// The scratch holds still until every copy out of it is done.
	for _, o := range rd.parts {
		if o.pulled != nil {
			if err := sp.s.WaitEvent(o.pulled); err != nil {
				w.fail(&ccl.Error{Op: sp.p.op, Status: ccl.StatusError, Detail: describe(sp.p.op, sp.seq, w), Err: err})
				return
			}
		}
	}
	// No stream is told to wait for these events any more: they go back
	// to the pools of the endpoints that recorded them.
	c.events.put(sp.s.Impl(), rd.done)
	for _, o := range rd.parts {
		o.c.events.put(o.s.Impl(), o.ready)
		o.c.events.put(o.s.Impl(), o.pulled)
	}
	if err := sp.c.releaseScratch(rd, sp.s); err != nil {
		w.fail(&ccl.Error{Op: sp.p.op, Status: ccl.StatusError, Detail: describe(sp.p.op, sp.seq, w) + ": free scratch", Err: err})
	}
}

// scratch returns the endpoint's scratch buffer, grown to at least n
// bytes, and holds it until releaseScratch; an outgrown one is freed in
// s's order, after the work that used it (every use is ordered on the
// stream that executes, and the copies out of it are waited for there).
// While a round executed earlier (in the same group) still holds it, the
// peers may not have copied their results out yet: scratch then returns
// a new buffer for this round alone, and private true.
func (c *comm) scratch(n int64, s *runtime.Stream) (buf runtime.Buffer, private bool, err error) {
	c.scratchMu.Lock()
	defer c.scratchMu.Unlock()
	if c.scratchHeld || c.scratchRetired {
		buf, err := runtime.MallocAsync(n, s)
		return buf, true, err
	}
	if c.scratchBuf.Size() < n || c.scratchStream != s {
		if !c.scratchBuf.IsZero() {
			if err := c.freeScratchLocked(); err != nil {
				return runtime.Buffer{}, false, err
			}
		}
		buf, err := runtime.MallocAsync(n, s)
		if err != nil {
			return runtime.Buffer{}, false, err
		}
		c.scratchBuf, c.scratchStream = buf, s
	}
	c.scratchHeld = true
	return c.scratchBuf, false, nil
}

// releaseScratch gives back the scratch rd used, once s waits for every
// copy out of it: a round's own buffer is freed in s's order, the
// endpoint's is free for the next round.
func (c *comm) releaseScratch(rd *sharedRound, s *runtime.Stream) error {
	if !rd.private.IsZero() {
		if err := runtime.FreeAsync(rd.private, s); err != nil {
			return runtime.Free(rd.private)
		}
		return nil
	}
	if rd.acc.IsZero() {
		return nil // count 0: no scratch
	}
	c.scratchMu.Lock()
	defer c.scratchMu.Unlock()
	c.scratchHeld = false
	if c.scratchRetired {
		return c.freeScratchLocked() // the communicator is gone
	}
	return nil
}

// freeScratchLocked frees the scratch in its stream's order.
func (c *comm) freeScratchLocked() error {
	if c.scratchBuf.IsZero() {
		return nil
	}
	err := runtime.FreeAsync(c.scratchBuf, c.scratchStream)
	if err != nil {
		// The stream is gone, and with it the work that used the
		// scratch.
		err = runtime.Free(c.scratchBuf)
	}
	c.scratchBuf, c.scratchStream = runtime.Buffer{}, nil
	return err
}

// p2pKey names the k-th message from src to dst.
type p2pKey struct {
	src, dst int
	k        uint64
}

// sharedMsg is one Send and its Recv as they are posted.
type sharedMsg struct {
	send, recv *sharedP2P
	matched    chan struct{}  // closed when both are posted
	copied     chan struct{}  // closed when the receiver has copied (or failed)
	copyEv     *runtime.Event // recorded on the receiver's stream after the copy
}

// sharedP2P is one side of a shared Send or Recv.
type sharedP2P struct {
	c     *comm
	s     *runtime.Stream
	op    string
	peer  int
	buf   runtime.Buffer
	key   p2pKey
	ready *runtime.Event // the sender's, recorded at posting
	msg   *sharedMsg
}

func (op *sharedP2P) world() *world { return op.c.w }

// deviceP2P issues a Send or Recv of a shared backend.
func (b *Backend) deviceP2P(opName string, buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	lc, err := usable(opName, c)
	if err != nil {
		return err
	}
	if err := checkStream(opName, lc, s); err != nil {
		return err
	}
	if count < 0 {
		return ccl.Errorf(opName, ccl.StatusInvalidArgument, "count %d", count)
	}
	es := dtype.Size()
	if es == 0 {
		return ccl.Errorf(opName, ccl.StatusInvalidArgument, "%s", dtype)
	}
	if err := checkBytes(opName, count, es, 1); err != nil {
		return err
	}
	if err := checkPeer(opName, lc, peer); err != nil {
		return err
	}
	if peer == lc.rank && !b.inGroup() {
		// Outside a group the call returns only once its match has been
		// issued, which this rank can do only after it returns.
		return ccl.Errorf(opName, ccl.StatusInvalidArgument, "%s with itself as peer (%s): a shared backend matches it only inside a group (GroupStart/GroupEnd) holding both the Send and the Recv", opName, lc)
	}
	view, err := checkBuffer(opName, "", lc, buf, int64(count)*int64(es))
	if err != nil {
		return err
	}
	op := &sharedP2P{c: lc, s: s, op: opName, peer: peer, buf: view}
	lc.issue.mu.Lock()
	defer lc.issue.mu.Unlock()
	if opName == ccl.OpSend {
		op.key = p2pKey{src: lc.rank, dst: peer, k: lc.issue.sent[peer]}
		lc.issue.sent[peer]++
	} else {
		op.key = p2pKey{src: peer, dst: lc.rank, k: lc.issue.received[peer]}
		lc.issue.received[peer]++
	}
	return b.submitShared(op)
}

func (op *sharedP2P) post() error {
	w := op.c.w
	if op.op == ccl.OpSend && !op.buf.IsZero() {
		ready, err := op.c.recordOn(op.s)
		if err != nil {
			return &ccl.Error{Op: op.op, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d: mark its data ready", w.name, op.c.rank), Err: err}
		}
		op.ready = ready
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		// Failed: nothing is matched any more. take and release see the
		// failure; the message is not kept for a peer.
		op.msg = &sharedMsg{matched: make(chan struct{}), copied: make(chan struct{})}
		return nil
	}
	m := w.msgs[op.key]
	if m == nil {
		m = &sharedMsg{matched: make(chan struct{}), copied: make(chan struct{})}
		w.msgs[op.key] = m
	}
	op.msg = m
	if op.op == ccl.OpSend {
		m.send = op
	} else {
		m.recv = op
	}
	if m.send != nil && m.recv != nil {
		delete(w.msgs, op.key)
		close(m.matched)
	}
	return nil
}

func (op *sharedP2P) take() {
	if op.op != ccl.OpRecv {
		return
	}
	c, w, m, k := op.c, op.c.w, op.msg, op.key
	defer close(m.copied)
	if !c.wait(m.matched, func() error {
		return ccl.Errorf(ccl.OpRecv, ccl.StatusTimeout, "%s: rank %d received nothing from rank %d within %v (waiting for message #%d of the pair)", w.name, c.rank, op.peer, c.timeout, k.k)
	}) {
		return
	}
	src := m.send
	if src.buf.Size() != op.buf.Size() {
		w.fail(ccl.Errorf(ccl.OpRecv, ccl.StatusInvalidArgument, "%s: rank %d received %d bytes from rank %d but expected %d (Send and Recv sizes differ; message #%d of the pair)", w.name, c.rank, src.buf.Size(), op.peer, op.buf.Size(), k.k))
		return
	}
	if op.buf.IsZero() {
		return
	}
	fail := func(err error) {
		w.fail(&ccl.Error{Op: ccl.OpRecv, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d copying message #%d from rank %d", w.name, c.rank, k.k, op.peer), Err: err})
	}
	if err := op.s.WaitEvent(src.ready); err != nil {
		fail(err)
		return
	}
	if err := runtime.Copy(op.buf, src.buf, op.s); err != nil {
		fail(err)
		return
	}
	ev, err := c.recordOn(op.s)
	if err != nil {
		fail(err)
		return
	}
	m.copyEv = ev
}

func (op *sharedP2P) release() {
	if op.op != ccl.OpSend {
		return
	}
	c, w, m := op.c, op.c.w, op.msg
	ok := c.wait(m.copied, func() error {
		return ccl.Errorf(ccl.OpSend, ccl.StatusTimeout, "%s: rank %d's message #%d to rank %d was not received within %v", w.name, c.rank, op.key.k, op.peer, c.timeout)
	})
	if ok && m.copyEv != nil {
		if err := op.s.WaitEvent(m.copyEv); err != nil {
			w.fail(&ccl.Error{Op: ccl.OpSend, Status: ccl.StatusError, Detail: fmt.Sprintf("%s: rank %d", w.name, c.rank), Err: err})
		}
	}
	if ok {
		c.events.put(op.s.Impl(), op.ready)
		if m.copyEv != nil {
			m.recv.c.events.put(m.recv.s.Impl(), m.copyEv)
		}
	}
}
