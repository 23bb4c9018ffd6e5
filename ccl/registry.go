package ccl

import (
	"slices"
	"strings"
	"sync"

	"github.com/trainscope/trainscope/runtime"
)

// Registry maps device types to CCL backends. Backends register into the
// process-wide registry from init; tests build their own.
type Registry struct {
	mu    sync.RWMutex
	impls map[runtime.DeviceType]Impl
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{impls: make(map[runtime.DeviceType]Impl)} }

var defaultRegistry = NewRegistry()

// DefaultRegistry returns the process-wide registry.
func DefaultRegistry() *Registry { return defaultRegistry }

// Register adds impl for device type t; nil, a duplicate or a type
// mismatch is an error.
func (r *Registry) Register(t runtime.DeviceType, impl Impl) error {
	if impl == nil {
		return Errorf("Register", StatusInvalidArgument, "nil backend for device type %s", t)
	}
	if impl.Type() != t {
		return Errorf("Register", StatusInvalidArgument, "backend for device type %s reports type %s", t, impl.Type())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.impls[t]; dup {
		return Errorf("Register", StatusInvalidArgument, "a ccl backend for device type %s is already registered", t)
	}
	r.impls[t] = impl
	return nil
}

// Lookup returns the backend for t, or an error listing what is
// registered and hinting at a forgotten import.
func (r *Registry) Lookup(t runtime.DeviceType) (Impl, error) {
	r.mu.RLock()
	impl, ok := r.impls[t]
	r.mu.RUnlock()
	if ok {
		return impl, nil
	}
	var names []string
	for _, k := range r.Types() {
		names = append(names, k.String())
	}
	reg := strings.Join(names, ", ")
	if reg == "" {
		reg = "none"
	}
	hint := map[runtime.DeviceType]string{runtime.CPU: "ccl/local", runtime.CUDA: "ccl/nccl"}[t]
	if hint == "" {
		hint = "a ccl backend package"
	}
	return nil, Errorf("Lookup", StatusUnavailable, "no ccl backend registered for device type %s (registered: %s; forgotten import of github.com/trainscope/trainscope/%s?)", t, reg, hint)
}

// Types returns the registered device types, sorted.
func (r *Registry) Types() []runtime.DeviceType {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]runtime.DeviceType, 0, len(r.impls))
	for t := range r.impls {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Register adds impl to the process-wide registry.
func Register(t runtime.DeviceType, impl Impl) error { return defaultRegistry.Register(t, impl) }

// MustRegister is Register for a backend's init, where a duplicate is a
// build mistake; it panics with Register's error.
func MustRegister(t runtime.DeviceType, impl Impl) {
	if err := Register(t, impl); err != nil {
		panic(err)
	}
}

// Lookup returns the process-wide backend for t.
func Lookup(t runtime.DeviceType) (Impl, error) { return defaultRegistry.Lookup(t) }

// Available returns the initialised backend for t or says why it cannot
// be used here.
func Available(t runtime.DeviceType) (Impl, error) {
	impl, err := Lookup(t)
	if err != nil {
		return nil, err
	}
	if err := impl.Init(); err != nil {
		return nil, err
	}
	return impl, nil
}
