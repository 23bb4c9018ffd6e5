package ccl

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/ccl/internal/goid"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// ProcessGroup is a named communicator bound to a backend device type. It
// holds one or more local ranks, one per
// device: several when this process drives several devices (CommInitAll,
// a goroutine per device), one in a multi-process group (CommInitRank).
//
// Every operation is addressed to the local rank whose device holds the
// buffer passed in. It is ordered after the work already enqueued on the
// caller's stream s (runtime.Stream.WaitStream: an event recorded there,
// or the one another caller recorded last where it still marks the
// stream's point) — inside a group, after the work enqueued on s by the
// outermost GroupEnd, when the group's kernels are enqueued, as with
// NCCL — runs on that rank's own communication stream, and returns a
// Work. Counts are derived from buffer sizes. With a profiler.Recorder in
// ctx, each operation is a collective range on the communication stream.
//
// One goroutine should drive each local rank; operations on one rank are
// numbered in the order they are issued, and collectives must be issued in
// the same order on every rank.
type ProcessGroup struct {
	name    string
	backend runtime.DeviceType
	impl    Impl
	rt      runtime.Impl
	size    int
	ranks   []*localRank // in rank order
	release func()       // forgets the group in its factory

	// Open GroupStart regions, shared with every group and factory on
	// the backend: one backend's group, whichever of them opened it.
	gt groupTable

	destroyed   atomic.Bool
	destroyOnce sync.Once
	destroyErr  error
}

// groupTable is a backend's open GroupStart regions, per goroutine as the
// backends scope them (NCCL per thread), with the Works each holds back
// until its GroupEnd. The backend groups a goroutine's operations on all
// its communicators, so every process group and factory over one backend
// shares its regions: an operation of one group issued inside another's
// GroupStart region (or a factory's, any factory's) is held back and
// launched by that region's GroupEnd, as the backend launches it.
//
// A groupTable value names the backend; the regions themselves are kept
// in openGroups, and only while they are open.
type groupTable struct {
	backend any // the Impl; the factory when the Impl's type is not comparable
}

// openGroups is every goroutine's open GroupStart regions, by backend,
// in shards by goroutine: ranks on their own goroutines, each opening a
// group every round, take locks of their own.
var openGroups struct {
	n      atomic.Int64 // regions open, read without a lock
	shards [groupShards]groupShard
}

const groupShards = 64

type groupShard struct {
	mu   sync.Mutex
	open map[groupKey]*openGroup // made on first use
	_    [40]byte                // a cache line each
}

// shard is the shard holding goroutine k.g's regions.
func (k groupKey) shard() *groupShard { return &openGroups.shards[k.g%groupShards] }

// groupKey is one goroutine's region on one backend.
type groupKey struct {
	backend any
	g       uint64 // goid.Get
}

// newGroupTable returns the table of impl's regions; f stands for the
// backend when impl's type cannot be a map key.
func newGroupTable(impl Impl, f *ProcessGroupFactory) groupTable {
	if impl == nil || !reflect.ValueOf(impl).Comparable() {
		return groupTable{backend: f}
	}
	return groupTable{backend: impl}
}

func (gt groupTable) key() groupKey { return groupKey{backend: gt.backend, g: goid.Get()} }

// openGroup is one goroutine's open group.
type openGroup struct {
	depth   int
	pending []*Work
}

// localRank is one device's endpoint of the group.
type localRank struct {
	dev    runtime.Device
	rank   int
	comm   Comm
	stream *runtime.Stream

	mu  sync.Mutex // makes issue order and Seq agree
	seq uint64     // operations issued (Work's number)
	// The profiler's Seq, which matches a call across ranks: collectives
	// are numbered in the group, as every rank issues them; a Send by
	// peer it goes to and a Recv by peer it comes from (sent[p],
	// received[p]), as the k-th Send from a to b matches b's k-th Recv
	// from a. Made at the first Send or Recv.
	collectives    uint64
	sent, received []uint64
	events         completionRing // the rank's reusable events (events.go)

	// commMu guards the communicator's life against asyncError's query:
	// Destroy holds it only to take finalErr and destroy the
	// communicator, not while it waits for the rank's work (mu), and
	// asyncError never waits for it, so a Work's Wait, Done and Err keep
	// their own deadlines meanwhile.
	commMu   sync.RWMutex
	final    bool  // the communicator is gone: finalErr is its last word
	finalErr error // the comm's async error when the group was destroyed
}

// newProcessGroup wraps created communicators and makes a communication
// stream per local device. On error the streams are gone and the caller
// still owns comms.
func newProcessGroup(name string, impl Impl, rt runtime.Impl, size int, comms []Comm, gt groupTable) (*ProcessGroup, error) {
	pg := &ProcessGroup{name: name, backend: impl.Type(), impl: impl, rt: rt, size: size, gt: gt}
	for _, c := range comms {
		if c == nil {
			pg.destroyStreams()
			return nil, Errorf("NewProcessGroup", StatusInternal, "group %q: backend returned a nil communicator", name)
		}
		if c.Rank() < 0 || c.Rank() >= size || c.Size() != size {
			pg.destroyStreams()
			return nil, Errorf("NewProcessGroup", StatusInternal, "group %q: backend returned rank %d of %d, want a rank of %d", name, c.Rank(), c.Size(), size)
		}
		s, err := runtime.NewStreamWith(rt, c.Device())
		if err != nil {
			pg.destroyStreams()
			return nil, fmt.Errorf("ccl: group %q: communication stream for %s: %w", name, c.Device(), err)
		}
		pg.ranks = append(pg.ranks, &localRank{dev: c.Device(), rank: c.Rank(), comm: c, stream: s})
	}
	slices.SortFunc(pg.ranks, func(a, b *localRank) int { return a.rank - b.rank })
	return pg, nil
}

func (pg *ProcessGroup) destroyStreams() {
	for _, r := range pg.ranks {
		_ = r.stream.Destroy()
	}
}

// Name returns the group's name ("" for a nil group).
func (pg *ProcessGroup) Name() string {
	if pg == nil {
		return ""
	}
	return pg.name
}

// Backend returns the device type whose backends the group uses (-1,
// no device type, for a nil group).
func (pg *ProcessGroup) Backend() runtime.DeviceType {
	if pg == nil {
		return -1
	}
	return pg.backend
}

// Size returns the number of ranks in the group, local or not (0 for a
// nil group).
func (pg *ProcessGroup) Size() int {
	if pg == nil {
		return 0
	}
	return pg.size
}

// Devices returns the local devices, in rank order.
func (pg *ProcessGroup) Devices() []runtime.Device {
	if pg == nil {
		return nil
	}
	out := make([]runtime.Device, len(pg.ranks))
	for i, r := range pg.ranks {
		out[i] = r.dev
	}
	return out
}

func (pg *ProcessGroup) local(op string, dev runtime.Device) (*localRank, error) {
	if pg == nil {
		return nil, errNilGroup(op)
	}
	for _, r := range pg.ranks {
		if r.dev == dev {
			return r, nil
		}
	}
	return nil, Errorf(op, StatusInvalidArgument, "device %s is not a local device of group %q (local devices: %v)", dev, pg.name, pg.Devices())
}

// RankOf returns the group rank of local device dev.
func (pg *ProcessGroup) RankOf(dev runtime.Device) (int, error) {
	r, err := pg.local("RankOf", dev)
	if err != nil {
		return -1, err
	}
	return r.rank, nil
}

// Comm returns the communicator of local device dev.
func (pg *ProcessGroup) Comm(dev runtime.Device) (Comm, error) {
	r, err := pg.local("Comm", dev)
	if err != nil {
		return nil, err
	}
	return r.comm, nil
}

// Stream returns the communication stream of local device dev, or nil
// when dev is not a local device of the group.
func (pg *ProcessGroup) Stream(dev runtime.Device) *runtime.Stream {
	r, err := pg.local("Stream", dev)
	if err != nil {
		return nil
	}
	return r.stream
}

// GroupStart opens a group of operations on the backend (see Impl) for
// the calling goroutine, as NCCL opens one for the calling thread. The
// Works of operations the goroutine issues inside its group — on this
// process group or any other on the same backend, whichever factory made
// it — complete only after its
// outermost GroupEnd; waiting on one before then times out.
func (pg *ProcessGroup) GroupStart() error {
	if pg == nil {
		return errNilGroup("GroupStart")
	}
	return pg.gt.start(pg.impl)
}

// GroupEnd closes the calling goroutine's innermost group; at the
// outermost level it orders the operations issued inside after the work on
// their callers' streams (once per stream), launches them and marks their
// completion points. Where that ordering fails, the group's operations
// fail with the error it returns.
func (pg *ProcessGroup) GroupEnd() error {
	if pg == nil {
		return errNilGroup("GroupEnd")
	}
	return pg.gt.end(pg.impl, &pg.name)
}

func (gt groupTable) start(impl Impl) error {
	id := gt.key()
	// The backend is called without gt.mu: its group calls may wait for
	// peers (NCCL's GroupEnd does), and the peers may be local ranks of
	// this very group, on other goroutines.
	if err := impl.GroupStart(); err != nil {
		return err
	}
	sh := id.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	g := sh.open[id]
	if g == nil {
		if sh.open == nil {
			sh.open = make(map[groupKey]*openGroup)
		}
		g = &openGroup{}
		sh.open[id] = g
		openGroups.n.Add(1)
	}
	g.depth++
	return nil
}

// end closes the calling goroutine's innermost group of the table; group
// names the process group called, nil for the factory (for the error
// only: nothing is formatted on the way).
func (gt groupTable) end(impl Impl, group *string) error {
	id := gt.key()
	sh := id.shard()
	sh.mu.Lock()
	g := sh.open[id]
	if g == nil {
		sh.mu.Unlock()
		who := "factory"
		if group != nil {
			who = "group " + strconv.Quote(*group)
		}
		return Errorf("GroupEnd", StatusInvalidArgument, "%s: GroupEnd without GroupStart on this goroutine", who)
	}
	g.depth--
	outermost := g.depth == 0
	var flush []*Work
	if outermost {
		flush = g.pending
		delete(sh.open, id)
		openGroups.n.Add(-1)
	}
	sh.mu.Unlock()
	if !outermost {
		return impl.GroupEnd()
	}
	err := launchTimed(flush, impl.GroupEnd)
	for _, w := range flush {
		if err != nil {
			w.fail(err) // never launched: nothing would complete it
		} else {
			w.record()
		}
	}
	return err
}

// launchTimed runs the launch of a fused group inside the profiler ranges
// of its calls: every recorder that issued calls in the group times them
// around the launch (Recorder.Grouped), since that is when the group's
// kernels are enqueued.
func launchTimed(works []*Work, groupEnd func() error) error {
	// The communication streams wait for their callers' streams first,
	// outside the ranges, as an operation issued outside a group does
	// before its range starts.
	if err := followAll(works); err != nil {
		// The backend's group is open: close it, and fail the calls,
		// whose kernels would not follow the work they were issued
		// after.
		return errors.Join(err, groupEnd())
	}
	// The backend launches on the streams' handles (NCCL), which the
	// runtime does not see: mark them, inside the ranges, so that their
	// ends are new events after the launch and not their starts again.
	launch := func() error {
		err := groupEnd()
		for _, w := range works {
			w.r.stream.MarkEnqueued()
		}
		return err
	}
	var order []*profiler.Recorder
	calls := map[*profiler.Recorder][]profiler.GroupedCollective{}
	for _, w := range works {
		if w.rec == nil {
			continue
		}
		if _, seen := calls[w.rec]; !seen {
			order = append(order, w.rec)
		}
		calls[w.rec] = append(calls[w.rec], w.call)
	}
	for _, rec := range order {
		inner, rec, cs := launch, rec, calls[rec]
		launch = func() error { return rec.Grouped(cs, inner) }
	}
	return launch()
}

// followAll makes each communication stream of works wait for the
// streams their calls were issued from, once per pair of streams.
func followAll(works []*Work) error {
	type pair struct {
		r     *localRank
		after *runtime.Stream
	}
	var done []pair // a group holds a few calls: a map costs more
next:
	for _, w := range works {
		if w.after == nil || w.pg.destroyed.Load() {
			continue // a destroyed group's comm fails the launch
		}
		p := pair{w.r, w.after}
		for _, d := range done {
			if d.r.stream == p.r.stream && d.after == p.after {
				continue next
			}
		}
		done = append(done, p)
		w.r.mu.Lock()
		err := w.pg.follow(w.r, w.after)
		w.r.mu.Unlock()
		if err != nil {
			return fmt.Errorf("ccl: %s: group %q rank %d: order after the caller's stream: %w", w.op, w.pg.name, w.r.rank, err)
		}
	}
	return nil
}

// groupOpen reports whether the calling goroutine has a group open.
func (pg *ProcessGroup) groupOpen() bool {
	if openGroups.n.Load() == 0 {
		return false
	}
	id := pg.gt.key()
	sh := id.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.open[id] != nil
}

// hold keeps w back when the calling goroutine has a group open; it
// reports whether it did.
func (pg *ProcessGroup) hold(w *Work) bool {
	if openGroups.n.Load() == 0 {
		return false
	}
	id := pg.gt.key()
	sh := id.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	g := sh.open[id]
	if g == nil {
		return false
	}
	g.pending = append(g.pending, w)
	return true
}

// drop fails and forgets pg's Works held in open groups, once pg is
// destroyed.
func (gt groupTable) drop(pg *ProcessGroup) {
	var dropped []*Work
	for i := range openGroups.shards {
		sh := &openGroups.shards[i]
		sh.mu.Lock()
		for k, g := range sh.open {
			if k.backend != gt.backend {
				continue
			}
			kept := g.pending[:0]
			for _, w := range g.pending {
				if w.pg == pg {
					dropped = append(dropped, w)
				} else {
					kept = append(kept, w)
				}
			}
			clear(g.pending[len(kept):])
			g.pending = kept
		}
		sh.mu.Unlock()
	}
	for _, w := range dropped {
		w.abandon(Errorf(w.op, StatusInvalidArgument, "group %q rank %d: operation #%d was held in a group that had not ended when the process group was destroyed (Destroy)", pg.name, w.r.rank, w.seq))
	}
}

// Group runs fn between GroupStart and GroupEnd; GroupEnd is called even
// when fn fails, and the errors are joined.
func (pg *ProcessGroup) Group(fn func() error) error {
	if pg == nil {
		return errNilGroup("Group")
	}
	return group(pg, fn)
}

// errNilGroup is the error of a call on a nil *ProcessGroup: the group a
// failed GetOrCreate returned.
func errNilGroup(op string) error {
	return Errorf(op, StatusInvalidArgument, "nil *ProcessGroup (was the error of the call that returned it checked?)")
}

// DestroyTimeout bounds how long Destroy waits for a rank's pending work
// before it aborts the rank's communicator.
const DestroyTimeout = 60 * time.Second

// destroyTimeout is DestroyTimeout; tests shorten it.
var destroyTimeout = DestroyTimeout

// abortDrain is how long Destroy gives a rank's communication stream to
// drain after an abort before it leaves the stream undestroyed.
const abortDrain = 100 * time.Millisecond

// Destroy removes the group from its factory, waits for the work on the
// communication streams (at most DestroyTimeout per rank, then it aborts,
// and the Works of that rank fail), and destroys the communicators and the
// streams. Works still held in a group that has not ended fail. Later
// calls return the first call's result; operations issued after Destroy
// fail.
func (pg *ProcessGroup) Destroy() error { return pg.DestroyContext(context.Background()) }

// DestroyContext is Destroy with every wait bounded by ctx too: once ctx
// has ended, a rank whose communication stream is still busy (its work
// waits for a peer, or for a compute stream that does not get there) is
// aborted at once instead of DestroyTimeout later; so is a rank on which
// an operation being issued has not returned (its host blocked handing
// work to a full queue), whose stream is then left, not destroyed under
// it. So is a communication stream still busy after its rank's abort:
// destroying it could block until its work ends, which may be never. The
// first call decides: a later call, whatever its ctx, returns its
// result. Destroying a nil group does nothing.
func (pg *ProcessGroup) DestroyContext(ctx context.Context) error {
	if pg == nil {
		return nil
	}
	pg.destroyOnce.Do(func() {
		pg.destroyed.Store(true)
		// The name is free at once: the factory must not hand out a group
		// being torn down.
		if pg.release != nil {
			pg.release()
		}
		var errs []error
		for _, r := range pg.ranks {
			errs = append(errs, pg.destroyRank(ctx, r))
		}
		// Every operation issued has returned: fail those still held in a
		// group that was never ended (its goroutine gone, say), which
		// nothing can launch now.
		pg.gt.drop(pg)
		pg.destroyErr = errors.Join(errs...)
	})
	return pg.destroyErr
}

// destroyRank waits for r's work, within ctx and DestroyTimeout, and
// destroys or aborts its communicator and its stream.
func (pg *ProcessGroup) destroyRank(ctx context.Context, r *localRank) error {
	wctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	// why says, when the wait gave up, what ended it.
	why := func() string {
		if ctx.Err() != nil {
			return "when the caller's deadline passed"
		}
		return fmt.Sprintf("after %v", destroyTimeout)
	}
	if !lockBy(wctx, &r.mu) { // let an operation being issued finish
		err := fmt.Errorf("ccl: group %q rank %d: an operation being issued had not returned %s, aborting; its communication stream is left", pg.name, r.rank, why())
		r.commMu.Lock()
		defer r.commMu.Unlock()
		r.finalErr, r.final = &Error{Op: "Destroy", Status: StatusError, Detail: "communicator aborted", Err: err}, true
		return errors.Join(err, pg.impl.CommAbort(r.comm))
	}
	defer r.mu.Unlock()
	err := r.stream.Synchronize(wctx)
	var errs []error
	r.commMu.Lock()
	r.finalErr, r.final = pg.impl.GetAsyncError(r.comm), true
	if err != nil {
		// Work still pending past the deadline (a peer that never came,
		// say): abort rather than wait on it for ever.
		err = fmt.Errorf("ccl: group %q rank %d: work still pending %s, aborting: %w", pg.name, r.rank, why(), err)
		errs = append(errs, err, pg.impl.CommAbort(r.comm))
		if !isFailure(r.finalErr) {
			// The abandoned work did not succeed, whatever the
			// communicator said before the abort.
			r.finalErr = &Error{Op: "Destroy", Status: StatusError, Detail: "communicator aborted", Err: err}
		}
	} else {
		errs = append(errs, pg.impl.CommDestroy(r.comm))
	}
	r.commMu.Unlock()
	if err != nil {
		// The abort ends the communication kernels; work that waits on
		// something it does not reach (a compute stream's kernel that
		// does not end) stays. Destroying a stream with work pending can
		// block in the driver until that work ends (CUDA's does), so a
		// stream still busy a moment after the abort is left.
		actx, cancel := context.WithTimeout(context.Background(), abortDrain)
		qerr := r.stream.Synchronize(actx)
		cancel()
		if qerr != nil {
			return errors.Join(append(errs, fmt.Errorf("ccl: group %q rank %d: its communication stream still has work pending %v after the abort: the stream is left, not destroyed", pg.name, r.rank, abortDrain))...)
		}
	}
	errs = append(errs, r.stream.Destroy())
	return errors.Join(errs...)
}

// lockBy locks mu unless ctx ends first, polling with a backoff to a
// millisecond: Destroy's wait for an operation being issued keeps its
// deadline.
func lockBy(ctx context.Context, mu *sync.Mutex) bool {
	for pause := 10 * time.Microsecond; !mu.TryLock(); pause = min(2*pause, time.Millisecond) {
		if ctx.Err() != nil {
			return false
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return true
}

// asyncError returns rank r's communicator failure, or nil while it is
// healthy or still being set up. While Destroy holds commMu the backend is
// destroying or aborting the communicator, which may take up to its own
// timeout: rather than wait behind it, past the caller's deadline, it
// says nothing yet, and a later look sees the communicator's last word.
func (pg *ProcessGroup) asyncError(r *localRank) error {
	if !r.commMu.TryRLock() {
		return nil
	}
	err := r.finalErr
	if !r.final {
		err = pg.impl.GetAsyncError(r.comm)
	}
	r.commMu.RUnlock()
	if !isFailure(err) {
		return nil
	}
	return err
}

// isFailure reports whether a communicator's asynchronous error is a
// failure. InProgress means "still being set up", not a failure; Timeout,
// though non-negative, is one.
func isFailure(err error) bool {
	st := StatusOf(err)
	return err != nil && st != StatusSuccess && st != StatusInProgress
}

// seqOf returns the counter that numbers c's calls on r (see localRank);
// the caller holds r.mu.
func (r *localRank) seqOf(c *profiler.Collective, size int) *uint64 {
	switch c.Op {
	case OpSend:
		if r.sent == nil {
			r.sent = make([]uint64, size)
		}
		return &r.sent[c.Peer]
	case OpRecv:
		if r.received == nil {
			r.received = make([]uint64, size)
		}
		return &r.received[c.Peer]
	}
	return &r.collectives
}
