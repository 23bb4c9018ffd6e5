package ccl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
)

// TestDefaultRegistry: importing ccl/local registers it for runtime.CPU,
// and a second registration is a build mistake that panics.
func TestDefaultRegistry(t *testing.T) {
	impl, err := ccl.Available(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := impl.(*local.Backend); !ok {
		t.Errorf("cpu backend is %T", impl)
	}
	if _, err := ccl.Lookup(runtime.CUDA); !errors.Is(err, ccl.StatusUnavailable) || !strings.Contains(err.Error(), "registered: cpu;") {
		t.Errorf("Lookup(cuda): %v", err)
	}
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, ccl.StatusInvalidArgument) || !strings.Contains(err.Error(), "already registered") {
			t.Errorf("MustRegister of a duplicate: recovered %v", err)
		}
	}()
	ccl.MustRegister(runtime.CPU, local.New())
	t.Error("MustRegister of a duplicate did not panic")
}
