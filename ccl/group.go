package ccl

import (
	"errors"
	"sync/atomic"
)

// Group runs fn between impl.GroupStart and impl.GroupEnd. GroupEnd is
// called whenever GroupStart succeeded, even when fn fails or panics; the
// errors of fn and GroupEnd are joined.
//
// Group, like GroupGuard, is for calls made on the backend itself. A
// ProcessGroup does not see a group opened here: the Works of its
// operations issued inside would report completion before the group's
// GroupEnd launched them. Group those with ProcessGroup.Group or
// ProcessGroupFactory.Group.
func Group(impl Impl, fn func() error) error {
	if impl == nil {
		return Errorf("Group", StatusInvalidArgument, "nil backend")
	}
	return group(impl, fn)
}

// grouper is what Group needs: an Impl or a ProcessGroup.
type grouper interface {
	GroupStart() error
	GroupEnd() error
}

func group(impl grouper, fn func() error) (err error) {
	if err := impl.GroupStart(); err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, impl.GroupEnd())
	}()
	if fn == nil {
		return nil
	}
	return fn()
}

// GroupGuard holds a GroupStart/GroupEnd region open until End (on the
// backend itself: see Group for ProcessGroup operations):
//
//	g, err := ccl.NewGroupGuard(impl)
//	if err != nil { return err }
//	defer g.End()
type GroupGuard struct {
	impl  Impl
	ended atomic.Bool
}

// NewGroupGuard calls impl.GroupStart and returns the guard that ends the
// group.
func NewGroupGuard(impl Impl) (*GroupGuard, error) {
	if impl == nil {
		return nil, Errorf("NewGroupGuard", StatusInvalidArgument, "nil backend")
	}
	if err := impl.GroupStart(); err != nil {
		return nil, err
	}
	return &GroupGuard{impl: impl}, nil
}

// End calls GroupEnd once; later calls do nothing and return nil.
func (g *GroupGuard) End() error {
	if g == nil || g.ended.Swap(true) {
		return nil
	}
	return g.impl.GroupEnd()
}
