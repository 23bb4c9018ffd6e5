package runtime

import (
	"errors"
	"reflect"
	"strings"

	"github.com/trainscope/trainscope/internal/registry"
)

// Registry maps device types to backends. Most code uses the process-wide
// registry through Register and Lookup; tests build their own with
// NewRegistry.
type Registry struct {
	table *registry.Registry[DeviceType, Impl]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{table: registry.New[DeviceType, Impl]()} }

var defaultRegistry = NewRegistry()

// DefaultRegistry returns the process-wide registry that backends register
// into from init.
func DefaultRegistry() *Registry { return defaultRegistry }

// Register adds impl for device type t. It is an error to register nil, to
// register a type twice, or to register an impl whose Type is not t.
func (r *Registry) Register(t DeviceType, impl Impl) error {
	if r == nil || r.table == nil {
		return Errorf("Register", StatusInvalidArgument, "registry not made by NewRegistry")
	}
	switch err := r.table.Add(t, impl); {
	case errors.Is(err, registry.ErrNil):
		return Errorf("Register", StatusInvalidArgument, "nil backend for device type %s", t)
	case errors.Is(err, registry.ErrMismatch):
		return Errorf("Register", StatusInvalidArgument, "backend for device type %s reports type %s", t, impl.Type())
	case errors.Is(err, registry.ErrDuplicate):
		return Errorf("Register", StatusAlreadyExists, "a backend for device type %s is already registered", t)
	}
	return nil
}

// Lookup returns the backend for t. The error for an unregistered type
// lists what is registered and hints at the missing import.
func (r *Registry) Lookup(t DeviceType) (Impl, error) {
	if r != nil && r.table != nil {
		if impl, ok := r.table.Get(t); ok {
			return impl, nil
		}
	}
	if int(t) < 0 || int(t) >= len(deviceTypeNames) {
		// No backend package exists to import.
		return nil, Errorf("Lookup", StatusUnavailable, "no backend registered for %s (registered: %s)", t, typeList(r.Types()))
	}
	return nil, Errorf("Lookup", StatusUnavailable,
		"no backend registered for device type %s (registered: %s; forgotten import of github.com/trainscope/trainscope/runtime/%s?)", t, typeList(r.Types()), t)
}

// Types returns the registered device types, sorted.
func (r *Registry) Types() []DeviceType {
	if r == nil || r.table == nil {
		return nil
	}
	return r.table.Keys()
}

// isNilImpl reports a nil Impl, or a nil pointer (map, func…) inside one,
// whose methods would crash.
func isNilImpl(impl Impl) bool {
	if impl == nil {
		return true
	}
	switch v := reflect.ValueOf(impl); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// typeList writes device types as "cpu, cuda", or "none".
func typeList(ts []DeviceType) string {
	if len(ts) == 0 {
		return "none"
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// Register adds impl to the process-wide registry.
func Register(t DeviceType, impl Impl) error { return defaultRegistry.Register(t, impl) }

// MustRegister is Register for a backend's init function, where a duplicate
// is a build mistake (two packages claiming one device type); it panics
// with Register's error.
func MustRegister(t DeviceType, impl Impl) {
	if err := Register(t, impl); err != nil {
		panic(err)
	}
}

// Lookup returns the process-wide backend for t.
func Lookup(t DeviceType) (Impl, error) { return defaultRegistry.Lookup(t) }

// Types lists the device types in the process-wide registry.
func Types() []DeviceType { return defaultRegistry.Types() }

// Available returns the initialised backend for t, or an error saying why
// it cannot be used here (not registered, or Init failed).
func Available(t DeviceType) (Impl, error) {
	impl, err := Lookup(t)
	if err != nil {
		return nil, err
	}
	if err := impl.Init(); err != nil {
		return nil, err
	}
	return impl, nil
}
