package ncclplugin

import (
	"strings"
	"time"

	"github.com/ianlancetaylor/demangle"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// A wrapped process's device activity: the kernels, memory copies and
// memsets its GPU ran, as CUPTI traced them inside the process (the
// plugin is its CUDA injection library). Kernels become profiler records
// of KindKernel, which busy time counts as compute; copies and memsets
// KindDevice records outside any phase. Each carries the step its device
// start fell in.

type traceState uint8

const (
	traceUnknown traceState = iota // no word from the plugin: not injected
	tracing
	untraced // the plugin tried and could not; why says why
)

// activity is what the collector keeps of a process's device activity.
type activity struct {
	state traceState
	why   string
	// latest is the latest device end (plugin CLOCK_MONOTONIC ns) of the
	// process's activity records so far. CUPTI delivers them a buffer at
	// a time, and not in the order they ran: a default flush hands over
	// only the buffers whose records are all complete, so the buffer of
	// a stream (or thread) that is always busy comes only when it is
	// full, while other streams' records overtake it. behind is how far
	// (ns) a record has come after others that ended later than it
	// started, the most seen so far: a step has had its kernels once the
	// records have gone that far past its end, and kernelLag at least (a
	// watermark with bounded out-of-orderness).
	latest  uint64
	behind  uint64
	records uint64    // activity records received
	last    time.Time // when the latest arrived
	names   map[uint32]*kernelName
}

type kernelName struct {
	buf   []byte
	have  int // bytes received
	short string
}

const (
	// kernelWait bounds how long a step range waits for its kernels
	// (activity.through), from when it arrived: CUPTI hands a buffer
	// over when it is full or, every 50 ms, when all its kernels have
	// finished, so a GPU that stays busy, or goes idle, may keep the last
	// kernels of a step back for a while.
	kernelWait = 5 * time.Second
	// kernelLag is the least a step waits past its end, in device time,
	// for records that CUPTI hands over out of order, before it has seen
	// how far out of order they come: wrapped FSDP2 steps of 37 ms on an
	// H200 had kernels come after those of steps 5 later.
	kernelLag = uint64(500 * time.Millisecond)
	// maxKernelNames bounds the names kept per process.
	maxKernelNames = 1 << 14
)

// through reports whether the process's activity records up to t
// (plugin CLOCK_MONOTONIC ns) have arrived, or it traces none, or none
// has come for kernelWait: its tracing has stopped (another CUPTI client,
// torch.profiler, took CUPTI's callbacks over) or its GPU is idle, and
// its steps need not wait any more.
func (a *activity) through(t uint64) bool {
	lag := max(a.behind, kernelLag)
	return a.state != tracing || a.latest >= t && a.latest-t >= lag || a.records > 0 && time.Since(a.last) >= kernelWait
}

// arrived notes a record of device interval [begin, end]. It implements
// through's watermark.
func (a *activity) arrived(begin, end uint64) {
	if a.latest > begin {
		a.behind = max(a.behind, a.latest-begin)
	}
	a.latest = max(a.latest, end)
}

// name stores a piece of a kernel name.
func (a *activity) name(r Record) {
	if a.names == nil {
		a.names = make(map[uint32]*kernelName)
	}
	n := a.names[r.NameID]
	if n == nil || len(n.buf) != int(r.NameLen) || r.NameOffset == 0 {
		// A new name, or a name sent again on a new connection.
		if n == nil && len(a.names) >= maxKernelNames {
			return
		}
		n = &kernelName{buf: make([]byte, r.NameLen)}
		a.names[r.NameID] = n
	}
	n.have += copy(n.buf[r.NameOffset:], r.Name)
	if n.have >= len(n.buf) {
		n.short = KernelName(string(n.buf))
	}
}

// kernel is the name of kernel number id, or a placeholder.
func (a *activity) kernel(id uint32) string {
	if n := a.names[id]; n != nil && n.short != "" {
		return n.short
	}
	return "(kernel)"
}

// KernelName is the name a kernel's records carry: a C++ (Itanium ABI)
// name demangled, without its parameters and template arguments, as
// "at::native::vectorized_elementwise_kernel"; any other name as it is.
// Names are made valid UTF-8.
func KernelName(mangled string) string {
	name := mangled
	if strings.HasPrefix(mangled, "_Z") {
		if s := demangled(mangled); s != "" {
			name = s
		}
	}
	name = strings.ToValidUTF8(name, "\uFFFD")
	if name == "" {
		return "(kernel)"
	}
	return name
}

// demangled is a C++ name's short form, or "" where it is not one. The
// names come from the wrapped processes: a demangler that panics on one
// (some versions have) must not take profile-run down.
func demangled(mangled string) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	s, err := demangle.ToString(mangled, demangle.NoParams, demangle.NoTemplateParams, demangle.NoClones)
	if err != nil {
		return ""
	}
	return s
}

// The names of device memory allocations and releases (ActMemory).
const (
	MemAllocatedName = "[device memory allocated]"
	MemReleasedName  = "[device memory released]"
)

// copyNames names memory copies by CUPTI's memcpy kind.
var copyNames = [...]string{"Memcpy", "Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoA", "Memcpy AtoH", "Memcpy AtoA", "Memcpy AtoD", "Memcpy DtoA", "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"}

// loneAfter is how long a process without a launcher rank or a
// communicator waits, alone, before it is taken for a process on its own
// (rank 0), so that a one-GPU job's steps and kernels flow while it runs:
// the workers of a launcher that sets no rank (mp.spawn) connect within
// it of one another. A variable for tests.
var loneAfter = 10 * time.Second

// maxEarlyActivity bounds the activity records a process of unknown
// rank keeps.
const maxEarlyActivity = 1 << 16

func (c *Collector) activityLocked(pr *process, r Record, out []profiler.Record) []profiler.Record {
	switch r.What {
	case ActTracing:
		pr.act.state = tracing
		return out
	case ActUnavailable:
		if pr.act.state != tracing {
			pr.act.state, pr.act.why = untraced, r.Note
		}
		return out
	}
	pr.act.state = tracing // its first record may have been lost
	pr.act.records++
	pr.act.last = time.Now()
	if r.What != ActMemory {
		// An allocation's time is the host's, when the call made it:
		// ahead of the GPU, it says nothing of how far its kernels came.
		pr.act.arrived(r.RangeBegin, r.RangeEnd)
	}
	if pr.device < 0 {
		// A process without a communicator (a one-GPU job) has its
		// device from its kernels: its steps must carry it to be
		// accounted with them.
		pr.device = int32(r.Device)
	}
	pr.latest = max(pr.latest, r.RangeEnd)
	c.nextID++
	start, end := c.clock.at(int64(r.RangeBegin)), c.clock.at(int64(r.RangeEnd))
	rec := profiler.Record{
		ID:          c.nextID,
		Kind:        profiler.KindKernel,
		Device:      runtime.Device{Type: runtime.CUDA, Index: int(r.Device)},
		Stream:      uint64(r.Stream),
		Labels:      pr.labelsAt(r.RangeBegin),
		HostStart:   start,
		HostEnd:     start,
		HasDevice:   true,
		DeviceStart: start,
		DeviceEnd:   end,
	}
	// What it counts as, once it is kept.
	var counted *uint64
	labelled := false
	switch r.What {
	case ActKernel:
		rec.Name = pr.act.kernel(r.NameID)
		counted = &c.stats.Kernels
		if r.Labelled {
			// Launched inside an NVTX range named as forward or
			// backward work: a stage's single chunk where the name
			// gave none. Copies and memsets stay outside any phase.
			rec.Phase, rec.Chunk, rec.Microbatch = profiler.Forward, max(r.ActChunk, 0), r.ActMicrobatch
			if r.ActPhase == PhaseBackward {
				rec.Phase = profiler.Backward
			}
			labelled = true
		}
	case ActMemcpy:
		rec.Kind = profiler.KindDevice
		rec.Name = copyNames[0]
		if int(r.CopyKind) < len(copyNames) {
			rec.Name = copyNames[r.CopyKind]
		}
		counted = &c.stats.Copies
	case ActMemset:
		rec.Kind = profiler.KindDevice
		rec.Name = "Memset"
		counted = &c.stats.Copies
	case ActMemory:
		// An instant on the host (a call that allocated or released),
		// not device work: no device time, and nothing busy.
		rec.Kind, rec.HasDevice, rec.DeviceStart, rec.DeviceEnd = profiler.KindHost, false, 0, 0
		if pr.memHeld == nil {
			pr.memHeld = map[int32]int64{}
		}
		held := pr.memHeld[int32(r.Device)]
		if r.CopyKind == MemAllocated {
			held += int64(r.Bytes)
			rec.Name, rec.PeakMemory = MemAllocatedName, held
		} else {
			held = max(held-int64(r.Bytes), 0)
			rec.Name = MemReleasedName
		}
		pr.memHeld[int32(r.Device)] = held
		counted = &c.stats.MemoryOps
	}
	if pr.rank < 0 && pr.earlyActs >= maxEarlyActivity {
		out = c.loneLocked(pr, out)
	}
	if pr.rank < 0 && pr.earlyActs >= maxEarlyActivity {
		c.stats.ActivityDropped++
		return out
	}
	if counted != nil {
		*counted++
	}
	if labelled {
		c.stats.KernelsLabelled++
	}
	if pr.rank < 0 {
		pr.early = append(pr.early, rec)
		pr.earlyActs++
		return out
	}
	rec.Rank = pr.rank
	return pr.labelOut(rec, r.RangeBegin, out)
}

// loneLocked gives pr, whose records wait for its rank (beyond the bound
// kept, or for loneAfter), rank 0 when it is the only process the
// collector knows and no launcher numbered it: a process on its own
// (python train.py on one GPU), rank 0 as it would be at its end.
// Otherwise the rank stays unknown (a communicator will tell) and what
// does not fit is dropped and counted.
func (c *Collector) loneLocked(pr *process, out []profiler.Record) []profiler.Record {
	if pr.worldRank < 0 && len(c.procs) == 1 {
		pr.rank = 0
		out = pr.releaseEarly(out)
	}
	return out
}
