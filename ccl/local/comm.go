package local

import (
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// world is what the ranks of one communicator share: the collectives in
// progress, the mailboxes, and the communicator's failure.
type world struct {
	name string // "comm 1a2b3c4d", for messages
	n    int

	mu     sync.Mutex
	rounds map[uint64]*round // collectives some rank has reached, by number

	boxesMu sync.Mutex
	boxes   map[[2]int]*mailbox // by (src, dst), made at first use
	err     error               // the first failure; broken is closed when set
	broken  chan struct{}

	// A shared backend's collectives and messages being posted.
	shared map[uint64]*sharedRound
	msgs   map[p2pKey]*sharedMsg
}

func newWorld(id []byte, n int) *world {
	return &world{
		name:   "comm " + hex.EncodeToString(id[:4]),
		n:      n,
		rounds: make(map[uint64]*round),
		boxes:  make(map[[2]int]*mailbox),
		broken: make(chan struct{}),
		shared: make(map[uint64]*sharedRound),
		msgs:   make(map[p2pKey]*sharedMsg),
	}
}

// failure returns the communicator's failure, or nil.
func (w *world) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// failLocked records err as the communicator's failure unless one is
// recorded already; the first failure stands. A failed communicator runs
// nothing more, so it lets go of what its pending operations held: the
// rounds some ranks never reached and the messages never received (each
// a copy of its payload). The operations still waiting hold what they
// use themselves; broken wakes them.
func (w *world) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	close(w.broken)
	clear(w.rounds)
	clear(w.shared)
	clear(w.msgs)
	w.boxesMu.Lock()
	defer w.boxesMu.Unlock()
	for _, m := range w.boxes {
		m.drop()
	}
}

func (w *world) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(err)
}

// comm is one rank's endpoint.
type comm struct {
	w         *world
	rank      int
	dev       runtime.Device
	timeout   time.Duration
	issue     issuer
	destroyed atomic.Bool

	// A shared backend's scratch for the collectives this rank executes,
	// used in scratchStream's order.
	scratchMu     sync.Mutex
	scratchBuf    runtime.Buffer
	scratchStream *runtime.Stream
	scratchHeld   bool // a round's result is in scratchBuf until its release
	// scratchRetired: CommDestroy or CommAbort came. One that came while
	// a round held the scratch left it to the round, which frees it when
	// it lets go; a round that fails never lets go (a peer may still be
	// copying out of it), and its scratch is left allocated rather than
	// freed under that copy.
	scratchRetired bool

	// events: a shared backend's untimed events, kept for reuse.
	events eventPool
}

func newComm(w *world, rank int, dev runtime.Device, timeout time.Duration) *comm {
	c := &comm{w: w, rank: rank, dev: dev, timeout: timeout}
	c.issue.sent = make(map[int]uint64)
	c.issue.received = make(map[int]uint64)
	return c
}

func (c *comm) Rank() int              { return c.rank }
func (c *comm) Size() int              { return c.w.n }
func (c *comm) Device() runtime.Device { return c.dev }

// String describes the endpoint, e.g. "comm 1a2b3c4d rank 1 of 4 on cpu:1".
func (c *comm) String() string {
	return fmt.Sprintf("%s rank %d of %d on %s", c.w.name, c.rank, c.w.n, c.dev)
}

func asComm(op string, c ccl.Comm) (*comm, error) {
	lc, ok := c.(*comm)
	if !ok || lc == nil {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%T is not a communicator of the local backend", c)
	}
	return lc, nil
}

// usable resolves c for a new operation: a live communicator that has not
// failed.
func usable(op string, c ccl.Comm) (*comm, error) {
	lc, err := asComm(op, c)
	if err != nil {
		return nil, err
	}
	if lc.destroyed.Load() {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s used after CommDestroy or CommAbort", lc)
	}
	if err := lc.w.failure(); err != nil {
		return nil, &ccl.Error{Op: op, Status: ccl.StatusOf(err), Detail: lc.w.name + " has failed", Err: err}
	}
	return lc, nil
}

// CommDestroy retires the communicator: later operations on it are errors;
// operations already enqueued run to their end.
func (b *Backend) CommDestroy(c ccl.Comm) error {
	lc, err := asComm("CommDestroy", c)
	if err != nil {
		return err
	}
	if lc.destroyed.Swap(true) {
		return ccl.Errorf("CommDestroy", ccl.StatusInvalidArgument, "%s destroyed twice", lc)
	}
	return lc.freeScratch()
}

// freeScratch frees a shared backend's scratch, after the work enqueued
// on its stream, or, while a round holds it, leaves it to that round: the
// round's executor may still be enqueueing writes into it, and its peers
// copies out of it (CommAbort comes from another goroutine).
func (c *comm) freeScratch() error {
	c.scratchMu.Lock()
	defer c.scratchMu.Unlock()
	c.scratchRetired = true // a round after this one gets scratch of its own
	c.events.retire()
	if c.scratchHeld {
		return nil
	}
	if err := c.freeScratchLocked(); err != nil {
		return &ccl.Error{Op: "CommDestroy", Status: ccl.StatusError, Detail: c.String() + ": free scratch", Err: err}
	}
	return nil
}

// CommAbort retires the communicator and fails it for every rank: pending
// and later operations on any rank fail at once.
func (b *Backend) CommAbort(c ccl.Comm) error {
	lc, err := asComm("CommAbort", c)
	if err != nil {
		return err
	}
	lc.destroyed.Store(true)
	_ = lc.freeScratch()
	lc.w.fail(ccl.Errorf("CommAbort", ccl.StatusError, "%s: rank %d aborted the communicator", lc.w.name, lc.rank))
	return nil
}

// checkStream checks that s is a live stream of c's device: a call on a
// stream that cannot take work is refused before it is numbered, so the
// ranks' numbering still agrees.
func checkStream(op string, c *comm, s *runtime.Stream) error {
	if s == nil {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "nil stream")
	}
	if err := s.Err(); err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusInvalidArgument, Detail: "stream", Err: err}
	}
	if s.Device() != c.dev {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "stream on %s, %s", s.Device(), c)
	}
	return nil
}

// bytesOf returns the first n bytes of buf, which must be cpu memory of c's
// device. With n 0 the buffer may be the zero Buffer.
func bytesOf(op, what string, c *comm, buf runtime.Buffer, n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if buf.IsZero() {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "zero %s buffer", what)
	}
	if buf.Device() != c.dev {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer on %s, %s", what, buf.Device(), c)
	}
	if buf.Size() < n {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%s buffer holds %d bytes, the call needs %d", what, buf.Size(), n)
	}
	b, err := cpu.Bytes(buf)
	if err != nil {
		return nil, &ccl.Error{Op: op, Status: ccl.StatusInvalidArgument, Detail: what + " buffer", Err: err}
	}
	return b[:n:n], nil
}

// waitTimer returns a timer for one wait of c's and a function that stops
// it.
func (c *comm) waitTimer() (<-chan time.Time, func() bool) {
	t := time.NewTimer(c.timeout)
	return t.C, t.Stop
}
