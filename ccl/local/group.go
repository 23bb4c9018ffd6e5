package local

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/internal/goid"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// groups holds the open GroupStart regions. As NCCL's groups belong to
// the calling thread, these belong to the calling goroutine: the
// operations a goroutine issues inside its group are held back and, at its
// outermost GroupEnd, enqueued as one item per stream that runs them
// concurrently. So a rank may issue its Recv before its Send in a group
// without deadlocking, and groups on other goroutines are not affected.
type groups struct {
	open atomic.Int64 // goroutines with an open group; 0 skips the lookup
	mu   sync.Mutex
	m    map[uint64]*openGroup // by goroutine id
}

// openGroup is one goroutine's open group.
type openGroup struct {
	depth   int
	batches []*batch   // in the order their streams were first used
	shared  []sharedOp // a shared backend's operations, in issue order
}

// batch is the operations a group issued on one stream.
type batch struct {
	s      *runtime.Stream
	ops    []func()
	worlds []*world
}

// GroupStart opens a group on the calling goroutine; groups nest.
func (b *Backend) GroupStart() error {
	id := goid.Get()
	b.groups.mu.Lock()
	defer b.groups.mu.Unlock()
	g := b.groups.m[id]
	if g == nil {
		g = &openGroup{}
		b.groups.m[id] = g
		b.groups.open.Add(1)
	}
	g.depth++
	return nil
}

// GroupEnd closes the calling goroutine's innermost group; the outermost
// GroupEnd enqueues the group's operations. Without an open group on the
// calling goroutine it is an error.
func (b *Backend) GroupEnd() error {
	id := goid.Get()
	b.groups.mu.Lock()
	g := b.groups.m[id]
	if g == nil {
		b.groups.mu.Unlock()
		return ccl.Errorf("GroupEnd", ccl.StatusInvalidArgument, "GroupEnd without GroupStart on this goroutine")
	}
	g.depth--
	if g.depth > 0 {
		b.groups.mu.Unlock()
		return nil
	}
	delete(b.groups.m, id)
	b.groups.open.Add(-1)
	b.groups.mu.Unlock()

	var errs []error
	for _, bt := range g.batches {
		ops := bt.ops
		if err := cpu.Enqueue(bt.s, func() { runConcurrently(ops) }); err != nil {
			// The operations were numbered when issued; without them the
			// ranks no longer agree, so their communicators fail.
			err = &ccl.Error{Op: "GroupEnd", Status: ccl.StatusInvalidArgument, Detail: "enqueue the group's operations", Err: err}
			for _, w := range bt.worlds {
				w.fail(err)
			}
			errs = append(errs, err)
		}
	}
	if len(g.shared) > 0 {
		errs = append(errs, runShared(g.shared))
	}
	return errors.Join(errs...)
}

// submit runs fn on s in stream order or, inside a group of the calling
// goroutine, adds it to the group's batch for s.
func (b *Backend) submit(c *comm, s *runtime.Stream, fn func()) error {
	if b.groups.open.Load() > 0 {
		id := goid.Get()
		b.groups.mu.Lock()
		if g := b.groups.m[id]; g != nil {
			g.add(c.w, s, fn)
			b.groups.mu.Unlock()
			return nil
		}
		b.groups.mu.Unlock()
	}
	if err := cpu.Enqueue(s, fn); err != nil {
		return &ccl.Error{Op: "Enqueue", Status: ccl.StatusInvalidArgument, Detail: c.String(), Err: err}
	}
	return nil
}

func (g *openGroup) add(w *world, s *runtime.Stream, fn func()) {
	for _, bt := range g.batches {
		if bt.s == s {
			bt.ops = append(bt.ops, fn)
			bt.worlds = append(bt.worlds, w)
			return
		}
	}
	g.batches = append(g.batches, &batch{s: s, ops: []func(){fn}, worlds: []*world{w}})
}

// runConcurrently runs a group's operations on one stream together, as a
// fused NCCL group does: each waits only for its own peers.
func runConcurrently(ops []func()) {
	if len(ops) == 1 {
		ops[0]()
		return
	}
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(op)
	}
	wg.Wait()
}
