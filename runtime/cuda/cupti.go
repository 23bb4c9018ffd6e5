package cuda

import (
	"encoding/binary"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// EnvCuptiLib names the libcupti to open for activity traces.
const EnvCuptiLib = "TRAINSCOPE_CUPTI_LIB"

// CUPTI's activity kinds and external correlation kind used here
// (cupti_activity.h).
const (
	cuptiKindMemcpy           = 1
	cuptiKindMemset           = 2
	cuptiKindDriver           = 4
	cuptiKindConcurrentKernel = 10
	cuptiKindExternalCorr     = 39
	cuptiExternalCustom0      = 3
)

// ActivityKind says what device work an Activity is.
type ActivityKind uint8

// Activity kinds.
const (
	ActivityKernel ActivityKind = iota + 1
	ActivityMemcpy
	ActivityMemset
)

func (k ActivityKind) String() string {
	switch k {
	case ActivityKernel:
		return "kernel"
	case ActivityMemcpy:
		return "memcpy"
	case ActivityMemset:
		return "memset"
	}
	return fmt.Sprintf("ActivityKind(%d)", uint8(k))
}

// Activity is one piece of device work as CUPTI reports it once done: its
// start and end on the GPU in CUPTI's clock (nanoseconds; ActivityTrace.Now
// reads the same clock on the host), and what launched it.
type Activity struct {
	Kind        ActivityKind
	Device      uint32
	Stream      uint32 // CUPTI's stream id
	Correlation uint32 // the launching API call's correlation id
	Start, End  uint64
	// Queued is when the launch entered the command buffer, in the same
	// clock; kernels only, with ActivityOptions.Queued, else 0.
	Queued uint64
	Bytes  uint64 // memcpy and memset
}

// ActivityOptions choose what an activity trace records besides kernels,
// copies and memsets.
type ActivityOptions struct {
	// Queued asks for each kernel's enqueue time (CUPTI's latency
	// timestamps).
	Queued bool
	// External records which pushed id (ActivityTrace.Push) was current
	// when each launch was made; it turns on CUPTI's driver API records,
	// which the correlation needs.
	External bool
}

// cupti holds the libcupti entry points of the activity API.
type cupti struct {
	lib                                  *dl.Library
	registerCallbacks, enable, disable   uintptr
	flushAll, getNextRecord, timestamp   uintptr
	pushExternal, popExternal            uintptr
	enableLatency, getResultString       uintptr
	numDropped, streamID                 uintptr
	requestedCallback, completedCallback uintptr
}

var (
	cuptiOnce sync.Once
	cuptiAPI  *cupti
	cuptiErr  error
	// active is the one trace CUPTI's callbacks deliver to: CUPTI's
	// activity API is process-wide.
	active atomic.Pointer[ActivityTrace]
)

// cuptiCandidates are the libcupti names tried, in order, for a CUDA
// runtime of the given major version (0: unknown): that major's first, so
// that a runtime that fell back to an older major (the driver being too
// old for the newer) gets the CUPTI that works with it.
func cuptiCandidates(major int) []string {
	names := []string{"libcupti.so.13", "libcupti.so.12", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*"}
	if major > 0 {
		names = append([]string{fmt.Sprintf("libcupti.so.%d", major)}, slices.DeleteFunc(names, func(n string) bool {
			return n == fmt.Sprintf("libcupti.so.%d", major)
		})...)
	}
	return candidates("", EnvCuptiLib, names...)
}

// loadCupti opens libcupti once per process, for the first runtime that
// asks (of the given major version).
func loadCupti(major int) (*cupti, error) {
	cuptiOnce.Do(func() {
		lib, _, err := dl.Open(cuptiCandidates(major))
		if err != nil {
			cuptiErr = &runtime.Error{Op: "ActivityTrace", Status: runtime.StatusUnavailable,
				Detail: "CUPTI (libcupti) not found; set " + EnvCuptiLib + " to its path", Err: err}
			return
		}
		a := &cupti{lib: lib}
		b := dl.NewBinder(lib)
		b.Sym(&a.registerCallbacks, "cuptiActivityRegisterCallbacks")
		b.Sym(&a.enable, "cuptiActivityEnable")
		b.Sym(&a.disable, "cuptiActivityDisable")
		b.Sym(&a.flushAll, "cuptiActivityFlushAll")
		b.Sym(&a.getNextRecord, "cuptiActivityGetNextRecord")
		b.Sym(&a.timestamp, "cuptiGetTimestamp")
		b.Sym(&a.pushExternal, "cuptiActivityPushExternalCorrelationId")
		b.Sym(&a.popExternal, "cuptiActivityPopExternalCorrelationId")
		b.Sym(&a.enableLatency, "cuptiActivityEnableLatencyTimestamps")
		b.Sym(&a.numDropped, "cuptiActivityGetNumDroppedRecords")
		b.Optional(&a.getResultString, "cuptiGetResultString")
		b.Optional(&a.streamID, "cuptiGetStreamIdEx")
		if err := b.Err(); err != nil {
			cuptiErr = &runtime.Error{Op: "ActivityTrace", Status: runtime.StatusNotSupported, Detail: "CUPTI unusable", Err: err}
			return
		}
		a.requestedCallback = purego.NewCallback(bufferRequested)
		a.completedCallback = purego.NewCallback(bufferCompleted)
		if rc := dl.Call(a.registerCallbacks, a.requestedCallback, a.completedCallback); rc != 0 {
			cuptiErr = a.err("cuptiActivityRegisterCallbacks", rc)
			return
		}
		cuptiAPI = a
	})
	return cuptiAPI, cuptiErr
}

func (a *cupti) err(call string, rc uintptr) error {
	msg := ""
	if a.getResultString != 0 {
		f := dl.Get()
		if dl.Call(a.getResultString, rc, f.OutPtr(0)) == 0 {
			msg = dl.GoString(uintptr(f.Out[0]))
		}
		f.Put()
	}
	return runtime.Errorf("ActivityTrace", runtime.StatusError, "%s: CUPTI error %d %s", call, rc, msg)
}

// activityBuffer is the size of each buffer lent to CUPTI. CUPTI hands a
// buffer back once full, or at a flush that finds every record in it
// complete: on a GPU that is never idle, only once full. A quarter of a
// MiB (about a thousand kernel records) keeps that within a fraction of
// a second at the rates training launches kernels, so that a profiler
// timing ranges from the records resolves them soon.
const activityBuffer = 256 << 10

// ActivityTrace collects CUPTI's activity records of kernels, copies and
// memsets: device timestamps of every piece of work, taken without putting
// anything in the streams. Only one trace runs at a time in a process.
type ActivityTrace struct {
	api  *cupti
	opts ActivityOptions

	mu   sync.Mutex
	free [][]byte
	// filled are the buffers CUPTI handed back, not yet decoded: a
	// buffer that fills is handed back on the thread whose launch needed
	// room (through bufferCompleted), so decoding waits for the next
	// flush, off that thread.
	filled   []filledBuffer
	done     []Activity
	external map[uint32]uint64 // correlation id → pushed id
	dropped  uint64            // records CUPTI lost (its own count)
	records  uint64
	// unfinished counts records of work not done when flushed: no times.
	unfinished uint64
}

// StartActivityTrace turns on CUPTI's activity records for kernels,
// copies and memsets (and what opts adds). It fails, wrapping
// runtime.StatusUnavailable, where libcupti cannot be found, and while
// another trace runs.
func (m *Impl) StartActivityTrace(opts ActivityOptions) (*ActivityTrace, error) {
	if err := m.ready("ActivityTrace"); err != nil {
		return nil, err
	}
	a, err := loadCupti(m.runtimeVersion / 1000)
	if err != nil {
		return nil, err
	}
	t := &ActivityTrace{api: a, opts: opts, external: map[uint32]uint64{}}
	if !active.CompareAndSwap(nil, t) {
		return nil, runtime.Errorf("ActivityTrace", runtime.StatusAlreadyExists, "an activity trace is already running in this process")
	}
	if opts.Queued {
		if rc := dl.Call(a.enableLatency, 1); rc != 0 {
			active.Store(nil)
			return nil, a.err("cuptiActivityEnableLatencyTimestamps", rc)
		}
	}
	for _, k := range t.kinds() {
		if rc := dl.Call(a.enable, uintptr(k)); rc != 0 {
			_ = t.Stop()
			return nil, a.err(fmt.Sprintf("cuptiActivityEnable(%d)", k), rc)
		}
	}
	return t, nil
}

func (t *ActivityTrace) kinds() []int {
	k := []int{cuptiKindConcurrentKernel, cuptiKindMemcpy, cuptiKindMemset}
	if t.opts.External {
		k = append(k, cuptiKindDriver, cuptiKindExternalCorr)
	}
	return k
}

// Now reads CUPTI's clock on the host, the clock of Activity's times.
func (t *ActivityTrace) Now() uint64 {
	f := dl.Get()
	dl.Call(t.api.timestamp, f.OutPtr(0))
	v := f.Out[0]
	f.Put()
	return v
}

// Push makes id current for the launches the calling goroutine makes until
// the matching Pop (ActivityOptions.External); the goroutine is locked to
// its thread in between, as CUPTI's ids belong to the thread.
func (t *ActivityTrace) Push(id uint64) {
	goruntime.LockOSThread()
	dl.Call(t.api.pushExternal, cuptiExternalCustom0, uintptr(id))
}

// Pop ends the innermost Push.
func (t *ActivityTrace) Pop() {
	f := dl.Get()
	dl.Call(t.api.popExternal, cuptiExternalCustom0, f.OutPtr(0))
	f.Put()
	goruntime.UnlockOSThread()
}

// Flush asks CUPTI for every record it holds and hands the activities
// gathered since the last Flush to fn, in the order CUPTI delivered them.
// Call it once the work has finished (a stream or device synchronised):
// CUPTI hands over work still running without its times, and those
// records are left out and counted (Stats). External ids are looked up
// with External.
func (t *ActivityTrace) Flush(fn func(Activity)) error { return t.flush(1, fn) }

// FlushCompleted asks CUPTI, without forcing, for the buffers whose every
// record is complete, and hands the activities gathered since the last
// flush to fn. Unlike Flush it loses nothing of work still running:
// CUPTI keeps the buffers that hold such work (with every other record
// in them) until it is done.
func (t *ActivityTrace) FlushCompleted(fn func(Activity)) error { return t.flush(0, fn) }

// flush calls cuptiActivityFlushAll with flag (1: forced, 0: finished
// buffers only) and hands the activities gathered since the last flush to
// fn.
func (t *ActivityTrace) flush(flag uintptr, fn func(Activity)) error {
	_, err := t.flushHeld(flag, fn)
	return err
}

// flushHeld is flush, and returns when CUPTI asked for the oldest buffer
// it still holds after the flush (or when the flush began, where it holds
// none): every record of work issued before then, less the time a launch
// takes, was in a buffer handed over by now. A buffer leaves lent only
// once its records are in t.done, so it is read before them.
func (t *ActivityTrace) flushHeld(flag uintptr, fn func(Activity)) (time.Time, error) {
	oldest := time.Now()
	if rc := dl.Call(t.api.flushAll, flag); rc != 0 {
		return time.Time{}, t.api.err("cuptiActivityFlushAll", rc)
	}
	t.decodeFilled()
	lent.Range(func(_, v any) bool {
		if at := v.(lentBuffer).at; at.Before(oldest) {
			oldest = at
		}
		return true
	})
	t.mu.Lock()
	done := t.done
	t.done = nil
	t.mu.Unlock()
	for _, a := range done {
		fn(a)
	}
	return oldest, nil
}

// External returns the id pushed when the API call with correlation id c
// was made, and forgets it.
func (t *ActivityTrace) External(c uint32) (uint64, bool) {
	t.mu.Lock()
	id, ok := t.external[c]
	delete(t.external, c)
	t.mu.Unlock()
	return id, ok
}

// Stats returns the records decoded, those CUPTI reports lost and those
// of work that had not finished when they were flushed (no times).
func (t *ActivityTrace) Stats() (records, dropped, unfinished uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.records, t.dropped, t.unfinished
}

// Stop turns the records off, flushes what is left (Flush may still hand
// it over) and lets another trace start.
func (t *ActivityTrace) Stop() error {
	var first error
	for _, k := range t.kinds() {
		if rc := dl.Call(t.api.disable, uintptr(k)); rc != 0 && first == nil {
			first = t.api.err(fmt.Sprintf("cuptiActivityDisable(%d)", k), rc)
		}
	}
	if rc := dl.Call(t.api.flushAll, 1); rc != 0 && first == nil {
		first = t.api.err("cuptiActivityFlushAll", rc)
	}
	if t.opts.Queued {
		dl.Call(t.api.enableLatency, 0)
	}
	// What the last flush handed back is decoded now, for a Flush after
	// Stop, and its buffers leave lent.
	t.decodeFilled()
	active.CompareAndSwap(t, nil)
	return first
}

// bufferRequested is CUPTI's request for a buffer to fill (called on the
// thread of the launch that needs it).
func bufferRequested(buf, size, maxRecords uintptr) {
	t := active.Load()
	var b []byte
	if t != nil {
		t.mu.Lock()
		if n := len(t.free); n > 0 {
			b, t.free = t.free[n-1], t.free[:n-1]
		}
		t.mu.Unlock()
	}
	if b == nil {
		b = make([]byte, activityBuffer)
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	lent.Store(p, lentBuffer{b, time.Now()})
	*(*uintptr)(cPointer(buf)) = p
	*(*uintptr)(cPointer(size)) = activityBuffer
	*(*uintptr)(cPointer(maxRecords)) = 0
}

// lent keeps every buffer CUPTI holds alive until it hands it back,
// whatever becomes of the trace that lent it: CUPTI writes into it after
// Stop too, and a buffer kept only by a trace the program dropped would
// be freed under it.
var lent sync.Map // buffer address → lentBuffer

// lentBuffer is a buffer CUPTI holds, and when it asked for it: the
// launch that needed it was under way then, and every record in it is of
// work issued since.
type lentBuffer struct {
	b  []byte
	at time.Time
}

// bufferCompleted is CUPTI's return of a filled buffer, on its own thread
// or on the one that flushes.
func bufferCompleted(ctx, streamID, buf, size, valid uintptr) {
	t := active.Load()
	var b []byte
	if v, ok := lent.Load(buf); ok {
		b = v.(lentBuffer).b
	}
	if t == nil || b == nil || valid > uintptr(len(b)) {
		lent.Delete(buf)
		return
	}
	var dropped uint64
	if cuptiAPI != nil {
		f := dl.Get()
		if dl.Call(cuptiAPI.numDropped, ctx, streamID, f.OutPtr(0)) == 0 {
			dropped = f.Out[0]
		}
		f.Put()
	}
	// Decoded at the next flush (decodeFilled); it stays in lent until
	// then, so that flushHeld counts its records as not handed over.
	t.mu.Lock()
	t.filled = append(t.filled, filledBuffer{b: b[:valid], base: buf})
	t.dropped += dropped
	t.mu.Unlock()
}

// filledBuffer is a buffer CUPTI handed back: its valid part and its
// address.
type filledBuffer struct {
	b    []byte
	base uintptr
}

// decodeFilled decodes the buffers handed back since the last call into
// t.done, then takes them out of lent and frees them for reuse.
func (t *ActivityTrace) decodeFilled() {
	t.mu.Lock()
	filled := t.filled
	t.filled = nil
	t.mu.Unlock()
	for _, fb := range filled {
		t.decode(fb.b, fb.base)
		lent.Delete(fb.base)
		t.mu.Lock()
		t.free = append(t.free, fb.b[:cap(fb.b)])
		t.mu.Unlock()
	}
}

// decode walks the records of one buffer with CUPTI's iterator (records
// are of the library's own struct versions; only the leading fields,
// stable across versions, are read).
func (t *ActivityTrace) decode(b []byte, base uintptr) {
	var out []Activity
	ext := map[uint32]uint64{}
	f := dl.Get()
	defer f.Put()
	n := uint64(0)
	for {
		if dl.Call(cuptiAPI.getNextRecord, base, uintptr(len(b)), f.OutPtr(0)) != 0 {
			break
		}
		off := uintptr(f.Out[0]) - base
		if off >= uintptr(len(b)) {
			break
		}
		n++
		r := b[off:]
		le := binary.LittleEndian
		switch le.Uint32(r) {
		case cuptiKindConcurrentKernel:
			a := Activity{Kind: ActivityKernel, Start: le.Uint64(r[16:]), End: le.Uint64(r[24:]),
				Device: le.Uint32(r[40:]), Stream: le.Uint32(r[48:]), Correlation: le.Uint32(r[92:])}
			if t.opts.Queued {
				a.Queued = le.Uint64(r[120:])
			}
			out = append(out, a)
		case cuptiKindMemcpy, cuptiKindMemset:
			k := ActivityMemcpy
			if le.Uint32(r) == cuptiKindMemset {
				k = ActivityMemset
			}
			out = append(out, Activity{Kind: k, Bytes: le.Uint64(r[8:]), Start: le.Uint64(r[16:]), End: le.Uint64(r[24:]),
				Device: le.Uint32(r[32:]), Stream: le.Uint32(r[40:]), Correlation: le.Uint32(r[44:])})
		case cuptiKindExternalCorr:
			if le.Uint32(r[4:]) == cuptiExternalCustom0 {
				ext[le.Uint32(r[16:])] = le.Uint64(r[8:])
			}
		}
	}
	kept := out[:0]
	unfinished := uint64(0)
	for _, a := range out {
		if a.End == 0 || a.End < a.Start {
			unfinished++
			continue
		}
		kept = append(kept, a)
	}
	t.mu.Lock()
	t.unfinished += unfinished
	t.done = append(t.done, kept...)
	for c, id := range ext {
		t.external[c] = id
	}
	t.records += n
	t.mu.Unlock()
}
