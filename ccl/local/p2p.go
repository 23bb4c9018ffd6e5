package local

import (
	"sync"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// mailbox holds the messages sent from one rank to another, by number:
// the k-th Send from src to dst is matched with dst's k-th Recv from src.
type mailbox struct {
	mu     sync.Mutex
	msgs   map[uint64][]byte
	notify chan struct{} // closed and replaced on every delivery
}

// box returns the mailbox from src to dst, made at its first use: a
// communicator holds only the mailboxes of the pairs that talk (a pipeline
// uses O(ranks) of the ranks² pairs).
func (w *world) box(src, dst int) *mailbox {
	k := [2]int{src, dst}
	w.boxesMu.Lock()
	defer w.boxesMu.Unlock()
	m := w.boxes[k]
	if m == nil {
		m = &mailbox{msgs: make(map[uint64][]byte), notify: make(chan struct{})}
		w.boxes[k] = m
	}
	return m
}

// put delivers message k, unless the communicator has failed (broken is
// closed): nothing will receive it then. The check is under the mailbox's
// lock, which drop takes after broken is closed, so a message is either
// dropped there or never stored.
func (m *mailbox) put(k uint64, msg []byte, broken <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-broken:
		return
	default:
	}
	m.msgs[k] = msg
	close(m.notify)
	m.notify = make(chan struct{})
}

// drop discards the messages not yet received.
func (m *mailbox) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.msgs)
}

// take removes message k, or returns a channel closed at the next
// delivery when it is not there yet.
func (m *mailbox) take(k uint64) ([]byte, bool, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, ok := m.msgs[k]
	if !ok {
		return nil, false, m.notify
	}
	delete(m.msgs, k)
	return msg, true, nil
}

// Send sends count elements of buf to rank peer. It is eager: when s
// reaches it, the bytes are copied into the pair's mailbox and the send is
// complete, whether or not peer has reached its Recv.
func (b *Backend) Send(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	if b.shared {
		return b.deviceP2P(ccl.OpSend, buf, count, dtype, peer, c, s)
	}
	lc, data, err := prepareP2P(ccl.OpSend, buf, count, dtype, peer, c, s)
	if err != nil {
		return err
	}
	lc.issue.mu.Lock()
	defer lc.issue.mu.Unlock()
	k := lc.issue.sent[peer]
	if err := b.submit(lc, s, func() { lc.send(data, peer, k) }); err != nil {
		return err
	}
	lc.issue.sent[peer]++
	return nil
}

// Recv receives count elements from rank peer into buf: when s reaches
// it, it waits for the message of peer's matching Send (the k-th Recv from
// peer matches peer's k-th Send to this rank). A message of another size
// fails the communicator.
func (b *Backend) Recv(buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) error {
	if b.shared {
		return b.deviceP2P(ccl.OpRecv, buf, count, dtype, peer, c, s)
	}
	lc, data, err := prepareP2P(ccl.OpRecv, buf, count, dtype, peer, c, s)
	if err != nil {
		return err
	}
	lc.issue.mu.Lock()
	defer lc.issue.mu.Unlock()
	k := lc.issue.received[peer]
	if err := b.submit(lc, s, func() { lc.recv(data, peer, k) }); err != nil {
		return err
	}
	lc.issue.received[peer]++
	return nil
}

// checkPeer checks that peer is a rank of c's communicator. It may be
// c's own rank: as in NCCL, a rank sends to and receives from itself (the
// recipes for AllToAll, Gather and Scatter do).
func checkPeer(op string, c *comm, peer int) error {
	if peer < 0 || peer >= c.w.n {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "peer %d: %s needs a rank in [0, %d)", peer, c, c.w.n)
	}
	return nil
}

func prepareP2P(op string, buf runtime.Buffer, count int, dtype runtime.DataType, peer int, c ccl.Comm, s *runtime.Stream) (*comm, []byte, error) {
	lc, err := usable(op, c)
	if err != nil {
		return nil, nil, err
	}
	if err := checkStream(op, lc, s); err != nil {
		return nil, nil, err
	}
	if count < 0 {
		return nil, nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "count %d", count)
	}
	es := dtype.Size()
	if es == 0 {
		return nil, nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s", dtype)
	}
	if err := checkBytes(op, count, es, 1); err != nil {
		return nil, nil, err
	}
	if err := checkPeer(op, lc, peer); err != nil {
		return nil, nil, err
	}
	data, err := bytesOf(op, "", lc, buf, int64(count)*int64(es))
	return lc, data, err
}

// send runs on the sender's stream.
func (c *comm) send(data []byte, peer int, k uint64) {
	if c.w.failure() != nil {
		return
	}
	c.w.box(c.rank, peer).put(k, append(make([]byte, 0, len(data)), data...), c.w.broken)
}

// recv runs on the receiver's stream.
func (c *comm) recv(data []byte, peer int, k uint64) {
	w := c.w
	box := w.box(peer, c.rank)
	timer, stop := c.waitTimer()
	defer stop()
	for {
		if w.failure() != nil {
			return
		}
		msg, ok, next := box.take(k)
		if ok {
			if len(msg) != len(data) {
				w.fail(ccl.Errorf(ccl.OpRecv, ccl.StatusInvalidArgument, "%s: rank %d received %d bytes from rank %d but expected %d (Send and Recv sizes differ; message #%d of the pair)", w.name, c.rank, len(msg), peer, len(data), k))
				return
			}
			copy(data, msg)
			return
		}
		select {
		case <-next:
		case <-w.broken:
			return
		case <-timer:
			w.fail(ccl.Errorf(ccl.OpRecv, ccl.StatusTimeout, "%s: rank %d received nothing from rank %d within %v (waiting for message #%d of the pair)", w.name, c.rank, peer, c.timeout, k))
			return
		}
	}
}
