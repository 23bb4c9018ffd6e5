package ccl_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// destroyOrderImpl remembers the communicators CommDestroy was given, in
// order.
type destroyOrderImpl struct {
	ccl.Impl
	mu        sync.Mutex
	destroyed []ccl.Comm
}

func (d *destroyOrderImpl) CommDestroy(c ccl.Comm) error {
	d.mu.Lock()
	d.destroyed = append(d.destroyed, c)
	d.mu.Unlock()
	return d.Impl.CommDestroy(c)
}

// TestFactoryDestroyOrder: the factory destroys its groups in the order
// of their names, the same in every process that made the same groups,
// as NCCL's teardown wants (destroy and abort may synchronise the ranks
// of a node); it used to follow the random order of a map.
func TestFactoryDestroyOrder(t *testing.T) {
	noLeaks(t)
	impl := &destroyOrderImpl{Impl: local.New(local.WithTimeout(5 * time.Second))}
	f := ccl.NewProcessGroupFactory(impl, cpuRuntime(t))
	devs := cpuDevs(0, 1)
	// Created out of name order; names sort "dp-0" < "dp-1" < … < "tp-3".
	names := []string{"tp-3", "dp-1", "pp-0", "dp-0", "tp-0", "pp-2", "dp-3", "tp-1"}
	want := []string{"dp-0", "dp-1", "dp-3", "pp-0", "pp-2", "tp-0", "tp-1", "tp-3"}
	owner := map[ccl.Comm]string{}
	for _, name := range names {
		pg, err := f.GetOrCreate(name, devs)
		if err != nil {
			t.Fatal(err)
		}
		c, err := pg.Comm(devs[0])
		if err != nil {
			t.Fatal(err)
		}
		owner[c] = name
	}
	if err := f.Destroy(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range impl.destroyed {
		got = append(got, owner[c])
	}
	if !slices.Equal(got, want) {
		t.Errorf("groups destroyed in the order %v, want %v", got, want)
	}
	if n := len(f.Names()); n != 0 {
		t.Errorf("%d groups left after Destroy", n)
	}
}

// TestFactoryDestroyWhileAPeerNeverComes: rank 1 of a two-rank group
// waits for rank 0, another process that never starts. Destroy with a
// deadline and Get with one return when their deadlines pass, and the
// creation, cancelled by Destroy, returns saying why; they waited for the
// creation's own timeout (minutes) before.
func TestFactoryDestroyWhileAPeerNeverComes(t *testing.T) {
	noLeaks(t)
	f := ccl.NewProcessGroupFactory(local.New(local.WithTimeout(time.Hour)), cpuRuntime(t))
	created := make(chan error, 1)
	go func() {
		_, err := f.GetOrCreateRank(context.Background(), "pp0", 2, 1, cpuDevs(1, 1)[0], t.TempDir())
		created <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(f.Names(), "pp0"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the group's creation has not begun after 10 s")
		}
	}
	within := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting after 10 s", what)
			return nil
		}
	}
	err := within("GetContext", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := f.GetContext(ctx, "pp0")
		return err
	})
	if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), `group "pp0": gave up waiting for its creation`) {
		t.Errorf("GetContext of a group being created, 50 ms deadline: %v", err)
	}
	err = within("DestroyContext", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return f.DestroyContext(ctx)
	})
	if !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), `group "pp0": still being created when the deadline passed`) {
		t.Errorf("DestroyContext, 100 ms deadline: %v", err)
	}
	err = within("GetOrCreateRank", func() error { return <-created })
	if !errors.Is(err, ccl.StatusUnavailable) || !strings.Contains(err.Error(), "creation cancelled: the factory was destroyed meanwhile") {
		t.Errorf("the creation after Destroy: %v", err)
	}
	if names := f.Names(); len(names) != 0 {
		t.Errorf("groups left after Destroy: %v", names)
	}
}

// heldInit holds CommInitAll until release is closed; entered (one slot)
// says one has begun.
type heldInit struct {
	destroyOrderImpl
	entered, release chan struct{}
}

func (h *heldInit) CommInitAll(devs []runtime.Device) ([]ccl.Comm, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	return h.destroyOrderImpl.CommInitAll(devs)
}

// TestFactoryDestroyGivesUpOnACreation: a creation that outlasts
// Destroy's deadline (it cannot be cancelled) ends with its group
// destroyed, every communicator it made, and an error for its caller.
func TestFactoryDestroyGivesUpOnACreation(t *testing.T) {
	noLeaks(t)
	impl := &heldInit{destroyOrderImpl: destroyOrderImpl{Impl: local.New(local.WithTimeout(5 * time.Second))}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := ccl.NewProcessGroupFactory(impl, cpuRuntime(t))
	type result struct {
		pg  *ccl.ProcessGroup
		err error
	}
	created := make(chan result, 1)
	go func() {
		pg, err := f.GetOrCreate("dp", cpuDevs(0, 2))
		created <- result{pg, err}
	}()
	<-impl.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.DestroyContext(ctx); !errors.Is(err, ccl.StatusTimeout) || !strings.Contains(err.Error(), `group "dp": still being created`) {
		t.Errorf("DestroyContext, 50 ms deadline: %v", err)
	}
	close(impl.release)
	r := <-created
	if r.pg != nil || !errors.Is(r.err, ccl.StatusUnavailable) || !strings.Contains(r.err.Error(), `group "dp": destroyed as its creation ended`) {
		t.Errorf("GetOrCreate after Destroy gave up on it: %v, %v", r.pg, r.err)
	}
	impl.mu.Lock()
	n := len(impl.destroyed)
	impl.mu.Unlock()
	if n != 2 {
		t.Errorf("%d communicators destroyed, want the 2 created", n)
	}
	// The name is free again.
	pg, err := f.GetOrCreate("dp", cpuDevs(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Destroy(); err != nil {
		t.Fatal(err)
	}
}
