package dl

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNotFound is wrapped by Open's error when no candidate loads.
var ErrNotFound = errors.New("no candidate library could be opened")

// Library is an opened native library. It stays open for the life of the
// process: the GPU libraries keep threads and driver state that make
// unloading them unsafe.
type Library struct {
	Path   string // the candidate that loaded, as given to dlopen
	handle uintptr
}

var (
	openMu sync.Mutex
	opened = map[string]*Library{} // by candidate, so a library is dlopened once
)

// Open returns the first of candidates that dlopen accepts. A candidate
// containing a glob metacharacter ('*') is expanded first, highest version
// first. tried lists each attempt with dlopen's reason, for the caller's
// error message; on failure the error wraps ErrNotFound and says the same.
func Open(candidates []string) (lib *Library, tried []string, err error) {
	return OpenWith(candidates, nil)
}

// Skip wraps the error with which an accept function of OpenWith passes
// over a library that loaded, for the next candidate.
func Skip(err error) error { return &skipError{err} }

type skipError struct{ err error }

func (e *skipError) Error() string { return e.err.Error() }
func (e *skipError) Unwrap() error { return e.err }

// OpenWith is Open that hands each library that loads to accept, when
// accept is not nil: nil keeps the library, an error made by Skip goes on
// to the next candidate (noted in tried with that error), and any other
// error ends the search with it. accept runs without Open's lock held.
// Where every library that loaded was skipped, the error is the last one
// accept gave, unwrapped from Skip; where none loaded, it wraps
// ErrNotFound. A skipped library stays loaded: see Library.
func OpenWith(candidates []string, accept func(*Library) error) (lib *Library, tried []string, err error) {
	var skipped error
	for _, c := range expand(candidates) {
		l, reason := open(c)
		if l == nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", c, reason))
			continue
		}
		if accept == nil {
			return l, tried, nil
		}
		err := accept(l)
		var skip *skipError
		if errors.As(err, &skip) {
			skipped = skip.err
			tried = append(tried, fmt.Sprintf("%s (%s)", c, skip.err))
			continue
		}
		if err != nil {
			return nil, tried, err
		}
		return l, tried, nil
	}
	if skipped != nil {
		return nil, tried, skipped
	}
	if len(tried) == 0 {
		tried = append(tried, "no candidates")
	}
	return nil, tried, fmt.Errorf("%w: tried %s", ErrNotFound, strings.Join(tried, "; "))
}

// open dlopens the candidate c once, or returns dlerror's reason.
func open(c string) (*Library, string) {
	openMu.Lock()
	defer openMu.Unlock()
	if l, ok := opened[c]; ok {
		return l, ""
	}
	h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, shorten(err.Error())
	}
	l := &Library{Path: c, handle: h}
	opened[c] = l
	return l, ""
}

// OpenLocal dlopens the library at path with its symbols kept to itself
// (RTLD_LOCAL), for a library that defines the same symbols as another
// one the process loads — a test's stub of libnccl — whose definitions
// must not take the place of the other's: opened with RTLD_GLOBAL, a
// stub's ncclGetErrorString and friends became what the real libnccl,
// opened later, called inside itself, and its communicators failed with
// ncclInternalError. It is not cached; each call opens path afresh.
func OpenLocal(path string) (*Library, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s)", ErrNotFound, path, shorten(err.Error()))
	}
	return &Library{Path: path, handle: h}, nil
}

// expand replaces glob patterns by the files they match, highest version
// first (compareVersions), so that libfoo.so.13 comes before libfoo.so.9
// and libfoo.so.
func expand(candidates []string) []string {
	var out []string
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if !strings.ContainsAny(c, "*?[") {
			out = append(out, c)
			continue
		}
		m, _ := filepath.Glob(c)
		slices.SortFunc(m, func(a, b string) int { return compareVersions(b, a) })
		if len(m) == 0 {
			out = append(out, c) // reported as tried
		}
		out = append(out, m...)
	}
	return out
}

// compareVersions orders file names as versions: runs of digits compare
// as numbers (libfoo.so.9 < libfoo.so.13, libfoo.so.12.4 < libfoo.so.12.10),
// everything else byte by byte, and a name that is a prefix of another
// comes first (libfoo.so < libfoo.so.1). It returns -1, 0 or +1.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, ra := digits(a)
			nb, rb := digits(b)
			// Leading zeros do not count; then the longer number is
			// the larger one, and numbers of one length compare as text.
			ta, tb := strings.TrimLeft(na, "0"), strings.TrimLeft(nb, "0")
			if c := cmp.Compare(len(ta), len(tb)); c != 0 {
				return c
			}
			if c := strings.Compare(ta, tb); c != 0 {
				return c
			}
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digits splits s after its leading run of digits.
func digits(s string) (run, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// shorten keeps dlerror's message readable: it repeats the path.
func shorten(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// Lookup returns the address of the first of names the library exports.
func (l *Library) Lookup(names ...string) (uintptr, error) {
	for _, n := range names {
		if p, err := purego.Dlsym(l.handle, n); err == nil && p != 0 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("symbol %s not found in %s", strings.Join(names, " or "), l.Path)
}

// Binder looks up many symbols and collects the missing ones, so that a
// wrong library is reported once with everything it lacks.
type Binder struct {
	lib     *Library
	missing []string
}

// NewBinder binds symbols of lib.
func NewBinder(lib *Library) *Binder { return &Binder{lib: lib} }

// Sym stores the address of the first of names that exists in *dst, or
// notes the symbol as missing.
func (b *Binder) Sym(dst *uintptr, names ...string) {
	p, err := b.lib.Lookup(names...)
	if err != nil {
		b.missing = append(b.missing, names[0])
		return
	}
	*dst = p
}

// Optional stores the address of the first of names that exists, leaving
// *dst zero when none does.
func (b *Binder) Optional(dst *uintptr, names ...string) {
	if p, err := b.lib.Lookup(names...); err == nil {
		*dst = p
	}
}

// Func binds a C function to the Go function pointer fptr with
// purego.RegisterFunc, for the few calls whose arguments Call cannot pass
// (a struct by value). The symbol is looked up first, so a missing one is
// noted rather than a panic.
func (b *Binder) Func(fptr any, name string) {
	p, err := b.lib.Lookup(name)
	if err != nil {
		b.missing = append(b.missing, name)
		return
	}
	defer func() {
		// RegisterFunc panics where purego cannot pass the signature on
		// this platform; that is a missing capability, not a crash.
		if r := recover(); r != nil {
			b.missing = append(b.missing, fmt.Sprintf("%s (%v)", name, r))
		}
	}()
	purego.RegisterFunc(fptr, p)
}

// Err returns an error naming every missing symbol, or nil.
func (b *Binder) Err() error {
	if len(b.missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s lacks %d required symbol(s): %s (is it the right library, and recent enough?)",
		b.lib.Path, len(b.missing), strings.Join(b.missing, ", "))
}

// MaxArgs is the most arguments one Call passes: as many as purego can
// pass to a C function on the 64-bit platforms it supports
// (purego.SyscallN's own limit), so that a Frame holds every argument of
// any call that can be made at all. A call with more is not cut short:
// it reaches purego.SyscallN whole, which refuses it (it panics) rather
// than calling the function with arguments missing.
const MaxArgs = 32

// Frame holds one call's arguments and the memory its out-parameters are
// written to. Frames come from a pool and live on the heap, so the
// addresses of Out stay valid across the call. Take one with Get and give
// it back with Put once the outputs are read.
type Frame struct {
	args [MaxArgs]uintptr
	// Out is scratch memory for out-parameters (an int, a handle, a
	// float); OutPtr(i) is the address to pass.
	Out [4]uint64
	// Params is an array of pointers, for APIs that take one (a kernel's
	// parameter list: Params[i] = OutPtr(i)).
	Params [4]uintptr
	// Buf is larger scratch memory, for strings the C side fills.
	Buf [256]byte
}

var frames = sync.Pool{New: func() any { return new(Frame) }}

// Get returns a frame with zeroed outputs.
func Get() *Frame {
	f := frames.Get().(*Frame)
	f.Out = [4]uint64{}
	return f
}

// Put returns f to the pool.
func (f *Frame) Put() { frames.Put(f) }

// OutPtr is the address of Out[i], to pass as an out-parameter.
func (f *Frame) OutPtr(i int) uintptr { return uintptr(unsafe.Pointer(&f.Out[i])) }

// ParamsPtr is the address of Params.
func (f *Frame) ParamsPtr() uintptr { return uintptr(unsafe.Pointer(&f.Params[0])) }

// BufPtr is the address of Buf.
func (f *Frame) BufPtr() uintptr { return uintptr(unsafe.Pointer(&f.Buf[0])) }

// Call calls the C function at fn with integer or pointer arguments and
// returns its integer result (rax). It allocates nothing for up to
// MaxArgs arguments; see MaxArgs for more. Pointers in args must point to
// memory that does not move during the call: the heap (a Frame's Out, a
// Go heap object kept alive by the caller) or C memory.
func (f *Frame) Call(fn uintptr, args ...uintptr) uintptr {
	if len(args) > len(f.args) {
		return callMany(fn, args)
	}
	n := copy(f.args[:], args)
	r, _, _ := purego.SyscallN(fn, f.args[:n]...)
	return r
}

// Call is Frame.Call for functions without out-parameters; it takes a
// pooled frame for the duration of the call.
func Call(fn uintptr, args ...uintptr) uintptr {
	if len(args) > MaxArgs {
		return callMany(fn, args)
	}
	f := frames.Get().(*Frame)
	n := copy(f.args[:], args)
	r, _, _ := purego.SyscallN(fn, f.args[:n]...)
	frames.Put(f)
	return r
}

// callMany hands a call with more arguments than a Frame holds to
// purego.SyscallN whole, a copy of them on the heap so that the callers'
// argument lists need not escape. purego refuses more arguments than it
// can pass; a later purego that can pass more calls fn with all of them.
func callMany(fn uintptr, args []uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, slices.Clone(args)...)
	return r
}

// GoString copies the NUL-terminated C string at p; "" for a nil p.
func GoString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// Read through a pointer-to-pointer so that vet sees no uintptr to
	// unsafe.Pointer conversion: p is C memory, which the GC ignores.
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

// CString returns s as a NUL-terminated byte slice; pass &b[0] and keep b
// alive across the call.
func CString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// BufString returns the NUL-terminated string at the start of f.Buf.
func (f *Frame) BufString() string {
	n := 0
	for n < len(f.Buf) && f.Buf[n] != 0 {
		n++
	}
	return string(f.Buf[:n])
}

// mapsFile lists the process's memory mappings with the files they map
// (Linux's proc(5)).
const mapsFile = "/proc/self/maps"

// File returns the file the library was loaded from, as the process maps
// it: the path dlopen resolved the candidate to (libnccl.so.2 found
// through the loader's search is /usr/lib/x86_64-linux-gnu/libnccl.so.2,
// or a Python environment's copy), told by the mapping that holds symbol.
// Where the system does not say, or symbol is not the library's, it
// returns Path.
func (l *Library) File(symbol string) string {
	p, err := l.Lookup(symbol)
	if err != nil {
		return l.Path
	}
	if f := mappedFile(mapsFile, p); f != "" {
		return f
	}
	return l.Path
}

// mappedFile returns the file of the mapping in the maps file at path
// that holds addr; "" where none does or it maps no file.
func mappedFile(path string, addr uintptr) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode pathname
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || uint64(addr) < start || uint64(addr) >= end {
			continue
		}
		if file := strings.Join(fields[5:], " "); strings.HasPrefix(file, "/") {
			return file
		}
		return ""
	}
	return ""
}
