package ccl

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/trainscope/trainscope/runtime"
)

// factoryTable holds the process-wide factories, one per backend.
type factoryTable struct {
	mu sync.Mutex
	m  map[runtime.DeviceType]*ProcessGroupFactory
}

var factories = &factoryTable{m: make(map[runtime.DeviceType]*ProcessGroupFactory)}

// Instance returns the process-wide factory for backend, creating it on
// first use with the registered ccl and runtime backends of that type,
// both initialised.
func Instance(backend runtime.DeviceType) (*ProcessGroupFactory, error) {
	factories.mu.Lock()
	defer factories.mu.Unlock()
	if f, ok := factories.m[backend]; ok {
		return f, nil
	}
	rt, err := runtime.Available(backend)
	if err != nil {
		return nil, err
	}
	c, err := Available(backend)
	if err != nil {
		return nil, err
	}
	f := NewProcessGroupFactory(c, rt)
	factories.m[backend] = f
	return f, nil
}

// ExistingFactory returns the factory an earlier Instance call created,
// for code that does not know the backend. It creates nothing: it is an
// error when no factory exists yet, or when factories of several backends
// exist (then Instance(backend) must pick one).
func ExistingFactory() (*ProcessGroupFactory, error) {
	factories.mu.Lock()
	defer factories.mu.Unlock()
	switch len(factories.m) {
	case 0:
		return nil, Errorf("ExistingFactory", StatusUnavailable, "no ProcessGroupFactory exists yet; call ccl.Instance(backend) first")
	case 1:
		for _, f := range factories.m {
			return f, nil
		}
	}
	var names []string
	for _, t := range sortedTypes(factories.m) {
		names = append(names, t.String())
	}
	return nil, Errorf("ExistingFactory", StatusInvalidArgument, "factories exist for several backends (%s); call ccl.Instance(backend) to pick one", strings.Join(names, ", "))
}

func sortedTypes(m map[runtime.DeviceType]*ProcessGroupFactory) []runtime.DeviceType {
	return slices.Sorted(maps.Keys(m))
}

// resetFactories forgets the process-wide factories (their groups are
// not destroyed); for tests.
func resetFactories() {
	factories.mu.Lock()
	clear(factories.m)
	factories.mu.Unlock()
}
