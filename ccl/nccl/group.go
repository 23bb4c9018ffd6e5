package nccl

import (
	"errors"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/internal/goid"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// groups holds the goroutines' open groups. NCCL keeps a group per
// thread; GroupStart locks the calling goroutine to its thread until the
// matching GroupEnd, so a goroutine's group is its thread's.
type groups struct {
	open atomic.Int64 // goroutines with an open group; 0 skips the lookup
	mu   sync.Mutex
	m    map[uint64]*openGroup // by goroutine id
}

// openGroup is one goroutine's open group and the communicators its
// operations used, each read-locked until the outermost GroupEnd.
type openGroup struct {
	depth int
	comms []*comm
}

// current returns the calling goroutine's open group, or nil.
func (g *groups) current() *openGroup {
	if g.open.Load() == 0 {
		return nil
	}
	id := goid.Get()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[id]
}

// GroupStart opens a group on the calling goroutine (ncclGroupStart);
// groups nest.
func (b *Backend) GroupStart() error {
	const op = "GroupStart"
	if err := b.ready(op); err != nil {
		return err
	}
	goruntime.LockOSThread()
	if rc := int32(dl.Call(b.api.groupStart)); rc != ncclSuccess {
		goruntime.UnlockOSThread()
		return b.ncclErr(op, rc, 0, "")
	}
	id := goid.Get()
	b.groups.mu.Lock()
	g := b.groups.m[id]
	if g == nil {
		g = &openGroup{}
		b.groups.m[id] = g
		b.groups.open.Add(1)
	}
	g.depth++
	b.groups.mu.Unlock()
	return nil
}

// GroupEnd closes the calling goroutine's innermost group. The outermost
// one launches the group's operations (ncclGroupEnd) and, where NCCL is
// still connecting peers (ncclInProgress), waits within one timeout, for
// the whole group, until every communicator of it has its work enqueued.
func (b *Backend) GroupEnd() error {
	const op = "GroupEnd"
	id := goid.Get()
	b.groups.mu.Lock()
	g := b.groups.m[id]
	if g == nil {
		b.groups.mu.Unlock()
		return ccl.Errorf(op, ccl.StatusInvalidArgument, "GroupEnd without GroupStart on this goroutine")
	}
	g.depth--
	outer := g.depth == 0
	if outer {
		delete(b.groups.m, id)
		b.groups.open.Add(-1)
	}
	b.groups.mu.Unlock()
	defer goruntime.UnlockOSThread()

	rc := int32(dl.Call(b.api.groupEnd))
	if !outer {
		if rc != ncclSuccess {
			return b.ncclErr(op, rc, 0, "")
		}
		return nil
	}
	var errs []error
	switch rc {
	case ncclSuccess:
	case ncclInProgress:
		errs = append(errs, b.waitAll(op, g.comms)...)
	default:
		var h uintptr
		who := ""
		if len(g.comms) > 0 {
			h, who = g.comms[0].h, g.comms[0].String()
		}
		errs = append(errs, b.ncclErr(op, rc, h, who))
	}
	for _, c := range g.comms {
		c.mu.RUnlock()
	}
	return errors.Join(errs...)
}

// join adds c to the goroutine's open group, read-locking it until the
// group ends.
func (g *openGroup) join(op string, c *comm) error {
	if slices.Contains(g.comms, c) {
		return nil
	}
	if err := c.acquire(op); err != nil {
		return err
	}
	g.comms = append(g.comms, c)
	return nil
}
