package ccl

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(runtime.CPU, nil); !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), "nil backend") {
		t.Errorf("nil: %v", err)
	}
	if err := r.Register(runtime.CPU, &fakeImpl{typ: runtime.CUDA}); !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), "reports type cuda") {
		t.Errorf("type mismatch: %v", err)
	}
	cpuImpl := &fakeImpl{typ: runtime.CPU}
	if err := r.Register(runtime.CPU, cpuImpl); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(runtime.CPU, &fakeImpl{typ: runtime.CPU}); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate: %v", err)
	}
	got, err := r.Lookup(runtime.CPU)
	if err != nil || got != Impl(cpuImpl) {
		t.Errorf("Lookup(cpu) = %v, %v", got, err)
	}
	_, err = r.Lookup(runtime.CUDA)
	if !errors.Is(err, StatusUnavailable) {
		t.Errorf("unknown type: %v", err)
	}
	for _, s := range []string{"cuda", "registered: cpu", "forgotten import", "trainscope/ccl/nccl"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if _, err := NewRegistry().Lookup(runtime.CPU); err == nil || !strings.Contains(err.Error(), "registered: none") || !strings.Contains(err.Error(), "ccl/local") {
		t.Errorf("empty registry: %v", err)
	}
	if err := r.Register(runtime.CUDA, &fakeImpl{typ: runtime.CUDA}); err != nil {
		t.Fatal(err)
	}
	if got := r.Types(); !slices.Equal(got, []runtime.DeviceType{runtime.CPU, runtime.CUDA}) {
		t.Errorf("Types = %v", got)
	}
}
