package registry

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"sync"
)

// Typed is a backend that says which key it serves.
type Typed[K any] interface{ Type() K }

// Errors Add returns.
var (
	ErrNil       = errors.New("nil backend")
	ErrMismatch  = errors.New("backend reports another type")
	ErrDuplicate = errors.New("a backend is already registered")
)

// Registry maps keys to backends; safe for concurrent use. The zero value
// is an empty registry.
type Registry[K cmp.Ordered, V Typed[K]] struct {
	mu sync.RWMutex
	m  map[K]V
}

// New returns an empty registry.
func New[K cmp.Ordered, V Typed[K]]() *Registry[K, V] {
	return &Registry[K, V]{m: make(map[K]V)}
}

// Add registers v for k; it refuses a nil v, a v whose Type is not k, and
// a second backend for k.
func (r *Registry[K, V]) Add(k K, v V) error {
	if isNil(v) {
		return ErrNil
	}
	if v.Type() != k {
		return ErrMismatch
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[k]; dup {
		return ErrDuplicate
	}
	if r.m == nil {
		r.m = make(map[K]V)
	}
	r.m[k] = v
	return nil
}

// Get returns the backend for k.
func (r *Registry[K, V]) Get(k K) (V, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.m[k]
	return v, ok
}

// Keys returns the registered keys, sorted.
func (r *Registry[K, V]) Keys() []K {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]K, 0, len(r.m))
	for k := range r.m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// isNil reports a nil interface or a typed nil pointer, map, slice, chan or
// func inside one, whose Type method would crash.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
