package nccl

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// comm is one rank's NCCL communicator.
type comm struct {
	b          *Backend
	h          uintptr // ncclComm_t
	rank, size int
	dev        runtime.Device

	// Calls that use h hold mu for reading; CommDestroy and CommAbort
	// take it for writing (with TryLock, so a reader never waits behind
	// them) before h is freed. A goroutine holds the read lock from its
	// first operation in a group to its GroupEnd, which uses h.
	mu       sync.RWMutex
	aborting atomic.Bool // set first by CommAbort: waits give up, new calls fail
	freed    bool        // under mu
	final    error       // the state after destroy or abort, under mu
}

func (c *comm) Rank() int              { return c.rank }
func (c *comm) Size() int              { return c.size }
func (c *comm) Device() runtime.Device { return c.dev }

// String describes the endpoint, e.g. "NCCL rank 1 of 2 on cuda:1".
func (c *comm) String() string { return fmt.Sprintf("NCCL rank %d of %d on %s", c.rank, c.size, c.dev) }

func asComm(op string, c ccl.Comm) (*comm, error) {
	nc, ok := c.(*comm)
	if !ok || nc == nil {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "%T is not an NCCL communicator", c)
	}
	return nc, nil
}

// acquire read-locks a live communicator for a call. The abort flag is
// read under the lock: a blocking-mode CommAbort that cannot take the
// write lock frees the handle while readers hold it, and a call that
// read the flag before the abort began and locked after it would use
// the freed handle.
func (c *comm) acquire(op string) error {
	c.mu.RLock()
	switch {
	case c.aborting.Load():
		c.mu.RUnlock()
		return ccl.Errorf(op, ccl.StatusError, "%s was aborted", c)
	case c.freed:
		c.mu.RUnlock()
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s used after CommDestroy or CommAbort", c)
	}
	return nil
}

// lockForFree takes the write lock within the backend's timeout; readers
// are operations about to return (an aborting communicator makes their
// waits give up).
func (c *comm) lockForFree(op string) error {
	if !c.tryLock(c.b.cfg.timeout) {
		return ccl.Errorf(op, ccl.StatusTimeout, "%s still in use by an operation or an open group after %v", c, c.b.cfg.timeout)
	}
	return nil
}

// tryLock takes the write lock within d, without ever blocking readers.
func (c *comm) tryLock(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !c.mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// asyncState reads the communicator's state: ncclSuccess, ncclInProgress
// or a failure.
func (b *Backend) asyncState(h uintptr) (int32, error) {
	f := dl.Get()
	rc := int32(f.Call(b.api.commGetAsyncError, h, f.OutPtr(0)))
	state := int32(f.Out[0])
	f.Put()
	if rc != 0 {
		return 0, b.ncclErr("GetAsyncError", rc, h, "")
	}
	return state, nil
}

// wait polls an in-progress communicator until it is ready, has failed,
// is being aborted, or the timeout has passed. The caller holds c.mu.
func (b *Backend) wait(op string, c *comm) error {
	return b.waitUntil(op, c, time.Now().Add(b.cfg.timeout))
}

// waitAll waits for every communicator of a group within one timeout,
// not one each: a group of n stuck communicators gives up after the
// timeout, not n of them.
func (b *Backend) waitAll(op string, comms []*comm) []error {
	deadline := time.Now().Add(b.cfg.timeout)
	var errs []error
	for _, c := range comms {
		if err := b.waitUntil(op, c, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// waitUntil is wait with its deadline given.
func (b *Backend) waitUntil(op string, c *comm, deadline time.Time) error {
	var p poller
	for {
		state, err := b.asyncState(c.h)
		if err != nil {
			return err
		}
		switch state {
		case ncclSuccess:
			return nil
		case ncclInProgress:
		default:
			return b.ncclErr(op, state, c.h, c.String())
		}
		if c.aborting.Load() {
			return ccl.Errorf(op, ccl.StatusError, "%s was aborted while the operation was in progress", c)
		}
		if time.Now().After(deadline) {
			return ccl.Errorf(op, ccl.StatusTimeout, "%s: still ncclInProgress after %v: a peer has not joined", c, b.cfg.timeout)
		}
		p.pause()
	}
}

// GetAsyncError returns the communicator's asynchronous state: nil when
// healthy, an error wrapping ccl.StatusInProgress while it is being set
// up, a failure (with NCCL's name for it) after a peer or the transport
// failed. After CommDestroy or CommAbort it keeps answering with the
// state the communicator ended in.
func (b *Backend) GetAsyncError(c ccl.Comm) error {
	nc, err := asComm("GetAsyncError", c)
	if err != nil {
		return err
	}
	if nc.aborting.Load() {
		return ccl.Errorf("GetAsyncError", ccl.StatusError, "%s was aborted", nc)
	}
	nc.mu.RLock()
	defer nc.mu.RUnlock()
	if nc.freed {
		return nc.final
	}
	state, err := b.asyncState(nc.h)
	if err != nil {
		return err
	}
	switch state {
	case ncclSuccess:
		return nil
	case ncclInProgress:
		return errInProgress
	}
	return b.ncclErr("GetAsyncError", state, nc.h, nc.String())
}

// onDevice runs fn on a locked OS thread with dev current, and leaves the
// thread as it found it: with the CUDA runtime, no context where it had
// none (cuda.Impl.OnDevice), rather than one on GPU 0, which NCCL's calls
// that set the communicator's device and then the thread's (finalize,
// destroy, abort) would make on a thread without a context.
func (b *Backend) onDevice(dev runtime.Device, fn func()) error {
	if od, ok := b.rt.(interface {
		OnDevice(index int, fn func()) error
	}); ok {
		return od.OnDevice(dev.Index, fn)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	prev, err := b.rt.GetDevice()
	if err == nil {
		err = b.rt.SetDevice(dev.Index)
	}
	if err != nil {
		return err
	}
	defer func() { _ = b.rt.SetDevice(prev) }()
	fn()
	return nil
}

// abortHandle calls ncclCommAbort on h, on dev's context, waiting for it
// at most the backend's timeout: an abort that itself hangs (a bootstrap
// stuck on a dead peer) is left to finish in the background rather than
// hang the caller.
func (b *Backend) abortHandle(h uintptr, dev runtime.Device) error {
	if h == 0 {
		return nil
	}
	done := make(chan int32, 1)
	go func() {
		rc := int32(ncclInternalError)
		if err := b.onDevice(dev, func() { rc = int32(dl.Call(b.api.commAbort, h)) }); err != nil {
			// No context to abort on: abort on the thread as it is.
			rc = int32(dl.Call(b.api.commAbort, h))
		}
		done <- rc
	}()
	t := time.NewTimer(b.cfg.timeout)
	defer t.Stop()
	select {
	case rc := <-done:
		if rc != ncclSuccess && rc != ncclInProgress {
			return b.ncclErr("CommAbort", rc, 0, "")
		}
		return nil
	case <-t.C:
		return ccl.Errorf("CommAbort", ccl.StatusTimeout, "ncclCommAbort did not return within %v; left running", b.cfg.timeout)
	}
}

// CommInitRank creates rank's endpoint of an nranks communicator on dev.
// It returns once every rank has joined; when some never do, it aborts the
// half-made communicator after the backend's timeout and returns an error
// wrapping ccl.StatusTimeout.
func (b *Backend) CommInitRank(nranks int, id ccl.UniqueID, rank int, dev runtime.Device) (ccl.Comm, error) {
	const op = "CommInitRank"
	if err := b.ready(op); err != nil {
		return nil, err
	}
	u, ok := id.(*uniqueID)
	if !ok || u == nil {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "unique id %T is not an NCCL unique id", id)
	}
	if err := b.checkRank(op, nranks, rank, dev); err != nil {
		return nil, err
	}
	return b.initRank(op, nranks, u, rank, dev, nil)
}

func (b *Backend) checkRank(op string, nranks, rank int, dev runtime.Device) error {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "rank %d of %d", rank, nranks)
	}
	if dev.Type != runtime.CUDA {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "device %s is not a CUDA device", dev)
	}
	n, err := b.rt.DeviceCount()
	if err != nil {
		return &ccl.Error{Op: op, Status: ccl.StatusError, Detail: "device count", Err: err}
	}
	if dev.Index < 0 || dev.Index >= n {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "invalid device %s: %d CUDA devices present", dev, n)
	}
	return nil
}

// initRank creates one communicator and waits until every rank has
// joined. It gives up when the timeout passes or cancel is closed: a
// non-blocking communicator is aborted; a blocking one, whose creation
// call cannot be interrupted, is left to its thread.
func (b *Backend) initRank(op string, nranks int, u *uniqueID, rank int, dev runtime.Device, cancel <-chan struct{}) (*comm, error) {
	c := &comm{b: b, rank: rank, size: nranks, dev: dev}
	type started struct {
		h   uintptr
		rc  int32
		err error
	}
	start := func() started {
		// NCCL binds the communicator to the thread's current device at
		// this call; the thread is left as it was found.
		var r started
		err := b.onDevice(dev, func() {
			cfg := newConfig(b.cfg.blocking)
			hp := new(uintptr)
			r.rc = b.api.commInitRankConfig(hp, int32(nranks), cUniqueID{Internal: u.internal}, int32(rank), cfg)
			goruntime.KeepAlive(cfg)
			r.h = *hp
		})
		if err != nil {
			return started{err: &ccl.Error{Op: op, Status: ccl.StatusError, Detail: fmt.Sprintf("make %s current", dev), Err: err}}
		}
		return r
	}
	timer := time.NewTimer(b.cfg.timeout)
	defer timer.Stop()
	if b.cfg.blocking {
		ch := make(chan started, 1)
		go func() { ch <- start() }()
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			if r.rc != ncclSuccess {
				return nil, b.ncclErr(op, r.rc, 0, c.String())
			}
			c.h = r.h
			return c, nil
		case <-cancel:
			return nil, ccl.Errorf(op, ccl.StatusError, "%s: abandoned because another rank of this process failed to join", c)
		case <-timer.C:
			return nil, ccl.Errorf(op, ccl.StatusTimeout, "%s: not every rank joined within %v; the blocking creation call is left running on its thread", c, b.cfg.timeout)
		}
	}
	r := start()
	if r.err != nil {
		return nil, r.err
	}
	c.h = r.h
	if r.rc != ncclSuccess && r.rc != ncclInProgress {
		err := b.ncclErr(op, r.rc, c.h, c.String())
		_ = b.abortHandle(c.h, c.dev)
		return nil, err
	}
	var p poller
	for {
		state, err := b.asyncState(c.h)
		if err != nil {
			_ = b.abortHandle(c.h, c.dev)
			return nil, err
		}
		if state == ncclSuccess {
			return c, nil
		}
		if state != ncclInProgress {
			err := b.ncclErr(op, state, c.h, c.String())
			_ = b.abortHandle(c.h, c.dev)
			return nil, err
		}
		select {
		case <-cancel:
			_ = b.abortHandle(c.h, c.dev)
			return nil, ccl.Errorf(op, ccl.StatusError, "%s: abandoned because another rank of this process failed to join", c)
		case <-timer.C:
			err := ccl.Errorf(op, ccl.StatusTimeout, "%s: not every rank joined within %v (ncclInProgress); the communicator was aborted", c, b.cfg.timeout)
			return nil, errors.Join(err, b.abortHandle(c.h, c.dev))
		default:
		}
		p.pause()
	}
}

// poller paces a polling loop: it yields the processor for the first
// 100µs (NCCL's launches complete in tens of microseconds), then sleeps,
// backing off to 2ms.
type poller struct {
	start time.Time
	sleep time.Duration
}

func (p *poller) pause() {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if time.Since(p.start) < 100*time.Microsecond {
		goruntime.Gosched()
		return
	}
	if p.sleep == 0 {
		p.sleep = 20 * time.Microsecond
	}
	time.Sleep(p.sleep)
	p.sleep = min(2*p.sleep, 2*time.Millisecond)
}

// CommInitAll creates one communicator per device, all in this process:
// a goroutine per device joins, as ranks of other processes would. Ranks
// are the devices' positions. If any rank fails, the others are aborted.
func (b *Backend) CommInitAll(devices []runtime.Device) ([]ccl.Comm, error) {
	const op = "CommInitAll"
	if err := b.ready(op); err != nil {
		return nil, err
	}
	if len(devices) == 0 {
		return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "no devices")
	}
	seen := map[runtime.Device]bool{}
	for _, d := range devices {
		if err := b.checkRank(op, len(devices), 0, d); err != nil {
			return nil, err
		}
		if seen[d] {
			return nil, ccl.Errorf(op, ccl.StatusInvalidArgument, "device %s listed twice", d)
		}
		seen[d] = true
	}
	id, err := b.GetUniqueID()
	if err != nil {
		return nil, err
	}
	u := id.(*uniqueID)
	comms := make([]*comm, len(devices))
	errs := make([]error, len(devices))
	cancel := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i, d := range devices {
		wg.Go(func() {
			comms[i], errs[i] = b.initRank(op, len(devices), u, i, d, cancel)
			if errs[i] != nil {
				once.Do(func() { close(cancel) })
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				_ = b.CommAbort(c)
			}
		}
		return nil, err
	}
	out := make([]ccl.Comm, len(comms))
	for i, c := range comms {
		out[i] = c
	}
	return out, nil
}

// CommDestroy waits (within the timeout) for the communicator's
// operations to finish (ncclCommFinalize) and frees it. When they do not
// finish, it aborts the communicator and returns an error wrapping
// ccl.StatusTimeout.
func (b *Backend) CommDestroy(c ccl.Comm) error {
	const op = "CommDestroy"
	nc, err := asComm(op, c)
	if err != nil {
		return err
	}
	if nc.aborting.Load() {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s was aborted already", nc)
	}
	if err := nc.lockForFree(op); err != nil {
		return err
	}
	defer nc.mu.Unlock()
	if nc.freed {
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "%s destroyed already", nc)
	}
	var final error
	rc := int32(ncclSuccess)
	// Finalize and destroy set the communicator's device and then the
	// thread's: on the communicator's, they leave no context on GPU 0.
	if err := b.onDevice(nc.dev, func() { rc = int32(dl.Call(b.api.commFinalize, nc.h)) }); err != nil {
		rc = int32(dl.Call(b.api.commFinalize, nc.h))
	}
	if rc != ncclSuccess && rc != ncclInProgress {
		final = b.ncclErr(op, rc, nc.h, nc.String())
	} else if err := b.wait(op, nc); err != nil {
		final = err
	}
	nc.freed = true
	if final != nil {
		nc.final = final
		return errors.Join(final, b.abortHandle(nc.h, nc.dev))
	}
	if err := b.onDevice(nc.dev, func() { rc = int32(dl.Call(b.api.commDestroy, nc.h)) }); err != nil {
		rc = int32(dl.Call(b.api.commDestroy, nc.h))
	}
	if rc != ncclSuccess && rc != ncclInProgress {
		nc.final = b.ncclErr(op, rc, 0, nc.String())
		return nc.final
	}
	return nil
}

// CommAbort frees the communicator at once, ending its pending device
// work; later calls on it fail, and GetAsyncError reports the abort. A
// second abort does nothing.
func (b *Backend) CommAbort(c ccl.Comm) error {
	const op = "CommAbort"
	nc, err := asComm(op, c)
	if err != nil {
		return err
	}
	if nc.aborting.Swap(true) {
		return nil
	}
	grace := b.cfg.timeout
	if b.cfg.blocking {
		// A blocking call may be waiting inside NCCL for a peer that will
		// never come; ncclCommAbort is what ends it.
		grace = 100 * time.Millisecond
	}
	if !nc.tryLock(grace) {
		if !b.cfg.blocking {
			nc.aborting.Store(false) // not aborted: a later abort (or destroy) may try again
			return ccl.Errorf(op, ccl.StatusTimeout, "%s still in use by an operation or an open group after %v", nc, grace)
		}
		// Freed under the readers' feet. It is not marked freed: the
		// aborting flag, which stays set and which every call, wait and
		// query reads first, says so already, and waiting for the write
		// lock to mark it would queue every later call behind that wait,
		// for as long as an open group holds the communicator.
		return b.abortHandle(nc.h, nc.dev)
	}
	defer nc.mu.Unlock()
	if nc.freed {
		return nil
	}
	nc.freed = true
	nc.final = ccl.Errorf(op, ccl.StatusError, "%s was aborted", nc)
	return b.abortHandle(nc.h, nc.dev)
}
