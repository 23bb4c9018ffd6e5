package registry_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/trainscope/trainscope/internal/registry"
)

type backend struct{ t int }

func (b *backend) Type() int { return b.t }

func TestAddGetKeys(t *testing.T) {
	r := registry.New[int, *backend]()
	if err := r.Add(1, nil); !errors.Is(err, registry.ErrNil) {
		t.Errorf("nil: %v", err)
	}
	if err := r.Add(1, &backend{t: 2}); !errors.Is(err, registry.ErrMismatch) {
		t.Errorf("mismatch: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Add(3, &backend{t: 3}) }()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, registry.ErrDuplicate) {
			t.Errorf("concurrent add: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent Adds of one key succeeded, want 1", ok)
	}
	_ = r.Add(1, &backend{t: 1})
	if got := r.Keys(); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("Keys = %v", got)
	}
	if _, found := r.Get(2); found {
		t.Error("Get found an unregistered key")
	}
	if b, found := r.Get(3); !found || b.t != 3 {
		t.Error("Get lost a key")
	}
}

// The zero Registry is an empty one: Add does not write to a nil map.
func TestZeroValueRegistry(t *testing.T) {
	var r registry.Registry[int, *backend]
	if _, found := r.Get(1); found {
		t.Error("Get found a key in the zero Registry")
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Add on the zero Registry panicked: %v", p)
			}
		}()
		if err := r.Add(1, &backend{t: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	if err := r.Add(1, &backend{t: 1}); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("second Add: %v", err)
	}
	if got := r.Keys(); !slices.Equal(got, []int{1}) {
		t.Errorf("Keys = %v", got)
	}
}
