package ccl

import (
	"errors"
	"strings"

	"github.com/trainscope/trainscope/internal/registry"

	"github.com/trainscope/trainscope/runtime"
)

// Registry maps device types to CCL backends. Backends register into the
// process-wide registry from init; tests build their own.
type Registry struct {
	table *registry.Registry[runtime.DeviceType, Impl]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{table: registry.New[runtime.DeviceType, Impl]()} }

var defaultRegistry = NewRegistry()

// DefaultRegistry returns the process-wide registry.
func DefaultRegistry() *Registry { return defaultRegistry }

// Register adds impl for device type t; nil, a duplicate or a type
// mismatch is an error.
func (r *Registry) Register(t runtime.DeviceType, impl Impl) error {
	switch err := r.table.Add(t, impl); {
	case errors.Is(err, registry.ErrNil):
		return Errorf("Register", StatusInvalidArgument, "nil backend for device type %s", t)
	case errors.Is(err, registry.ErrMismatch):
		return Errorf("Register", StatusInvalidArgument, "backend for device type %s reports type %s", t, impl.Type())
	case errors.Is(err, registry.ErrDuplicate):
		return Errorf("Register", StatusInvalidArgument, "a ccl backend for device type %s is already registered", t)
	}
	return nil
}

// Lookup returns the backend for t, or an error listing what is
// registered and hinting at a forgotten import.
func (r *Registry) Lookup(t runtime.DeviceType) (Impl, error) {
	if impl, ok := r.table.Get(t); ok {
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
func (r *Registry) Types() []runtime.DeviceType { return r.table.Keys() }

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
