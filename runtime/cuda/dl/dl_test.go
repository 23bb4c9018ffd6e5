package dl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

func TestOpenFirstThatLoads(t *testing.T) {
	lib, tried, err := dl.Open([]string{"/nonexistent/libx.so", "libc.so.6"})
	if err != nil {
		t.Fatal(err)
	}
	if lib.Path != "libc.so.6" || len(tried) != 1 || !strings.Contains(tried[0], "/nonexistent/libx.so") {
		t.Errorf("lib %q, tried %v", lib.Path, tried)
	}
}

func TestOpenNoneLoads(t *testing.T) {
	_, tried, err := dl.Open([]string{"/nonexistent/a.so", "/nonexistent/dir/b.so*"})
	if !errors.Is(err, dl.ErrNotFound) || len(tried) != 2 {
		t.Fatalf("err %v, tried %v", err, tried)
	}
	for _, p := range []string{"/nonexistent/a.so", "/nonexistent/dir/b.so*"} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not name %s: %v", p, err)
		}
	}
}

func TestBinderCollectsMissingSymbols(t *testing.T) {
	lib, _, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Fatal(err)
	}
	b := dl.NewBinder(lib)
	var strlen, a, c uintptr
	b.Sym(&strlen, "strlen")
	b.Sym(&a, "cudaNoSuchThing")
	b.Sym(&c, "ncclNoSuchThing_v2", "ncclNoSuchThing")
	err = b.Err()
	if err == nil || !strings.Contains(err.Error(), "cudaNoSuchThing") || !strings.Contains(err.Error(), "ncclNoSuchThing_v2") {
		t.Fatalf("Err() = %v", err)
	}
	if strlen == 0 || a != 0 {
		t.Errorf("strlen %#x, missing %#x", strlen, a)
	}
	// A call through the frame: strlen of a C string.
	s := dl.CString("trainscope")
	f := dl.Get()
	defer f.Put()
	copy(f.Buf[:], s)
	if n := f.Call(strlen, f.BufPtr()); n != 10 {
		t.Errorf("strlen = %d", n)
	}
	if got := dl.GoString(f.BufPtr()); got != "trainscope" {
		t.Errorf("GoString = %q", got)
	}
}

func TestCallAllocatesNothing(t *testing.T) {
	lib, _, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Fatal(err)
	}
	labs, err := lib.Lookup("labs")
	if err != nil {
		t.Fatal(err)
	}
	var r uintptr
	if n := testing.AllocsPerRun(1000, func() { r = dl.Call(labs, ^uintptr(4)) }); n != 0 {
		t.Errorf("Call allocates %v times", n)
	}
	if r != 5 {
		t.Errorf("labs(-5) = %d", r)
	}
}
