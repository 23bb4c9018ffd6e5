package ccl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/trainscope/trainscope/runtime"
)

// ProcessGroupFactory creates process groups on one backend and keeps
// them by name. Instance returns the
// process-wide factory of a backend; NewProcessGroupFactory makes a
// private one (tests, or a backend not in the registries).
type ProcessGroupFactory struct {
	impl Impl
	rt   runtime.Impl

	mu     sync.Mutex
	groups map[string]*groupEntry

	open groupTable // the backend's GroupStart regions, shared by the groups
}

// groupEntry is a group being created or created. ready is closed when
// creation ends; pg and err are set before.
type groupEntry struct {
	spec  groupSpec
	ready chan struct{}
	pg    *ProcessGroup
	err   error
	// cancel ends the creation's context (DestroyContext, on its
	// deadline); destroyed, under the factory's mu, tells the creator to
	// destroy the group it made (DestroyContext gave up waiting for it).
	cancel    context.CancelCauseFunc
	destroyed bool
	finished  bool // pg and err are set; under the factory's mu
}

// groupSpec is what a group was asked for, so that a second request for
// the name with other arguments is refused.
type groupSpec struct {
	devices      []runtime.Device
	nranks, rank int // rank is -1 for a group of local devices
}

func (s groupSpec) String() string {
	if s.rank < 0 {
		return fmt.Sprintf("devices %v", s.devices)
	}
	return fmt.Sprintf("rank %d of %d on %s", s.rank, s.nranks, s.devices[0])
}

func (s groupSpec) equal(o groupSpec) bool {
	return s.nranks == o.nranks && s.rank == o.rank && slices.Equal(s.devices, o.devices)
}

// NewProcessGroupFactory returns a factory that creates groups with the
// given backends, bypassing the registries. Both must serve one device
// type; the groups' creation checks it. With either nil, every call of
// the factory returns an error saying so.
func NewProcessGroupFactory(c Impl, rt runtime.Impl) *ProcessGroupFactory {
	f := &ProcessGroupFactory{impl: c, rt: rt, groups: make(map[string]*groupEntry)}
	f.open = newGroupTable(c, f)
	return f
}

// GroupStart opens a group of operations on the backend for the calling
// goroutine, as ProcessGroup.GroupStart does: the operations of any
// process group on the backend issued inside it are launched together by
// the outermost GroupEnd.
func (f *ProcessGroupFactory) GroupStart() error {
	if f == nil || f.impl == nil {
		return Errorf("GroupStart", StatusInvalidArgument, "factory without a backend")
	}
	return f.open.start(f.impl)
}

// GroupEnd closes the calling goroutine's innermost group (see GroupStart).
func (f *ProcessGroupFactory) GroupEnd() error {
	if f == nil || f.impl == nil {
		return Errorf("GroupEnd", StatusInvalidArgument, "factory without a backend")
	}
	return f.open.end(f.impl, nil)
}

// Group runs fn between GroupStart and GroupEnd; GroupEnd is called even
// when fn fails, and the errors are joined.
func (f *ProcessGroupFactory) Group(fn func() error) error {
	return group(f, fn)
}

// Backend returns the device type the factory's groups use (the zero
// DeviceType for a factory without a ccl backend).
func (f *ProcessGroupFactory) Backend() runtime.DeviceType {
	if f == nil || f.impl == nil {
		return 0
	}
	return f.impl.Type()
}

// usable refuses a nil factory, or one made without both backends.
func (f *ProcessGroupFactory) usable(op string) error {
	switch {
	case f == nil:
		return Errorf(op, StatusInvalidArgument, "nil *ProcessGroupFactory")
	case f.impl == nil:
		return Errorf(op, StatusInvalidArgument, "process group factory has no ccl backend (NewProcessGroupFactory with a nil Impl)")
	case f.rt == nil:
		return Errorf(op, StatusInvalidArgument, "process group factory for %s has no runtime backend (NewProcessGroupFactory with a nil runtime.Impl)", f.impl.Type())
	}
	return nil
}

// GetOrCreate returns the group called name, creating it over devices
// with CommInitAll if it does not exist; ranks are the devices' positions.
// Concurrent calls with one name create it once. Asking for an existing
// name with other devices is an error.
func (f *ProcessGroupFactory) GetOrCreate(name string, devices []runtime.Device) (*ProcessGroup, error) {
	const op = "GetOrCreate"
	if err := f.usable(op); err != nil {
		return nil, err
	}
	if len(devices) == 0 {
		return nil, Errorf(op, StatusInvalidArgument, "group %q: no devices", name)
	}
	seen := make(map[runtime.Device]bool, len(devices))
	for _, d := range devices {
		if err := f.checkDevice(op, name, d); err != nil {
			return nil, err
		}
		if seen[d] {
			return nil, Errorf(op, StatusInvalidArgument, "group %q: device %s listed twice", name, d)
		}
		seen[d] = true
	}
	spec := groupSpec{devices: slices.Clone(devices), nranks: len(devices), rank: -1}
	return f.getOrCreate(context.Background(), op, name, spec, func(context.Context) (*ProcessGroup, error) {
		if err := f.init(); err != nil {
			return nil, err
		}
		comms, err := f.impl.CommInitAll(spec.devices)
		if err != nil {
			return nil, err
		}
		if len(comms) != len(spec.devices) {
			f.destroyComms(comms)
			return nil, Errorf(op, StatusInternal, "group %q: CommInitAll returned %d communicators for %d devices", name, len(comms), len(spec.devices))
		}
		pg, err := newProcessGroup(name, f.impl, f.rt, len(comms), comms, f.open)
		if err != nil {
			f.destroyComms(comms)
		}
		return pg, err
	})
}

// GetOrCreateRank returns the group called name, creating this process's
// rank of an nranks group on dev if it does not exist. Rank 0 gets a new
// unique id and writes it to idDir (WriteUniqueID); the other ranks wait
// for it there (ReadUniqueID, bounded by ctx) before CommInitRank, which
// ctx bounds too where the backend is a ContextCommIniter. The
// file, "ccl-<escaped name>.id", is removed by rank 0 once every rank has
// joined.
func (f *ProcessGroupFactory) GetOrCreateRank(ctx context.Context, name string, nranks, rank int, dev runtime.Device, idDir string) (*ProcessGroup, error) {
	const op = "GetOrCreateRank"
	if err := f.usable(op); err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, Errorf(op, StatusInvalidArgument, "group %q: rank %d of %d", name, rank, nranks)
	}
	if err := f.checkDevice(op, name, dev); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	spec := groupSpec{devices: []runtime.Device{dev}, nranks: nranks, rank: rank}
	return f.getOrCreate(ctx, op, name, spec, func(ctx context.Context) (*ProcessGroup, error) {
		if err := f.init(); err != nil {
			return nil, err
		}
		file := uniqueIDFile(name)
		var id UniqueID
		if rank == 0 {
			var err error
			if id, err = f.impl.GetUniqueID(); err != nil {
				return nil, err
			}
			if err := WriteUniqueID(idDir, file, id); err != nil {
				return nil, err
			}
			// CommInitRank returns once every rank has joined, so
			// every rank has read the file by then.
			defer func() { _ = CleanupUniqueID(idDir, file) }()
		} else {
			id = f.impl.NewUniqueID()
			if err := ReadUniqueID(ctx, idDir, file, id); err != nil {
				return nil, err
			}
		}
		var comm Comm
		var err error
		if ci, ok := f.impl.(ContextCommIniter); ok {
			comm, err = ci.CommInitRankContext(ctx, nranks, id, rank, dev)
		} else {
			comm, err = f.impl.CommInitRank(nranks, id, rank, dev)
		}
		if err != nil {
			return nil, err
		}
		pg, err := newProcessGroup(name, f.impl, f.rt, nranks, []Comm{comm}, f.open)
		if err != nil {
			f.destroyComms([]Comm{comm})
		}
		return pg, err
	})
}

// uniqueIDFile names the unique-id file of a group; escaping keeps any
// group name inside the directory.
func uniqueIDFile(name string) string {
	return "ccl-" + url.PathEscape(name) + ".id"
}

func (f *ProcessGroupFactory) checkDevice(op, name string, d runtime.Device) error {
	if d.Type != f.impl.Type() {
		return Errorf(op, StatusInvalidArgument, "group %q: device %s given to a factory for %s", name, d, f.impl.Type())
	}
	return nil
}

func (f *ProcessGroupFactory) init() error {
	if f.impl.Type() != f.rt.Type() {
		return Errorf("NewProcessGroup", StatusInvalidArgument, "ccl backend for %s paired with the %s runtime", f.impl.Type(), f.rt.Type())
	}
	if err := f.rt.Init(); err != nil {
		return err
	}
	return f.impl.Init()
}

func (f *ProcessGroupFactory) destroyComms(comms []Comm) {
	for _, c := range comms {
		if c != nil {
			_ = f.impl.CommDestroy(c)
		}
	}
}

// getOrCreate returns the entry for name, creating it with create when
// absent. Only the creator runs create, with ctx (which DestroyContext may
// cancel); the others wait for it, not for a factory-wide lock.
func (f *ProcessGroupFactory) getOrCreate(ctx context.Context, op, name string, spec groupSpec, create func(context.Context) (*ProcessGroup, error)) (*ProcessGroup, error) {
	f.mu.Lock()
	if e, ok := f.groups[name]; ok {
		f.mu.Unlock()
		if !e.spec.equal(spec) {
			return nil, Errorf(op, StatusInvalidArgument, "group %q exists with %s, asked for %s", name, e.spec, spec)
		}
		if err := waitCreated(ctx, e); err != nil {
			return nil, &Error{Op: op, Status: StatusTimeout, Detail: fmt.Sprintf("group %q: gave up waiting for its creation by another caller", name), Err: err}
		}
		return e.pg, e.err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := &groupEntry{spec: spec, ready: make(chan struct{}), cancel: cancel}
	f.groups[name] = e
	f.mu.Unlock()

	pg, err := create(cctx)
	if err != nil && context.Cause(cctx) == errFactoryDestroyed {
		err = Errorf(op, StatusUnavailable, "group %q: creation cancelled: the factory was destroyed meanwhile (%v)", name, err)
	}
	f.mu.Lock()
	if err == nil && e.destroyed {
		// DestroyContext gave up waiting for this creation and left the
		// group to be destroyed here, at once (it has no work).
		f.mu.Unlock()
		done, stop := context.WithCancel(context.Background())
		stop()
		_ = pg.DestroyContext(done)
		pg, err = nil, Errorf(op, StatusUnavailable, "group %q: destroyed as its creation ended: the factory was destroyed meanwhile", name)
		f.mu.Lock()
	}
	if err != nil {
		// Forget the failure so that a later call may try again; callers
		// already waiting get this error.
		if f.groups[name] == e {
			delete(f.groups, name)
		}
	} else {
		pg.release = func() { f.forget(name, e) }
	}
	e.pg, e.err, e.finished = pg, err, true
	f.mu.Unlock()
	close(e.ready)
	return pg, err
}

func (f *ProcessGroupFactory) forget(name string, e *groupEntry) {
	f.mu.Lock()
	if f.groups[name] == e {
		delete(f.groups, name)
	}
	f.mu.Unlock()
}

// Get returns the group called name; the error for an unknown name lists
// the groups that exist. A group being created is waited for as long as
// its creation takes (bounded by its creator's context); GetContext bounds
// the wait.
func (f *ProcessGroupFactory) Get(name string) (*ProcessGroup, error) {
	return f.GetContext(context.Background(), name)
}

// GetContext is Get waiting for a group being created until ctx ends at
// most.
func (f *ProcessGroupFactory) GetContext(ctx context.Context, name string) (*ProcessGroup, error) {
	if err := f.usable("Get"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	e, ok := f.groups[name]
	f.mu.Unlock()
	if !ok {
		known := strings.Join(f.Names(), ", ")
		if known == "" {
			known = "none"
		}
		return nil, Errorf("Get", StatusInvalidArgument, "no process group %q on %s (known: %s)", name, f.impl.Type(), known)
	}
	if err := waitCreated(ctx, e); err != nil {
		return nil, Errorf("Get", StatusTimeout, "group %q: gave up waiting for its creation: %v", name, err)
	}
	return e.pg, e.err
}

// waitCreated waits for e's creation to end, or for ctx to end first (its
// cause then). A created entry counts as created even when ctx has ended:
// a select over both would pick at random when both are ready.
func waitCreated(ctx context.Context, e *groupEntry) error {
	select {
	case <-e.ready:
		return nil
	default:
	}
	select {
	case <-e.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// errFactoryDestroyed is the cause a creation's context is cancelled with
// by DestroyContext.
var errFactoryDestroyed = errors.New("ccl: the process group factory was destroyed")

// Names returns the names of the groups created or being created, sorted.
func (f *ProcessGroupFactory) Names() []string {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.groups))
	for n := range f.groups {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Destroy destroys every group of the factory (waiting for those being
// created) and forgets them; the factory stays usable. Groups are
// destroyed in the order of their names, so that processes holding the
// same groups tear their communicators down in the same order: NCCL's
// destroy and abort may wait for the other ranks of a node to do theirs.
func (f *ProcessGroupFactory) Destroy() error { return f.DestroyContext(context.Background()) }

// DestroyContext is Destroy with each group destroyed by
// ProcessGroup.DestroyContext(ctx): once ctx has ended, the groups whose
// work is still pending are aborted at once. A group still being created
// when ctx ends (a peer that never joins) is not waited for: its creation
// is cancelled, the group destroyed where it was made all the same, and
// its creator gets an error; the returned error names it.
func (f *ProcessGroupFactory) DestroyContext(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	names := slices.Sorted(maps.Keys(f.groups))
	entries := make([]*groupEntry, 0, len(names))
	for _, name := range names {
		entries = append(entries, f.groups[name])
	}
	clear(f.groups)
	f.mu.Unlock()
	var errs []error
	for i, e := range entries {
		if err := waitCreated(ctx, e); err != nil {
			f.mu.Lock()
			// Where the creator has not set pg yet, it destroys the
			// group it makes; else that group is destroyed below.
			e.destroyed = !e.finished
			abandon := e.destroyed
			f.mu.Unlock()
			if abandon {
				e.cancel(errFactoryDestroyed)
				errs = append(errs, Errorf("Destroy", StatusTimeout, "group %q: still being created when the deadline passed (%v): its creation cancelled, the group destroyed if it is made", names[i], err))
				continue
			}
		}
		if e.pg != nil {
			if err := e.pg.DestroyContext(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
