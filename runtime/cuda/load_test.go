package cuda_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda"
)

// These tests need no GPU: they check how the backend reports what it
// cannot load.

func TestRegisteredForCUDA(t *testing.T) {
	impl, err := runtime.Lookup(runtime.CUDA)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := impl.(*cuda.Impl); !ok {
		t.Fatalf("registered backend is %T", impl)
	}
}

func TestMissingLibraryIsUnavailable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcudart.so.99")
	cases := []struct {
		name string
		impl func(t *testing.T) *cuda.Impl
	}{
		{"option", func(t *testing.T) *cuda.Impl { return cuda.New(cuda.WithLibrary(missing)) }},
		{"environment", func(t *testing.T) *cuda.Impl {
			t.Setenv(cuda.EnvCudartLib, missing)
			return cuda.New()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			impl := tc.impl(t)
			err := impl.Init()
			if !errors.Is(err, runtime.StatusUnavailable) {
				t.Fatalf("Init: %v, want an error wrapping StatusUnavailable", err)
			}
			// An explicit path is the only one tried, and it is named.
			if msg := err.Error(); !strings.Contains(msg, missing) || strings.Contains(msg, "libcudart.so.13") {
				t.Errorf("error does not name exactly the path tried: %v", err)
			}
			// The result is kept, and every method reports it instead of
			// crashing.
			if err2 := impl.Init(); err2 != err {
				t.Errorf("second Init: %v, want the first result", err2)
			}
			if _, err := impl.DeviceCount(); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("DeviceCount: %v", err)
			}
			if _, err := impl.StreamCreate(0, 0); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("StreamCreate: %v", err)
			}
			if _, err := impl.Malloc(0, 1); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("Malloc: %v", err)
			}
			if _, err := impl.MemoryStats(0); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("MemoryStats: %v", err)
			}
			if _, err := impl.DeviceName(0); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("DeviceName: %v", err)
			}
			if n, err := impl.DeviceTotalMemory(0); !errors.Is(err, runtime.StatusUnavailable) || n != 0 {
				t.Errorf("DeviceTotalMemory: %d, %v", n, err)
			}
			if mem, err := impl.DeviceMemory(0); !errors.Is(err, runtime.StatusUnavailable) || mem != (runtime.DeviceMemory{}) {
				t.Errorf("DeviceMemory: %+v, %v", mem, err)
			}
			if err := impl.SetDevice(0); !errors.Is(err, runtime.StatusUnavailable) {
				t.Errorf("SetDevice: %v", err)
			}
		})
	}
}

// A library that loads but is not libcudart (the C library here) is
// refused with the symbols it lacks, not a crash.
func TestWrongLibraryNamesMissingSymbols(t *testing.T) {
	impl := cuda.New(cuda.WithLibrary("libc.so.6"))
	err := impl.Init()
	if !errors.Is(err, runtime.StatusNotSupported) {
		t.Fatalf("Init: %v, want an error wrapping StatusNotSupported", err)
	}
	for _, want := range []string{"libc.so.6", "cudaRuntimeGetVersion", "cudaEventRecord", "cudaMalloc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if _, err := impl.EventCreate(0, runtime.EventDefault); err == nil {
		t.Error("EventCreate succeeded on a wrong library")
	}
}

// The default search, on a machine without CUDA, lists every place it
// looked; with CUDA it succeeds.
func TestDefaultSearch(t *testing.T) {
	t.Setenv(cuda.EnvCudartLib, "")
	impl := cuda.New()
	err := impl.Init()
	if err == nil {
		t.Logf("CUDA present: %s", impl.LibraryPath())
		return
	}
	if errors.Is(err, runtime.StatusUnavailable) && strings.Contains(err.Error(), "libcudart not found") {
		for _, want := range []string{"libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not list %q: %v", want, err)
			}
		}
		return
	}
	if !errors.Is(err, runtime.StatusUnavailable) {
		t.Fatalf("Init: %v, want success or StatusUnavailable", err)
	}
	t.Logf("library found, no usable GPU: %v", err)
}
