package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
)

// checkDevice checks that dev is a device of the backend's type in the
// registered runtime.
func (b *Backend) checkDevice(op string, dev runtime.Device) error {
	if dev.Type != b.typ {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "device %s: this local backend runs on %s devices", dev, b.typ)
	}
	rt, err := runtime.Lookup(b.typ)
	if err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusUnavailable, Err: err}
	}
	n, err := rt.DeviceCount()
	if err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusUnavailable, Err: err}
	}
	if dev.Index < 0 || dev.Index >= n {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "invalid device %s: %d %s devices", dev, n, b.typ)
	}
	return nil
}

// CommInitAll creates one communicator per device; rank i is devices[i].
func (b *Backend) CommInitAll(devices []runtime.Device) ([]ccl.Comm, error) {
	const op = "CommInitAll"
	if len(devices) == 0 {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "no devices")
	}
	if err := checkRanks(op, len(devices)); err != nil {
		return nil, err
	}
	seen := make(map[runtime.Device]bool, len(devices))
	for _, d := range devices {
		if err := b.checkDevice(op, d); err != nil {
			return nil, err
		}
		if seen[d] && !b.shared {
			return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "device %s listed twice", d)
		}
		seen[d] = true
	}
	var id [idSize]byte
	_, _ = rand.Read(id[:])
	w := newWorld(id[:], len(devices))
	out := make([]ccl.Comm, len(devices))
	for i, d := range devices {
		out[i] = newComm(w, i, d, b.cfg.timeout)
	}
	return out, nil
}

// joining is a communicator whose ranks are gathering in CommInitRank.
type joining struct {
	n      int
	ranks  []*comm // by rank; nil until that rank joins
	joined int
	err    error         // set, before done is closed, when it timed out
	done   chan struct{} // closed when every rank has joined or it timed out
}

// rendezvous is the process-wide table of communicators being formed,
// keyed by their unique id's bytes.
var rendezvous = struct {
	mu sync.Mutex
	m  map[string]*joining
}{m: make(map[string]*joining)}

// CommInitRank creates rank's endpoint of an nranks communicator named by
// id. It returns once every rank has called it with the same id, or fails
// with an error wrapping StatusTimeout naming the ranks that did not join
// within the backend's timeout.
func (b *Backend) CommInitRank(nranks int, id ccl.UniqueID, rank int, dev runtime.Device) (ccl.Comm, error) {
	return b.CommInitRankContext(context.Background(), nranks, id, rank, dev)
}

// CommInitRankContext is CommInitRank bounded by ctx as well as by the
// backend's timeout, whichever ends first (ccl.ContextCommIniter). When
// ctx ends first the communicator fails for every rank waiting, with an
// error naming the ranks that did not join and wrapping ctx.Err():
// StatusTimeout for a deadline, StatusError for a cancellation.
func (b *Backend) CommInitRankContext(ctx context.Context, nranks int, id ccl.UniqueID, rank int, dev runtime.Device) (ccl.Comm, error) {
	const op = "CommInitRank"
	if ctx == nil {
		ctx = context.Background()
	}
	if id == nil || id.Size() != idSize || len(id.Data()) != idSize {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "unique id must be %d bytes (from GetUniqueID)", idSize)
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "rank %d of %d", rank, nranks)
	}
	if err := checkRanks(op, nranks); err != nil {
		return nil, err
	}
	if err := b.checkDevice(op, dev); err != nil {
		return nil, err
	}
	key := string(id.Data())
	c := newComm(nil, rank, dev, b.cfg.timeout)

	rendezvous.mu.Lock()
	j := rendezvous.m[key]
	if j == nil {
		j = &joining{n: nranks, ranks: make([]*comm, nranks), done: make(chan struct{})}
		rendezvous.m[key] = j
	}
	switch {
	case j.n != nranks:
		rendezvous.mu.Unlock()
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "rank %d asked for %d ranks, but the communicator being formed with id %x has %d", rank, nranks, key[:4], j.n)
	case j.ranks[rank] != nil:
		rendezvous.mu.Unlock()
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "rank %d of the communicator with id %x joined twice", rank, key[:4])
	}
	j.ranks[rank] = c
	j.joined++
	if j.joined == j.n {
		w := newWorld([]byte(key), j.n)
		for _, rc := range j.ranks {
			rc.w = w
		}
		delete(rendezvous.m, key)
		close(j.done)
		rendezvous.mu.Unlock()
		return c, nil
	}
	rendezvous.mu.Unlock()

	// The first rank to give up fails the communicator for all the ranks
	// waiting, with one message; a latecomer starts anew.
	giveUp := func(fail func(missing, present []int) error) {
		rendezvous.mu.Lock()
		defer rendezvous.mu.Unlock()
		select {
		case <-j.done: // completed, or failed, meanwhile
			return
		default:
		}
		var missing, present []int
		for r, rc := range j.ranks {
			if rc == nil {
				missing = append(missing, r)
			} else {
				present = append(present, r)
			}
		}
		j.err = fail(missing, present)
		if rendezvous.m[key] == j {
			delete(rendezvous.m, key)
		}
		close(j.done)
	}
	t := time.NewTimer(b.cfg.timeout)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
		giveUp(func(missing, present []int) error {
			return ccl.Errorf(op, ccl.StatusTimeout, "communicator of %d ranks (id %x): ranks %v did not join within %v (ranks %v did)", nranks, key[:4], missing, b.cfg.timeout, present)
		})
	case <-ctx.Done():
		giveUp(func(missing, present []int) error {
			st := ccl.StatusError
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				st = ccl.StatusTimeout
			}
			return &ccl.Error{Op: op, Status: st, Detail: fmt.Sprintf("communicator of %d ranks (id %x): ranks %v had not joined when rank %d's context ended (ranks %v had)", nranks, key[:4], missing, rank, present), Err: ctx.Err()}
		})
	}
	if j.err != nil {
		return nil, j.err
	}
	return c, nil
}

// describe names an operation for messages: "AllReduce #3 on comm 1a2b3c4d".
func describe(op string, seq uint64, w *world) string {
	return fmt.Sprintf("%s #%d on %s", op, seq, w.name)
}
