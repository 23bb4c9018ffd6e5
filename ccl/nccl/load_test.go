package nccl_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/nccl"
	"github.com/trainscope/trainscope/runtime"
)

// These tests need no GPU.

func TestRegisteredForCUDA(t *testing.T) {
	impl, err := ccl.Lookup(runtime.CUDA)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := impl.(*nccl.Backend); !ok {
		t.Fatalf("registered backend is %T", impl)
	}
}

func TestMissingLibraryIsUnavailable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	for name, mk := range map[string]func(t *testing.T) *nccl.Backend{
		"option": func(t *testing.T) *nccl.Backend { return nccl.New(nccl.WithLibrary(missing)) },
		"environment": func(t *testing.T) *nccl.Backend {
			t.Setenv(nccl.EnvLibrary, missing)
			return nccl.New()
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			err := b.Init()
			if !errors.Is(err, ccl.StatusUnavailable) || !strings.Contains(err.Error(), missing) {
				t.Fatalf("Init: %v, want StatusUnavailable naming %s", err, missing)
			}
			// Nothing panics on a backend that did not load.
			if _, err := b.GetUniqueID(); err == nil {
				t.Error("GetUniqueID succeeded")
			}
			if _, err := b.CommInitAll([]runtime.Device{{Type: runtime.CUDA}}); err == nil {
				t.Error("CommInitAll succeeded")
			}
			if err := b.GroupStart(); err == nil {
				t.Error("GroupStart succeeded")
			}
			if err := b.GroupEnd(); err == nil {
				t.Error("GroupEnd without GroupStart succeeded")
			}
			if err := b.AllReduce(runtime.Buffer{}, runtime.Buffer{}, 0, runtime.Float32, ccl.Sum, nil, nil); err == nil {
				t.Error("AllReduce succeeded")
			}
			if err := b.GetAsyncError(nil); err == nil {
				t.Error("GetAsyncError(nil) succeeded")
			}
			if libs := b.Libraries(); libs != nil {
				t.Errorf("Libraries of a backend that did not load: %+v", libs)
			}
		})
	}
}

func TestWrongLibraryNamesMissingSymbols(t *testing.T) {
	b := nccl.New(nccl.WithLibrary("libc.so.6"))
	err := b.Init()
	if !errors.Is(err, ccl.StatusNotSupported) {
		t.Fatalf("Init: %v, want StatusNotSupported", err)
	}
	for _, want := range []string{"libc.so.6", "ncclGetVersion", "ncclCommInitRankConfig", "ncclAllReduce"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

func TestUniqueIDSize(t *testing.T) {
	id := nccl.New().NewUniqueID()
	if id.Size() != 128 || len(id.Data()) != 128 {
		t.Fatalf("size %d, data %d", id.Size(), len(id.Data()))
	}
	if err := id.Load(make([]byte, 16)); !errors.Is(err, ccl.StatusInvalidArgument) {
		t.Errorf("Load of 16 bytes: %v", err)
	}
	b := make([]byte, 128)
	b[0], b[127] = 7, 9
	if err := id.Load(b); err != nil {
		t.Fatal(err)
	}
	if d := id.Data(); d[0] != 7 || d[127] != 9 {
		t.Errorf("round trip lost bytes")
	}
	// The file exchange helpers carry it.
	dir := t.TempDir()
	if err := ccl.WriteUniqueID(dir, "x.id", id); err != nil {
		t.Fatal(err)
	}
	got := nccl.New().NewUniqueID()
	if err := ccl.ReadUniqueID(t.Context(), dir, "x.id", got); err != nil || got.Data()[127] != 9 {
		t.Fatalf("ReadUniqueID: %v", err)
	}
}
