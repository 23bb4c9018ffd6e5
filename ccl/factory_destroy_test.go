package ccl_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
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
