package dl_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

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

// seen records the arguments of the last call of the 32-argument callback.
var (
	seenOnce sync.Once
	seenFn   uintptr
	seen     [32]uintptr
)

func recorder() uintptr {
	seenOnce.Do(func() {
		seenFn = purego.NewCallback(func(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
			a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32 uintptr) uintptr {
			seen = [32]uintptr{a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16,
				a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32}
			return a32
		})
	})
	return seenFn
}

// Every argument of a call reaches the C side, up to the most that can
// be passed (32): none beyond the 20th is dropped.
func TestCallPassesEveryArgument(t *testing.T) {
	if dl.MaxArgs != 32 {
		t.Fatalf("MaxArgs = %d, want 32, purego's limit", dl.MaxArgs)
	}
	fn := recorder()
	var args [32]uintptr
	for i := range args {
		args[i] = uintptr(1000 + i)
	}
	for name, call := range map[string]func() uintptr{
		"Frame.Call": func() uintptr {
			f := dl.Get()
			defer f.Put()
			return f.Call(fn, args[:]...)
		},
		"Call": func() uintptr { return dl.Call(fn, args[:]...) },
	} {
		seen = [32]uintptr{}
		if r := call(); r != 1031 {
			t.Errorf("%s: result %d, want the 32nd argument, 1031", name, r)
		}
		for i, v := range seen {
			if v != uintptr(1000+i) {
				t.Errorf("%s: argument %d arrived as %d, want %d", name, i+1, v, 1000+i)
			}
		}
	}
	// labs reads its first argument; the C calling convention lets the
	// caller pass more. (The Go callback above allocates by itself.)
	lib, _, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Fatal(err)
	}
	labs, err := lib.Lookup("labs")
	if err != nil {
		t.Fatal(err)
	}
	args[0] = ^uintptr(6)
	f := dl.Get()
	defer f.Put()
	var r uintptr
	if n := testing.AllocsPerRun(100, func() { r = f.Call(labs, args[:]...) }); n != 0 || r != 7 {
		t.Errorf("a call with 32 arguments allocates %v times, result %d", n, r)
	}
}

// A call with more arguments than can be passed is refused, not made with
// some of them missing.
func TestCallBeyondMaxArgsIsRefused(t *testing.T) {
	fn := recorder()
	args := make([]uintptr, dl.MaxArgs+1)
	for i := range args {
		args[i] = uintptr(2000 + i)
	}
	for name, call := range map[string]func(){
		"Frame.Call": func() {
			f := dl.Get()
			defer f.Put()
			f.Call(fn, args...)
		},
		"Call": func() { dl.Call(fn, args...) },
	} {
		seen = [32]uintptr{}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with %d arguments was made", name, len(args))
				}
			}()
			call()
		}()
		if seen != ([32]uintptr{}) {
			t.Errorf("%s with %d arguments reached the function with %v", name, len(args), seen)
		}
	}
}

// OpenWith goes past a library its accept function skips, and returns the
// skipping error where nothing else is accepted.
func TestOpenWithSkips(t *testing.T) {
	asked := []string{}
	errOld := errors.New("too old")
	accept := func(l *dl.Library) error {
		asked = append(asked, l.Path)
		if l.Path == "libc.so.6" {
			return dl.Skip(errOld)
		}
		return nil
	}
	lib, tried, err := dl.OpenWith([]string{"libc.so.6", "/nonexistent/liby.so", "libm.so.6"}, accept)
	if err != nil {
		t.Fatal(err)
	}
	if lib.Path != "libm.so.6" || !slices.Equal(asked, []string{"libc.so.6", "libm.so.6"}) || len(tried) != 2 ||
		!strings.Contains(tried[0], "libc.so.6 (too old)") || !strings.Contains(tried[1], "/nonexistent/liby.so") {
		t.Errorf("lib %q, asked %v, tried %q", lib.Path, asked, tried)
	}
	asked = nil
	_, tried, err = dl.OpenWith([]string{"libc.so.6", "/nonexistent/liby.so"}, accept)
	if err != errOld || len(tried) != 2 {
		t.Errorf("only a skipped library: err %v, tried %q; want %v", err, tried, errOld)
	}
	// Any other error ends the search.
	errBad := errors.New("unusable")
	asked = nil
	_, _, err = dl.OpenWith([]string{"libc.so.6", "libm.so.6"}, func(l *dl.Library) error {
		asked = append(asked, l.Path)
		return errBad
	})
	if err != errBad || !slices.Equal(asked, []string{"libc.so.6"}) {
		t.Errorf("err %v, asked %v; want %v after libc.so.6 alone", err, asked, errBad)
	}
}

// File is the library's file as the process maps it: libc.so.6, found
// through the loader's search, resolves to an absolute path of a file
// that is there; a symbol the library lacks leaves the name given.
func TestFile(t *testing.T) {
	lib, _, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Skipf("skipped: no libc.so.6 to open: %v", err)
	}
	f := lib.File("malloc")
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		if f != "libc.so.6" {
			t.Errorf("without /proc/self/maps: %q, want the name given", f)
		}
		t.Skipf("skipped the rest: the system has no /proc/self/maps (%v)", err)
	}
	if !filepath.IsAbs(f) || !strings.HasPrefix(filepath.Base(f), "libc") {
		t.Errorf("File(malloc) = %q, want an absolute path to libc", f)
	}
	if _, err := os.Stat(f); err != nil {
		t.Errorf("File(malloc) = %q: %v", f, err)
	}
	if got := lib.File("no_such_symbol_here"); got != "libc.so.6" {
		t.Errorf("File of a missing symbol = %q, want the name given", got)
	}
}
