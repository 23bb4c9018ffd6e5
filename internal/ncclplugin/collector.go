package ncclplugin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/internal/naming"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// EnvSocket is the environment variable that tells the plugin where the
// collector listens; a wrapped process needs it (Collector.Env) and
// NCCL_PROFILER_PLUGIN naming libtrainscope-nccl.so.
const EnvSocket = "TRAINSCOPE_NCCL_SOCKET"

// Option configures a Collector.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	dir      string
	linger   time.Duration
	stepName string
	onWorld  func(int)
	// pipeline names the pipeline's communicator; "" finds it by name
	// (isPipelineName).
	pipeline string
	// grace is how long a process whose connections have all closed
	// keeps what only its later records need (goneGrace; tests shorten
	// it).
	grace time.Duration
}

// WithDir sets the directory in which the collector makes its own
// directory for the socket (default os.TempDir()). Unix socket paths are
// limited to 107 bytes.
func WithDir(dir string) Option { return optionFunc(func(c *config) { c.dir = dir }) }

// WithLinger sets how long an operation whose kernel channels have not
// all arrived waits, after the last news of it, before it is delivered
// with what it has (default 2 s). Kernel channels arrive when the GPU has
// run them; a busy GPU can be seconds behind the host.
func WithLinger(d time.Duration) Option { return optionFunc(func(c *config) { c.linger = d }) }

// WithStepRange names the application's NVTX range that brackets one
// training step (default "step"; "" for none). A top-level range whose
// name is this, alone or followed as naming.StepNumber says ("step 12",
// "step_12", "step: warm-up"), becomes a profiler step range: its number
// is the integer in its name when that is above the process's previous
// step, else the previous step's plus one (from 0); the process's NCCL
// operations and other ranges that start inside it carry that step.
func WithStepRange(name string) Option {
	return optionFunc(func(c *config) { c.stepName = name })
}

// WithPipelineGroup names the communicator whose ranks are a pipeline's
// stages. A process's rank in it is its stage: every record the process
// delivers after carries it, and the step analysis then has bubbles per
// stage. By default ("") a process's stage is its rank in the largest
// communicator it makes whose name says so, as naming.PipelineGroup tells
// (Megatron-LM's PIPELINE_MODEL_PARALLEL_GROUP, a device mesh's "pp");
// where none does, its sends and receives stage it (stageBySendsLocked),
// over communicators whose names speak of no other parallel dimension (a
// context-parallel ring's). PyTorch up to at least 2.11 passes NCCL no
// name. NoPipelineGroup turns staging off.
func WithPipelineGroup(name string) Option {
	return optionFunc(func(c *config) { c.pipeline = name })
}

// NoPipelineGroup, given to WithPipelineGroup, has no process staged: for
// a job whose sends and receives are not a pipeline's.
const NoPipelineGroup = "none"

// namedAs reports whether a communicator's name is want, or want then
// ':' and more: PyTorch names a communicator "<description>:<group
// name>" where it passes both (each replica's pipeline group has its own
// group name, one description).
func namedAs(name, want string) bool {
	return name == want || strings.HasPrefix(name, want+":")
}

// WithLocalSize has the collector call f with the number of processes a
// wrapped job's launcher started on this host (LOCAL_WORLD_SIZE and the
// like, as the plugin read it), each time a process names more than any
// before: the ranks a step analysis should wait for. f runs on a
// connection's goroutine, without the collector's lock.
func WithLocalSize(f func(n int)) Option { return optionFunc(func(c *config) { c.onWorld = f }) }

// Stats counts what the collector has seen.
type Stats struct {
	Connections int // plugin connections accepted
	Processes   int // distinct processes (host, pid) that sent a hello
	// Records ingested into the profiler; HostOnly of them had no device
	// time (no kernel channel reported, or the process ended first).
	Records, HostOnly uint64
	// StaleChannels counts kernel channels left out of their
	// operation's device time: the first whose timer ran before its
	// operation was enqueued, and every later one of the communicator's
	// on that GPU (docs/nccl-plugin.md); StaleComms the communicators so
	// distrusted, counted per process and GPU.
	StaleComms    int
	StaleChannels uint64
	// KernelChannels matched to their operation; Orphans are kernel-channel
	// and proxy-operation records that arrived for an operation never
	// seen, or after it had been delivered (a proxy operation's stop whose
	// start a full ring dropped lets its p2p go before the others stop),
	// and were lost.
	KernelChannels, Orphans uint64
	// ProxyTimed counts the p2p operations whose transfer end NCCL's
	// proxy reported (network transports).
	ProxyTimed uint64
	// AllToAlls counts the all-to-alls ingested as one record each,
	// gathered from AllToAllParts sends and receives (a send to and a
	// receive from every rank of the communicator in one group block).
	AllToAlls, AllToAllParts uint64
	// Ranges counts the application's NVTX ranges ingested, Steps those
	// of them that were step ranges (WithStepRange); RangesLost the
	// ranges the plugins did not send for being nested too deeply;
	// RangesDropped those a process sent before its rank was known (no
	// launcher rank, no communicator yet) beyond the 4096 kept until then.
	Ranges, Steps, RangesLost, RangesDropped uint64
	// Losses the plugins reported (the latest cumulative counts of every
	// process, summed): records lost to a full ring, events refused,
	// records discarded while no collector was connected, and device
	// activity records CUPTI dropped or could not time.
	PluginRingFull, PluginRefused, PluginUnsent, PluginActivityDropped uint64
	// PluginBuffersUnreturned counts the CUPTI activity buffers the
	// processes' plugins saw still out as they exited: records that never
	// came and are in no count above (up to a few hundred kernels each).
	PluginBuffersUnreturned uint64
	// PluginForeignProxyOps counts the proxy operations of other
	// processes (PXN) that the processes' proxy threads ran: NCCL
	// reports them to the thread's process, which does not record them,
	// and never to their own, whose p2p then have no transfer ends for
	// them. Not a loss of the plugin, and not in PluginDrops.
	PluginForeignProxyOps uint64
	// Device activity (CUPTI, through the plugin): Traced counts the
	// processes that sent kernels, copies or memsets, Untraced those whose plugin
	// could not (UntracedWhy: the first reason given); Kernels and
	// Copies (memory copies and memsets) ingested; KernelsLabelled the
	// kernels launched inside an NVTX range named as forward or backward
	// work, which carry its phase, chunk and microbatch; ActivityDropped
	// those that arrived before their process had a rank, beyond the
	// bound kept until then.
	Traced, Untraced int
	UntracedWhy      string
	Kernels, Copies  uint64
	KernelsLabelled  uint64
	// MemoryOps counts the device memory allocations and releases
	// ingested (CUPTI's memory activity); each allocation's record
	// carries, as its PeakMemory, the bytes its process then held on the
	// device, so that the report's peak per rank is the highest.
	MemoryOps       uint64
	ActivityDropped uint64
	// GPUs are the UUIDs (cuDeviceGetUuid) of the GPUs the processes made
	// communicators on, distinct, in byte order, at most maxStatsGPUs.
	GPUs [][16]byte
	// SharedGPUs counts the GPUs that processes of one host shared (two
	// or more made communicators on a GPU of one UUID: MPS, or
	// time-slicing), SharingProcesses the processes on them: their
	// kernels' times include waits for one another's.
	SharedGPUs, SharingProcesses int
	// NCCLVersions are the NCCL version codes (ncclGetVersion: 22809 for
	// 2.28.9) the processes' communicators reported, distinct and
	// ascending; none from plugins that did not say.
	NCCLVersions []int32
	// PipelineGroup is the largest communicator named as the pipeline's
	// that gave processes their stage (WithPipelineGroup), "" where none
	// did; Staged counts the processes that have a stage, and Stages the
	// most stages any has. StagedBySends of them were staged by their
	// sends and receives, no name saying which communicator is the
	// pipeline's; Unstaged processes sent or received but could not be
	// (PyTorch's two-rank communicators joining more than two processes,
	// some without a launcher rank).
	// Provisional of them were staged while some of their pipeline's
	// processes had not yet sent (at the end of a run: never did, being
	// on another host, say): their stages are their rank in a stage group
	// or a lower bound.
	PipelineGroup           string
	Staged, Stages          int
	StagedBySends, Unstaged int
	Provisional             int
	// NamedPairs of those staged by their sends made a communicator of
	// two ranks named as the pipeline's, PairName the first such name:
	// a pipeline of two, or PyTorch's communicators of two neighbours.
	NamedPairs int
	PairName   string
	// Communicating counts the processes that issued a collective or
	// p2p operation (Processes counts every one that loaded the plugin,
	// a launcher that only initialised CUDA too).
	Communicating int
	// ClockConflicts counts the GPUs of processes (a process's GPUs each
	// have their own %globaltimer) whose GPU-to-host offset bounds
	// disagreed by more than 100 µs (see docs/nccl-plugin.md); their
	// lower bound is used. ClockConflict describes the first operation
	// that made them disagree, and names its CUDA device. ClockSteps
	// counts the times a GPU's offset was estimated again, its operations
	// having agreed on one that contradicted the bounds before: its
	// %globaltimer stepped against the host's clock.
	ClockConflicts int
	ClockConflict  string
	ClockSteps     int
	// DecodeErrors counts connections that ended in a malformed stream,
	// CutShort those that ended inside a record (ErrCutShort: their
	// process exited or was killed mid-send); LastError is the latest
	// decode or ingest error.
	DecodeErrors, IngestErrors uint64
	CutShort                   uint64
	LastError                  string
	// Cut counts connections Close had to close before their process
	// had sent everything (its deadline passed with the collector still
	// reading them): what they still held is lost, and not counted
	// anywhere else.
	Cut int
}

// PluginDrops is the sum of the losses the plugins reported.
func (s Stats) PluginDrops() uint64 {
	return s.PluginRingFull + s.PluginRefused + s.PluginUnsent + s.PluginActivityDropped
}

// Collector receives plugin record streams on a Unix socket and ingests
// each completed collective and p2p operation into a profiler.
type Collector struct {
	p     *profiler.Profiler
	cfg   config
	dir   string
	path  string
	ln    *net.UnixListener
	clock hostClock

	mu    sync.Mutex
	procs map[procKey]*process
	conns map[*net.UnixConn]struct{}
	stats Stats
	// sendComms are, per communicator that some process sent or
	// received over (not one named for another parallel dimension), those
	// processes: what joins a pipeline's stages where no name says which
	// communicator is the pipeline's.
	sendComms map[uint64][]*process
	// notPipeline are communicators over which a process sent to or
	// received from more than two peers: an all-to-all's (PyTorch's runs
	// as sends and receives to every peer), not a pipeline's.
	notPipeline map[uint64]bool
	// namedStages is the size of stats.PipelineGroup; pairName the name
	// of the first communicator of two ranks named as the pipeline's.
	namedStages int
	pairName    string
	nextID      uint64
	closing     bool
	world       int32 // the largest launcher local size a process named

	readers   sync.WaitGroup
	bg        sync.WaitGroup
	accepting chan struct{} // closed when the accept loop has returned
	stop      chan struct{}
	// ingestCtx bounds every hand-over to the profiler, which a sink
	// stuck in Consume holds: it ends when Close's context does.
	ingestCtx  context.Context
	stopIngest context.CancelFunc
	closeOnce  sync.Once
	closeErr   error
}

// gpuUUID names a GPU across processes (cuDeviceGetUuid).
type gpuUUID = [16]byte

// maxGPUs bounds the GPUs a process's record keeps: a process drives a
// few GPUs at most (one per rank it holds).
const maxGPUs = 16

// maxStatsGPUs bounds Stats.GPUs: the processes that reach the collector
// run on its host, whose GPUs are a few.
const maxStatsGPUs = 64

type procKey struct {
	host string
	pid  uint32
}

// commRank is a communicator and a rank in it: one process can hold
// several ranks of one communicator (ncclCommInitAll), each on its own
// device, all with the communicator's commHash.
type commRank struct {
	comm uint64
	rank int32
}

// maxClocks bounds the GPUs whose clock offsets a process keeps apart;
// the operations of any more share the unknown device's.
const maxClocks = 64

// deviceOf is the CUDA device of the process's rank in comm, -1 unknown.
func (pr *process) deviceOf(comm uint64, rank int32) int32 {
	if d, ok := pr.devices[commRank{comm, rank}]; ok {
		return d
	}
	return -1
}

// clockOf is the clock offset estimate of CUDA device dev.
func (pr *process) clockOf(dev int32) *offsetEstimate {
	if o := pr.clocks[dev]; o != nil {
		return o
	}
	if dev < 0 || len(pr.clocks) >= maxClocks {
		dev = -1
		if o := pr.clocks[dev]; o != nil {
			return o
		}
	}
	if pr.clocks == nil {
		pr.clocks = make(map[int32]*offsetEstimate)
	}
	o := newOffsetEstimate(dev)
	pr.clocks[dev] = o
	return o
}

// distrust takes the communicators whose kernel-channel timers were found
// to run before their operations, each on the GPU of its rank there: none
// of their channels is taken any more. A communicator of several of the
// process's GPUs (ncclCommInitAll) is distrusted on each GPU apart.
func (pr *process) distrust(comms ...commRank) {
	for _, cr := range comms {
		if pr.staleComms == nil {
			pr.staleComms = make(map[commRank]bool)
		}
		pr.staleComms[cr] = true
	}
}

// process is what the collector knows about one wrapped process.
type process struct {
	worldRank int32 // the launcher's rank, -1 unknown
	// rank is the process's rank in the report: worldRank, else its rank
	// in the first communicator it made; -1 until known. early holds its
	// ranges until then.
	rank      int
	early     []profiler.Record
	earlyActs int                // activity records among early
	since     time.Time          // when its first connection came
	open      int                // connections open
	ops       map[uint64]*op     // by task
	devices   map[commRank]int32 // CUDA device by communicator and rank in it
	drops     [6]uint64          // ring full, refused, unsent, activity, buffers unreturned, foreign proxy ops: the latest cumulative report
	act       activity           // its device activity (CUPTI)
	memHeld   map[int32]int64    // device memory it holds, by device (CUPTI's allocations less its releases)
	// clocks are its GPUs' clock offsets, by CUDA device (-1 unknown), at
	// most maxClocks and the unknown device's.
	clocks map[int32]*offsetEstimate
	// staleComms are the communicators, by rank in them (a GPU), whose
	// kernel-channel timers were found to run before their operations:
	// none of their channels is taken any more.
	staleComms map[commRank]bool
	// ncclVersion is its NCCL's version code, 0 until a communicator
	// reported one.
	ncclVersion int32
	// gpus are the UUIDs of the GPUs its communicators were made on (at
	// most maxGPUs): processes of one host with a UUID in common share
	// that GPU.
	gpus []gpuUUID
	// passed is, per communicator and rank in it (a GPU), the latest
	// enqueue time (plugin CLOCK_MONOTONIC ns) of an operation whose
	// kernel channels all reported their stop: that GPU has run every
	// operation of the rank enqueued before it.
	passed map[commRank]uint64
	// steps are the process's latest step ranges (NVTX), oldest first.
	steps    []stepSpan
	nextStep int32
	// lost is, per thread, the latest count of its ranges not sent.
	lost map[uint32]uint64
	// device is the CUDA device of the process's first communicator, -1
	// until one is known.
	device int32
	// multiDevice says its communicators are on more than one device.
	multiDevice bool
	// stage is the process's pipeline stage (WithPipelineGroup),
	// profiler.None until one is known; stages how many there are. byName
	// says a communicator named as the pipeline's gave it; otherwise the
	// communicators it sends and receives over (sends) do, with those of
	// the processes they join it to (stageBySendsLocked).
	stage         int16
	stages        int32
	byName        bool
	sends         map[uint64]sendComm
	provisional   bool // staged by sends while some of its set's peers had not sent
	namedPair     bool // it made a communicator of two ranks named as the pipeline's
	communicating bool
	// latest is the latest time (plugin CLOCK_MONOTONIC ns) the process
	// reported: where a step it left open is cut short.
	latest uint64
	// held are the process's ended step ranges, oldest first, each held
	// back until every operation the process enqueued before its end has
	// been delivered: the host runs ahead of the GPU, and a step range
	// that arrived before its operations would have the analyses account
	// the step without them.
	held []heldStep
	// pending are, per thread, the enqueue starts of the operations whose
	// records have arrived, in arrival order, which within a thread is
	// enqueue order (each thread has its ring; rings are drained one
	// after another): the earliest of the threads' first ones not yet
	// delivered bounds which held steps may go.
	pending map[uint32][]pendingOp
	// seen is, per thread, the latest time (plugin CLOCK_MONOTONIC ns) of
	// its ranges' records so far; waiting are the records whose step
	// cannot be told yet (settled).
	seen    map[uint32]uint64
	waiting []waitingRec
	// batches are the group blocks' p2p operations being gathered into
	// all-to-alls (alltoall.go); openBatch, per thread, the one its
	// latest p2p went into; allToAlls, per communicator, how many
	// all-to-alls it has delivered.
	batches   map[batchKey]*batch
	openBatch map[uint32]*batch
	allToAlls map[uint64]uint64
	// closed is when its last connection closed; released says its
	// state for records still to come has gone since (release).
	closed   time.Time
	released bool
}

// goneGrace is how long a process whose connections have all closed,
// with nothing left to deliver, keeps its state for a reconnect before
// release lets go of it: its plugin reconnects within a second of a
// failed send, and sends its last counts over a connection of their own
// as it exits. A job that restarts its workers for hours would otherwise
// keep every process it ever had (kernel names: up to tens of MiB each).
const goneGrace = time.Minute

// gone reports whether pr's connections have all closed, a grace ago as
// of now, with nothing of it still to deliver: an operation waiting for
// its kernel channels, a step range, a record waiting for its step or
// rank, a batch holding p2p records.
func (pr *process) gone(now time.Time, grace time.Duration) bool {
	if pr.open > 0 || pr.released || pr.closed.IsZero() || now.Sub(pr.closed) < grace ||
		len(pr.ops) > 0 || len(pr.held) > 0 || len(pr.waiting) > 0 || len(pr.early) > 0 {
		return false
	}
	for _, b := range pr.batches {
		if len(b.held) > 0 {
			return false
		}
	}
	return true
}

// release lets go of what only a gone process's records still to come
// needed. It keeps, a tombstone, what Stats counts (its losses, stage,
// tracing, stale communicators, clock conflict), what stages other
// processes (its sends, in c.sendComms) and what keeps the records of a
// reconnect consistent with those delivered (rank, devices by
// communicator, step numbers and ranges, all-to-all numbers, memory
// held, each thread's count of lost ranges: counts since the process
// began); a reconnect revives it (revive), with kernel names sent again.
func (pr *process) release() {
	pr.ops, pr.passed, pr.pending, pr.seen = nil, nil, nil, nil
	pr.early, pr.held, pr.waiting = nil, nil, nil
	pr.batches, pr.openBatch = nil, nil
	pr.act.names = nil
	pr.released = true
}

// revive makes again what release let go of and a connection needs.
func (pr *process) revive() {
	if pr.released {
		pr.ops, pr.passed, pr.released = make(map[uint64]*op), make(map[commRank]uint64), false
	}
}

// sendComm is a communicator a process sent or received over: its rank
// in it, its size, and the peers it sent to or received from (a pipeline
// stage has two at most: the stages before and after it).
type sendComm struct {
	rank, nranks int32
	peers        [2]int32
	npeers       int
}

// addPeer notes peer: added says it is new, ok false that it is a third.
func (sc *sendComm) addPeer(peer int32) (added, ok bool) {
	for _, p := range sc.peers[:sc.npeers] {
		if p == peer {
			return false, true
		}
	}
	if sc.npeers == len(sc.peers) {
		return false, false
	}
	sc.peers[sc.npeers] = peer
	sc.npeers++
	return true, true
}

// waitingRec is a record waiting for its step to be known for good.
type waitingRec struct {
	rec profiler.Record
	t   uint64    // the time its step is looked up at (plugin CLOCK_MONOTONIC ns)
	at  time.Time // when it began to wait
}

// maxWaiting bounds the records a process keeps waiting for their step;
// beyond it they go with the step known then.
const maxWaiting = 1 << 16

// settled reports whether the step holding t (plugin CLOCK_MONOTONIC ns)
// is known for good: the process has no steps, or the thread that
// pushes them has reported a record at or after t. Its ring is in time
// order, so the end of its step before t, and the start of the one after,
// came first. Records from other threads (NCCL's, CUPTI's) may arrive
// ahead of it: an operation enqueued just after a step ended would
// otherwise be put in that step while its end is still on its way.
func (pr *process) settled(t uint64) bool {
	return len(pr.steps) == 0 || pr.seen[pr.steps[len(pr.steps)-1].tid] >= t
}

// labelOut delivers rec, labelled with the step holding t, or has it
// wait until that step is settled.
func (pr *process) labelOut(rec profiler.Record, t uint64, out []profiler.Record) []profiler.Record {
	if !pr.settled(t) && len(pr.waiting) < maxWaiting {
		pr.waiting = append(pr.waiting, waitingRec{rec, t, time.Now()})
		return out
	}
	return append(out, rec)
}

// settle delivers the waiting records whose step is now settled, those
// that have waited kernelWait, and with all every one, each labelled
// with the step its time falls in now (unless that step has been
// forgotten since: then as labelled before).
func (pr *process) settle(out []profiler.Record, all bool) []profiler.Record {
	if len(pr.waiting) == 0 {
		return out
	}
	var now time.Time
	n := 0
	for _, w := range pr.waiting {
		if !all && !pr.settled(w.t) {
			if now.IsZero() {
				now = time.Now()
			}
			if now.Sub(w.at) < kernelWait {
				pr.waiting[n] = w
				n++
				continue
			}
		}
		if l := pr.labelsAt(w.t); l.Step != profiler.None || len(pr.steps) > 0 && w.t >= pr.steps[0].start {
			w.rec.Labels.Step = l.Step
		}
		out = append(out, pr.stamp(w.rec))
	}
	clear(pr.waiting[n:])
	pr.waiting = pr.waiting[:n]
	return out
}

type pendingOp struct{ start, task uint64 }

type heldStep struct {
	rec profiler.Record
	end uint64    // plugin CLOCK_MONOTONIC ns
	at  time.Time // when it was held
}

// maxBatch bounds the records a connection's reader hands the profiler at
// once.
const maxBatch = 4096

// MaxHeldSteps bounds the step ranges a process holds back; beyond it
// the oldest goes out whatever is still pending. A step analysis fed by
// the collector should keep as many steps open: the records of the
// steps held come in the meantime.
const MaxHeldSteps = 1 << 10

// stepSpan is one step range of a process, in plugin CLOCK_MONOTONIC ns;
// end is 0 while it is open.
type stepSpan struct {
	tid        uint32
	ordinal    uint64
	start, end uint64
	n          int32
}

// maxSteps bounds the step ranges a process keeps for labelling its
// operations and ranges, each as its record arrives: in ring order, after
// the start of its step.
const maxSteps = 64

type op struct {
	rec      Record
	labels   profiler.Labels // its step when its record arrived
	have     bool            // rec holds the collective or p2p record
	channels map[uint8]Record
	stopped  int
	last     time.Time
	// A p2p's proxy operations started and not yet stopped, and the
	// latest stop (CLOCK_MONOTONIC ns); proxyRecs its proxy-operation
	// records, orphans if its own record never comes.
	proxies   int
	proxyStop uint64
	proxyRecs int
	// batch is the group block's batch a p2p is part of, nil if none.
	batch *batch
}

// NewCollector makes a directory (see WithDir), listens on a Unix socket
// in it, and starts accepting plugin connections; records go to p with
// Ingest. Pass Env (or EnvSocket = SocketPath) to the wrapped processes.
func NewCollector(p *profiler.Profiler, opts ...Option) (*Collector, error) {
	if p == nil {
		return nil, errors.New("ncclplugin: NewCollector: nil profiler")
	}
	cfg := config{dir: os.TempDir(), linger: 2 * time.Second, stepName: profiler.StepName, grace: goneGrace}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.linger <= 0 {
		return nil, fmt.Errorf("ncclplugin: NewCollector: linger %v must be positive", cfg.linger)
	}
	clock, err := newHostClock(p.Epoch())
	if err != nil {
		return nil, fmt.Errorf("ncclplugin: reading CLOCK_MONOTONIC: %w", err)
	}
	dir, err := os.MkdirTemp(cfg.dir, "trainscope-nccl-")
	if err != nil {
		return nil, fmt.Errorf("ncclplugin: socket directory: %w", err)
	}
	path := filepath.Join(dir, "collector.sock")
	if len(path) > 107 {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ncclplugin: socket path %s is %d bytes, Unix sockets allow 107: use a shorter WithDir", path, len(path))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ncclplugin: listen: %w", err)
	}
	c := &Collector{
		p: p, cfg: cfg, dir: dir, path: path, ln: ln, clock: clock,
		procs: make(map[procKey]*process), conns: make(map[*net.UnixConn]struct{}),
		stop: make(chan struct{}),
	}
	c.ingestCtx, c.stopIngest = context.WithCancel(context.Background())
	c.bg.Add(2)
	c.accepting = make(chan struct{})
	go c.accept()
	go c.sweeper()
	return c, nil
}

// SocketPath is the socket the plugin should connect to.
func (c *Collector) SocketPath() string { return c.path }

// Env is the environment entry for the wrapped processes: EnvSocket=path.
func (c *Collector) Env() string { return EnvSocket + "=" + c.path }

// Stats returns the counts so far.
// sharedGPUsLocked counts the GPUs that two or more processes of one
// host made communicators on, and the processes on them.
func (c *Collector) sharedGPUsLocked() (gpus, procs int) {
	type hostGPU struct {
		host string
		gpu  gpuUUID
	}
	on := map[hostGPU][]procKey{}
	for k, pr := range c.procs {
		for _, u := range pr.gpus {
			hg := hostGPU{k.host, u}
			on[hg] = append(on[hg], k)
		}
	}
	sharing := map[procKey]bool{}
	for _, ps := range on {
		if len(ps) < 2 {
			continue
		}
		gpus++
		for _, k := range ps {
			sharing[k] = true
		}
	}
	return gpus, len(sharing)
}

func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Processes = len(c.procs)
	for _, pr := range c.procs {
		switch {
		case pr.stage != profiler.None:
			s.Staged++
			s.Stages = max(s.Stages, int(pr.stages))
			if !pr.byName {
				s.StagedBySends++
			}
			if pr.provisional {
				s.Provisional++
			}
			if !pr.byName && pr.namedPair {
				s.NamedPairs++
			}
		case len(pr.sends) > 0 && c.cfg.pipeline != NoPipelineGroup:
			s.Unstaged++
		}
	}
	s.SharedGPUs, s.SharingProcesses = c.sharedGPUsLocked()
	s.GPUs = nil
	for _, pr := range c.procs {
		for _, u := range pr.gpus {
			if !slices.Contains(s.GPUs, u) && len(s.GPUs) < maxStatsGPUs {
				s.GPUs = append(s.GPUs, u)
			}
		}
	}
	slices.SortFunc(s.GPUs, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	s.NCCLVersions = nil
	for _, pr := range c.procs {
		if v := pr.ncclVersion; v > 0 && !slices.Contains(s.NCCLVersions, v) {
			s.NCCLVersions = append(s.NCCLVersions, v)
		}
	}
	slices.Sort(s.NCCLVersions)
	s.PairName = c.pairName
	s.PluginRingFull, s.PluginRefused, s.PluginUnsent, s.PluginActivityDropped, s.PluginBuffersUnreturned, s.PluginForeignProxyOps = 0, 0, 0, 0, 0, 0
	s.ClockConflicts = 0
	for _, pr := range c.procs {
		s.PluginRingFull += pr.drops[0]
		s.PluginRefused += pr.drops[1]
		s.PluginUnsent += pr.drops[2]
		s.PluginActivityDropped += pr.drops[3]
		s.PluginBuffersUnreturned += pr.drops[4]
		s.PluginForeignProxyOps += pr.drops[5]
		switch {
		case pr.act.state == tracing && pr.act.records > 0:
			s.Traced++
		case pr.act.state == untraced:
			s.Untraced++
			if s.UntracedWhy == "" {
				s.UntracedWhy = pr.act.why
			}
		}
		s.StaleComms += len(pr.staleComms)
		for _, est := range pr.clocks {
			s.ClockSteps += est.steps
			if ok, note := est.conflicted(); ok {
				s.ClockConflicts++
				if s.ClockConflict == "" {
					s.ClockConflict = note
				}
			}
		}
	}
	return s
}

func (c *Collector) accept() {
	defer c.bg.Done()
	defer close(c.accepting)
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			select {
			case <-c.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			conn.Close()
			continue
		}
		c.conns[conn] = struct{}{}
		c.stats.Connections++
		c.readers.Add(1)
		c.mu.Unlock()
		go c.read(conn)
	}
}

func (c *Collector) sweeper() {
	defer c.bg.Done()
	t := time.NewTicker(max(c.cfg.linger/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.mu.Lock()
			var out []profiler.Record
			for _, pr := range c.procs {
				if pr.released {
					continue // nothing of it waits
				}
				if pr.rank < 0 && now.Sub(pr.since) >= loneAfter {
					out = c.loneLocked(pr, out)
				}
				out = c.expireLocked(pr, now.Add(-c.cfg.linger), out)
				if pr.gone(now, c.cfg.grace) {
					pr.release()
				}
			}
			c.mu.Unlock()
			c.ingest(out)
		}
	}
}

// read decodes one connection until it ends, handing completed
// operations to the profiler whenever the connection has nothing more
// buffered.
func (c *Collector) read(conn *net.UnixConn) {
	defer c.readers.Done()
	br := bufio.NewReaderSize(conn, 64*RecordSize)
	d := NewReader(br)
	var pr *process
	var key procKey
	var out []profiler.Record
	h, err := d.Hello()
	if err == nil {
		key = procKey{h.Hostname, h.PID}
		c.mu.Lock()
		pr = c.procs[key]
		if pr == nil {
			pr = &process{worldRank: h.WorldRank, ops: make(map[uint64]*op), devices: make(map[commRank]int32), passed: make(map[commRank]uint64), lost: make(map[uint32]uint64), rank: -1, device: -1, stage: profiler.None, since: time.Now()}
			if h.WorldRank >= 0 {
				pr.rank = int(h.WorldRank)
			}
			c.procs[key] = pr
		}
		pr.revive() // back after its grace: the same process, its drainer started again
		pr.open++
		grew := h.LocalSize > c.world
		if grew {
			c.world = h.LocalSize
		}
		c.mu.Unlock()
		if grew && c.cfg.onWorld != nil {
			c.cfg.onWorld(int(h.LocalSize))
		}
		// The time a record came, for how long operations wait: read
		// after each wait for the socket and every 256 records between
		// (a clock read per record was a twentieth of the collector's
		// time at 100,000 records a second).
		var now time.Time
		read := true
		for n := 0; ; n++ {
			var rec Record
			rec, err = d.Next()
			if err != nil {
				break
			}
			if read || n%256 == 0 {
				now = time.Now()
			}
			c.mu.Lock()
			out = c.handleLocked(pr, rec, now, out)
			c.mu.Unlock()
			// Hand the records over before the next read may wait, and
			// every maxBatch records: a socket kept full rarely leaves a
			// whole number of records buffered, and a batch held until
			// it did grew to tens of thousands (and every buffer after
			// it kept that size).
			read = br.Buffered() < RecordSize
			if len(out) > 0 && (read || len(out) >= maxBatch) {
				c.ingest(out)
				out = out[:0]
			}
		}
	}
	conn.Close()
	c.mu.Lock()
	delete(c.conns, conn)
	switch {
	case err == nil || errors.Is(err, io.EOF) || c.closing:
	case errors.Is(err, ErrCutShort):
		c.stats.CutShort++
	default:
		c.stats.DecodeErrors++
		c.stats.LastError = err.Error()
	}
	if pr != nil {
		pr.open--
		if pr.open == 0 {
			// The process has gone (or will reconnect, and then its
			// later records stand alone): what it left open is host-only.
			out = c.expireLocked(pr, time.Time{}, out)
			pr.closed = time.Now()
		}
	}
	c.mu.Unlock()
	c.ingest(out)
}

func (c *Collector) handleLocked(pr *process, r Record, now time.Time, out []profiler.Record) []profiler.Record {
	switch r.Kind {
	case KindCommInit:
		pr.devices[commRank{r.Comm, r.Rank}] = r.Device
		if r.NCCLVersion > 0 {
			pr.ncclVersion = r.NCCLVersion
		}
		if u := gpuUUID(r.DeviceUUID); u != (gpuUUID{}) && !slices.Contains(pr.gpus, u) && len(pr.gpus) < maxGPUs {
			pr.gpus = append(pr.gpus, u)
		}
		c.stageLocked(pr, r)
		if pr.device < 0 && r.Device >= 0 {
			pr.device = r.Device
		}
		if r.Device >= 0 && r.Device != pr.device {
			pr.multiDevice = true
		}
		if pr.rank < 0 && r.Rank >= 0 {
			pr.rank = int(r.Rank)
			out = pr.releaseEarly(out)
		}
	case KindDrops:
		// Counts since the process began, on whichever connection: a
		// plugin whose stream is stuck at exit sends its last ones over
		// a connection of their own, which may be read before the older
		// counts still in the first's backlog.
		for i, v := range [6]uint64{r.RingFull, r.Refused, r.Unsent, r.ActivityDropped, r.BuffersUnreturned, r.ForeignProxyOps} {
			pr.drops[i] = max(pr.drops[i], v)
		}
	case KindRange:
		return c.rangeLocked(pr, r, c.endBatchLocked(pr, r.TID, out))
	case KindName:
		pr.act.name(r)
	case KindActivity:
		return c.activityLocked(pr, r, out)
	case KindCollective, KindP2P:
		o := pr.op(r.Task)
		if !pr.communicating {
			pr.communicating = true
			c.stats.Communicating++
		}
		if r.Kind == KindP2P {
			c.stageBySendsLocked(pr, r)
			if !o.have {
				out = c.noteBatchLocked(pr, r, o, out)
			}
		} else {
			out = c.endBatchLocked(pr, r.TID, out)
		}
		if !o.have {
			if pr.pending == nil {
				pr.pending = make(map[uint32][]pendingOp)
			}
			pr.pending[r.TID] = append(pr.pending[r.TID], pendingOp{r.HostStart, r.Task})
		}
		o.rec, o.have, o.last = r, true, now
		// Its step now, while that step is surely still among the kept
		// ones: an operation without kernel channels may be delivered a
		// minute later.
		o.labels = pr.labelsAt(r.HostStart)
		out = c.maybeDeliverLocked(pr, r.Task, o, out)
		if b := o.batch; b != nil && b.complete && !b.broken && !b.merged {
			// The block's last record may come after the rest of it has
			// run (the plugin ships its threads' rings one by one): its
			// sends and receives with itself go now, not when they have
			// waited out the channels they will never get.
			out = c.releaseSelvesLocked(pr, b, out)
		}
		return out
	case KindKernelChannel:
		o := pr.op(r.Task)
		o.last = now
		if prev, ok := o.channels[r.Channel]; !ok || prev.GPUStop == 0 {
			if r.GPUStop != 0 {
				o.stopped++
			}
			o.channels[r.Channel] = r
		}
		return c.maybeDeliverLocked(pr, r.Task, o, out)
	case KindProxyOp:
		o := pr.op(r.Task)
		o.last = now
		o.proxyRecs++
		if r.ProxyStop == 0 {
			o.proxies++
			return out
		}
		// A stop whose start was lost (a full ring) still counts.
		o.proxies = max(o.proxies-1, 0)
		o.proxyStop = max(o.proxyStop, r.ProxyStop)
		return c.maybeDeliverLocked(pr, r.Task, o, out)
	}
	return out
}

func (pr *process) op(task uint64) *op {
	o := pr.ops[task]
	if o == nil {
		o = &op{channels: make(map[uint8]Record)}
		pr.ops[task] = o
	}
	return o
}

// maybeDeliverLocked delivers o once every channel its record announced
// has reported its stop, and every proxy operation that started has
// stopped. A proxy operation starts (on the proxy thread, when the host
// posts it) before the kernel's channels do, and the same thread reports
// both, in order: a p2p whose channels have all stopped knows of its
// proxy operations.
func (c *Collector) maybeDeliverLocked(pr *process, task uint64, o *op, out []profiler.Record) []profiler.Record {
	if !o.have || o.rec.NChannels == 0 || o.stopped < int(o.rec.NChannels) || o.proxies > 0 {
		return out
	}
	delete(pr.ops, task)
	if cr := (commRank{o.rec.Comm, o.rec.Rank}); o.rec.HostStart > pr.passed[cr] {
		pr.passed[cr] = o.rec.HostStart
	}
	return pr.releaseSteps(c.deliverLocked(pr, o, out), false)
}

// expireLocked delivers, with what they have, the operations of pr that
// will get no more kernel channels: all of them for a zero cutoff (the
// process has gone, or the collector closes); else those last heard of
// before cutoff that either had a channel report (the rest of a kernel's
// channels run with it, so they are lost), or were enqueued before an
// operation of the same communicator and rank that its GPU has finished
// (it runs a communicator's operations in order; a process holding
// several ranks of one has them on several GPUs), or have waited
// maxChannelWait.
// An operation with no channel yet may simply be queued behind seconds
// of GPU work: the host enqueues far ahead of a busy GPU.
func (c *Collector) expireLocked(pr *process, cutoff time.Time, out []profiler.Record) []profiler.Record {
	crowded := len(pr.ops) > maxPendingOps
	for task, o := range pr.ops {
		if !cutoff.IsZero() {
			if o.last.After(cutoff) {
				continue
			}
			lost := !o.have || len(o.channels) > 0 || o.rec.HostStart <= pr.passed[commRank{o.rec.Comm, o.rec.Rank}] ||
				o.last.Before(cutoff.Add(-maxChannelWait)) || crowded
			if !lost {
				continue
			}
		}
		delete(pr.ops, task)
		if !o.have {
			c.stats.Orphans += uint64(len(o.channels) + o.proxyRecs)
			continue
		}
		out = c.deliverLocked(pr, o, out)
	}
	out = c.expireBatchesLocked(pr, cutoff, out)
	out = pr.settle(out, cutoff.IsZero())
	if cutoff.IsZero() {
		out = c.cutStepsLocked(pr, out)
		if pr.rank < 0 && len(pr.early) > 0 {
			// Neither a launcher's rank nor a communicator: a process on
			// its own, rank 0.
			pr.rank = 0
			out = pr.releaseEarly(out)
		}
	}
	return pr.releaseSteps(out, cutoff.IsZero())
}

// cutStepsLocked ends the steps pr left open — its process ended, or
// profile-run stopped listening, inside them — as cut short at the
// latest time it reported.
func (c *Collector) cutStepsLocked(pr *process, out []profiler.Record) []profiler.Record {
	for i := range pr.steps {
		if s := &pr.steps[i]; s.end == 0 {
			out = c.cutStepLocked(pr, s, max(pr.latest, s.start), out)
		}
	}
	return out
}

const (
	// staleChannel is how long before its operation's enqueue a kernel
	// channel's start may read and still be taken as its own: NCCL may
	// start the operation's profiler event after it launched the kernel
	// (crossings of a few microseconds were seen).
	staleChannel = time.Millisecond
	// clockSlack is how far the clock bounds may cross before the
	// process counts as one whose clocks disagree.
	clockSlack = 100 * time.Microsecond
	// maxChannelWait bounds the wait for the first kernel channel of an
	// operation: NCCL reports none for some (a p2p to itself, some NVLS
	// paths), and those must not wait for the process's end.
	maxChannelWait = time.Minute
	// maxPendingOps bounds the operations a process may have waiting;
	// beyond it, those past the linger are delivered with what they have.
	maxPendingOps = 1 << 16
)

func (c *Collector) deliverLocked(pr *process, o *op, out []profiler.Record) []profiler.Record {
	r := o.rec
	if r.Rank < 0 {
		c.stats.IngestErrors++
		c.stats.LastError = fmt.Sprintf("ncclplugin: %s of communicator %x has rank %d", r.Op(), r.Comm, r.Rank)
		return out
	}
	c.nextID++
	kind := profiler.KindCollective
	peer, root := int32(-1), r.Peer
	if r.Kind == KindP2P {
		kind, peer, root = profiler.KindP2P, r.Peer, -1
	}
	opName := r.Op()
	bytes := int64(r.Bytes)
	switch opName {
	case ccl.OpAllGather, ccl.OpReduceScatter, ccl.OpAllToAll, ccl.OpGather, ccl.OpScatter:
		// NCCL's count is per rank (an all-to-all's, per peer); nccl-tests'
		// S is the whole gathered size (what a rank sends in all; a
		// gather's or scatter's root buffer).
		bytes *= int64(r.NRanks)
	}
	// The group is the communicator's name where the job gave one (PyTorch
	// passes the process group's description), told apart by NCCL's
	// commHash, equal on every rank of the communicator: names repeat
	// (Megatron-LM names each of its data-parallel groups alike).
	group, gid := r.CommName, r.Comm
	if group == "" {
		group, gid = fmt.Sprintf("nccl:%016x", r.Comm), 0
	}
	// A process is one rank of the report: the launcher's number for it
	// where there is one, so that its traffic on every communicator stays
	// together; else its rank in this communicator.
	rank := int(r.Rank)
	if pr.worldRank >= 0 {
		rank = int(pr.worldRank)
	}
	if pr.rank < 0 {
		pr.rank = rank
		out = pr.releaseEarly(out)
	}
	dev := pr.deviceOf(r.Comm, r.Rank)
	// Its step: as the process's step ranges say now (a step range that a
	// thread other than the enqueuing one pushed may have come later than
	// the operation's record), unless its step has been forgotten since
	// (maxSteps ago): then as they said when its record came.
	labels := pr.labelsAt(r.HostStart)
	if labels.Step == profiler.None && (len(pr.steps) == 0 || r.HostStart < pr.steps[0].start) {
		labels = o.labels // its step has been forgotten since
	}
	rec := profiler.Record{
		ID:        c.nextID,
		Name:      opName,
		Kind:      kind,
		Rank:      rank,
		Labels:    labels, // NCCL knows no steps, stages or microbatches: the application's step ranges do
		Device:    runtime.Device{Type: runtime.CUDA, Index: int(dev)},
		HostStart: c.clock.at(int64(r.HostStart)),
		HostEnd:   c.clock.at(int64(r.HostEnd)),
		Collective: profiler.Collective{
			Op: opName, Bytes: bytes, Count: int64(r.Count), DType: r.DTypeName(),
			Peer: peer, Root: root, Group: group, GroupID: gid, GroupSize: r.NRanks, GroupRank: r.Rank,
			Seq: opSeq(r), BusFactor: ccl.BusFactor(opName, int(r.NRanks)),
		},
	}
	// The device interval runs from the first channel's start to the
	// last channel's stop: the whole operation, as nccl-tests times it
	// with events around the kernel, channels that start late included.
	// A channel whose timer, on the clock estimate's latest reading (no
	// channel can have started earlier), started well before the
	// operation was enqueued holds another kernel's time (seen on one
	// H200 with four ranks: every channel of a communicator carrying
	// all-to-alls, 36 ms to 3 s before its operation, which dragged the
	// clock's lower bound and every later device time with it). It is
	// left out, and so is every later channel of its communicator: those
	// that happen to land after their enqueue are no more its own.
	//
	// Where every channel of the operation started so, by as much as
	// those of the operations after it (on whichever communicator), the
	// GPU's timer stepped back instead: the estimate takes the step
	// (offsetEstimate), the first such operation host-only.
	clockDev := dev
	if clockDev < 0 && !pr.multiDevice {
		clockDev = pr.device // a lost comm-init: its only device
	}
	est := pr.clockOf(clockDev)
	est.observeAll(o.channels)
	pr.distrust(est.takeDistrusted()...)
	var gpuStart, gpuStop uint64
	for _, ch := range o.channels {
		if ch.GPUStart == 0 || ch.GPUStop < ch.GPUStart {
			continue
		}
		if gpuStart == 0 || ch.GPUStart < gpuStart {
			gpuStart = ch.GPUStart
		}
		gpuStop = max(gpuStop, ch.GPUStop)
	}
	leftOut, bound := pr.staleComms[commRank{r.Comm, r.Rank}], gpuStart != 0
	if all, some := est.early(o.channels, r.HostStart); some && !leftOut {
		verdict := stepNo
		if all && gpuStart != 0 {
			verdict = est.stepBack(r, gpuStart, o.channels)
			bound = false
		}
		pr.distrust(est.takeDistrusted()...)
		switch verdict {
		case stepNo:
			pr.distrust(commRank{r.Comm, r.Rank})
			leftOut = true
		case stepNew:
			leftOut = true
		}
	}
	if leftOut {
		for _, ch := range o.channels {
			if ch.GPUStart != 0 && ch.GPUStop >= ch.GPUStart {
				c.stats.StaleChannels++
			}
		}
		gpuStart, gpuStop = 0, 0
	}
	c.stats.KernelChannels += uint64(len(o.channels))
	if bound && gpuStart != 0 {
		est.bound(r, gpuStart, o.channels)
		pr.distrust(est.takeDistrusted()...)
	}
	if off, ok := est.offset(); ok && gpuStart != 0 {
		rec.HasDevice = true
		rec.DeviceStart = c.clock.at(int64(gpuStart) + off)
		rec.DeviceEnd = c.clock.at(int64(gpuStop) + off)
		pr.latest = max(pr.latest, uint64(int64(gpuStop)+off))
	}
	pr.latest = max(pr.latest, r.HostEnd, o.proxyStop)
	if o.proxyStop != 0 && r.Kind == KindP2P {
		rec.Collective.TransferEnd = c.clock.at(int64(o.proxyStop))
	}
	if b := o.batch; b != nil && !b.broken {
		return c.holdLocked(pr, b, rec, r, out)
	}
	return c.emitLocked(pr, rec, r.HostStart, out)
}

// emitLocked counts rec, which the plugin's record enqueued at host
// (CLOCK_MONOTONIC ns) made, and passes it on.
func (c *Collector) emitLocked(pr *process, rec profiler.Record, host uint64, out []profiler.Record) []profiler.Record {
	c.stats.Records++
	if !rec.HasDevice {
		c.stats.HostOnly++
	}
	if rec.Collective.TransferEnd != 0 && rec.Kind == profiler.KindP2P {
		c.stats.ProxyTimed++
	}
	return pr.labelOut(rec, host, out)
}

// opSeq is an operation's sequence number in its communicator, the same
// on every rank: a p2p's as the plugin numbered it; a collective's NCCL's
// number, which counts each function apart (AllReduce #2 and Broadcast #2
// are different calls), times 16, plus the function's code, so that
// collectives of different functions never share one (seen on the GPU:
// DDP's initial Broadcasts matched with its AllReduces).
func opSeq(r Record) uint64 {
	if r.Kind != KindCollective {
		return r.Seq
	}
	return r.Seq<<4 | uint64(r.Func&15)
}

// maxEarly bounds the ranges a process of unknown rank keeps.
const maxEarly = 1 << 12

// rangeLocked turns an NVTX range record into a profiler host range: a
// step range (WithStepRange) opens a step at its push and becomes the
// step's range at its pop; any other range carries the step it started
// in.
func (c *Collector) rangeLocked(pr *process, r Record, out []profiler.Record) []profiler.Record {
	pr.latest = max(pr.latest, r.RangeBegin, r.RangeEnd)
	if pr.seen == nil {
		pr.seen = make(map[uint32]uint64)
	}
	pr.seen[r.TID] = max(pr.seen[r.TID], r.RangeBegin, r.RangeEnd)
	out = pr.settle(out, false)
	if r.LostRanges > pr.lost[r.TID] {
		c.stats.RangesLost += r.LostRanges - pr.lost[r.TID]
		pr.lost[r.TID] = r.LostRanges
	}
	if r.Name == "" {
		r.Name = unnamedRange // a record needs a name (Ingest refuses a batch with one without)
	}
	isStep := r.Depth == 0 && c.cfg.stepName != ""
	n := int32(profiler.None)
	if isStep {
		var ok bool
		if n, ok = naming.StepNumber(r.Name, c.cfg.stepName, pr.nextStep); !ok {
			isStep = false
		}
	}
	if r.RangeStart {
		if isStep {
			_, out = c.stepLocked(pr, r.TID, r.Ordinal, r.RangeBegin, n, out)
		}
		return out
	}
	c.nextID++
	rec := profiler.Record{
		ID:        c.nextID,
		Name:      r.Name,
		Kind:      profiler.KindHost,
		Depth:     int(r.Depth),
		Device:    pr.cudaDevice(),
		Labels:    pr.labelsAt(r.RangeBegin),
		HostStart: c.clock.at(int64(r.RangeBegin)),
		HostEnd:   c.clock.at(int64(r.RangeEnd)),
	}
	switch {
	case isStep:
		var s *stepSpan
		s, out = c.stepLocked(pr, r.TID, r.Ordinal, r.RangeBegin, n, out)
		if s.end != 0 {
			// Already ended: cut short when its process's connection
			// ended (a reconnect brought its end late), or sent twice.
			return out
		}
		s.end = r.RangeEnd
		rec.Name = profiler.StepName
		rec.Labels = profiler.NoLabels
		rec.Step, rec.Stage = s.n, pr.stage
	case r.Depth == 0 && r.Name == profiler.StepName:
		// Named as the profiler's step ranges are, but not the job's step
		// range (-step-range names another): it must not be taken for one.
		rec.Name = profiler.StepName + " (nvtx)"
	}
	at := r.RangeBegin
	if isStep {
		at = r.RangeEnd
	}
	return c.rangeOutLocked(pr, rec, isStep, at, out)
}

// unnamedRange names an NVTX range pushed with an empty name.
const unnamedRange = "(unnamed)"

// rangeOutLocked delivers a range record of pr's: held back until the
// process's rank is known, a step range until its operations have
// arrived (releaseSteps; at is its end), and any other range until its
// step is known for good (labelOut; at is its start: a thread other than
// the step thread's may report it before that thread's step records).
func (c *Collector) rangeOutLocked(pr *process, rec profiler.Record, isStep bool, at uint64, out []profiler.Record) []profiler.Record {
	if pr.rank < 0 && len(pr.early)-pr.earlyActs >= maxEarly {
		out = c.loneLocked(pr, out)
	}
	if pr.rank < 0 {
		if len(pr.early)-pr.earlyActs >= maxEarly {
			c.stats.RangesDropped++
			return out
		}
		pr.early = append(pr.early, rec)
	}
	c.stats.Ranges++
	if isStep {
		c.stats.Steps++
	}
	if pr.rank < 0 {
		return out
	}
	rec.Rank = pr.rank
	if isStep {
		pr.held = append(pr.held, heldStep{rec, at, time.Now()})
		return pr.releaseSteps(out, false)
	}
	return pr.labelOut(pr.stamp(rec), at, out)
}

// stepLocked returns pr's step opened by the push (tid, ordinal), opening
// it as step n (or the next number, when n is not above the process's
// previous step: names that restart each epoch) if it is not known yet —
// this is its start record, or that was lost. A new step of a thread
// proves its older ones ended: those still open (their end record was
// lost) are cut short at its start.
func (c *Collector) stepLocked(pr *process, tid uint32, ordinal, start uint64, n int32, out []profiler.Record) (*stepSpan, []profiler.Record) {
	for i := len(pr.steps) - 1; i >= 0; i-- {
		if s := &pr.steps[i]; s.tid == tid && s.ordinal == ordinal {
			return s, out
		}
	}
	for i := range pr.steps {
		if s := &pr.steps[i]; s.tid == tid && s.end == 0 {
			out = c.cutStepLocked(pr, s, max(start, s.start), out)
		}
	}
	if len(pr.steps) == maxSteps {
		pr.steps = append(pr.steps[:0], pr.steps[1:]...)
	}
	n = max(n, pr.nextStep)
	pr.steps = append(pr.steps, stepSpan{tid: tid, ordinal: ordinal, start: start, n: n})
	if n < math.MaxInt32 {
		pr.nextStep = n + 1
	}
	return &pr.steps[len(pr.steps)-1], out
}

// cutStepLocked ends pr's open step s at end as cut short.
func (c *Collector) cutStepLocked(pr *process, s *stepSpan, end uint64, out []profiler.Record) []profiler.Record {
	s.end = end
	c.nextID++
	rec := profiler.Record{
		ID: c.nextID, Name: profiler.StepName, Kind: profiler.KindHost, Labels: profiler.NoLabels, Device: pr.cudaDevice(),
		HostStart: c.clock.at(int64(s.start)), HostEnd: c.clock.at(int64(s.end)), CutShort: true,
	}
	rec.Step, rec.Stage = s.n, pr.stage
	return c.rangeOutLocked(pr, rec, true, s.end, out)
}

// cudaDevice is the device of pr's first communicator, as its operations
// carry it: the step accountants group a step's records by device.
func (pr *process) cudaDevice() runtime.Device {
	return runtime.Device{Type: runtime.CUDA, Index: int(pr.device)}
}

// releaseSteps delivers the held step ranges that no pending operation
// was enqueued before the end of — all of them with all — oldest first.
// It also forgets the delivered operations at the front of each thread's
// pr.pending, steps or none, so that they stay as short as what is in
// flight.
func (pr *process) releaseSteps(out []profiler.Record, all bool) []profiler.Record {
	oldest := uint64(math.MaxUint64)
	if all {
		pr.pending = nil
	}
	// The oldest operation still to be delivered: the earliest of the
	// threads' first ones, each found in amortised constant time (those
	// delivered are dropped from the front).
	for tid, q := range pr.pending {
		for len(q) > 0 {
			p := q[0]
			if o, ok := pr.ops[p.task]; ok && o.have && o.rec.HostStart == p.start {
				oldest = min(oldest, p.start)
				break
			}
			q = q[1:]
		}
		if len(q) == 0 {
			delete(pr.pending, tid)
		} else {
			pr.pending[tid] = q
		}
	}
	if len(pr.held) == 0 {
		return out
	}
	n := 0
	var now time.Time
	for n < len(pr.held) {
		h := &pr.held[n]
		if len(pr.held)-n <= MaxHeldSteps && !all {
			if h.end >= oldest {
				break
			}
			if !pr.act.through(h.end) {
				// Its kernels may not all have come: CUPTI hands them over
				// a buffer at a time.
				if now.IsZero() {
					now = time.Now()
				}
				if now.Sub(h.at) < kernelWait {
					break
				}
			}
		}
		out = append(out, pr.stamp(pr.held[n].rec))
		n++
	}
	pr.held = append(pr.held[:0], pr.held[n:]...)
	return out
}

// stamp gives a step or range record made before the process's device
// and stage were known (its first communicator came later) that device,
// as its operations carry it, and that stage.
func (pr *process) stamp(rec profiler.Record) profiler.Record {
	if rec.Device.Type == runtime.CUDA && rec.Device.Index < 0 && pr.device >= 0 {
		rec.Device.Index = int(pr.device)
	}
	if rec.Stage == profiler.None {
		rec.Stage = pr.stage
	}
	return rec
}

// releaseEarly delivers the ranges kept until the process's rank was
// known.
func (pr *process) releaseEarly(out []profiler.Record) []profiler.Record {
	for _, rec := range pr.early {
		rec.Rank = pr.rank
		out = append(out, pr.stamp(rec))
	}
	pr.early, pr.earlyActs = nil, 0
	return out
}

// stageLocked takes the process's pipeline stage from a communicator it
// made, if that is the pipeline's (WithPipelineGroup) and larger than any
// it took a stage from before. One of two ranks gives none: PyTorch makes
// a communicator of two neighbouring stages, named as its process group,
// for a send or receive outside a batch without eager initialisation, and
// a process's rank in that is not its stage; the sends over it stage the
// process instead (stageBySendsLocked), as a pipeline of two.
func (c *Collector) stageLocked(pr *process, r Record) {
	want := c.cfg.pipeline
	if r.Rank < 0 || r.Rank > math.MaxInt16 || r.NRanks < 2 || want == NoPipelineGroup {
		return
	}
	if want != "" && !namedAs(r.CommName, want) || want == "" && !naming.PipelineGroup(r.CommName) {
		return
	}
	if r.NRanks == 2 {
		pr.namedPair = true
		if c.pairName == "" {
			c.pairName = r.CommName
		}
		return
	}
	if !pr.byName {
		// A name says which is the pipeline's: it overrules the sends.
		pr.byName, pr.stage, pr.stages, pr.provisional = true, profiler.None, 0, false
	}
	if r.NRanks <= pr.stages {
		return
	}
	pr.stage, pr.stages = int16(r.Rank), r.NRanks
	if int(r.NRanks) > c.namedStages {
		c.stats.PipelineGroup, c.namedStages = r.CommName, int(r.NRanks)
	}
}

// stageBySendsLocked notes a communicator a process sends or receives
// over, and the peer (r is one of its p2p records), and stages again the
// processes no name staged (restageLocked): a process's sends and
// receives join it to the other stages of its pipeline. A communicator
// named for another parallel dimension joins nothing, nor does one over
// which a process sends to itself or to a third peer: an all-to-all runs
// so (PyTorch's, over an expert-parallel group, to every rank itself
// included), and a pipeline stage has two neighbours.
func (c *Collector) stageBySendsLocked(pr *process, r Record) {
	want := c.cfg.pipeline
	if want == NoPipelineGroup || want != "" && !namedAs(r.CommName, want) ||
		r.Rank < 0 || r.Rank > math.MaxInt16 || r.NRanks < 2 || c.notPipeline[r.Comm] {
		return
	}
	sc, seen := pr.sends[r.Comm]
	added, ok := sc.addPeer(r.Peer)
	if r.Peer == r.Rank || !ok {
		// A send to itself or to a third peer: an all-to-all, whose
		// sends join no pipeline.
		c.notPipelineLocked(r.Comm)
		return
	}
	if seen {
		if added {
			pr.sends[r.Comm] = sc
			c.restageLocked()
		}
		return
	}
	if _, other := naming.Dimensions(r.CommName); other {
		return
	}
	if pr.sends == nil {
		pr.sends = make(map[uint64]sendComm)
	}
	sc.rank, sc.nranks = r.Rank, r.NRanks
	pr.sends[r.Comm] = sc
	if c.sendComms == nil {
		c.sendComms = make(map[uint64][]*process)
	}
	c.sendComms[r.Comm] = append(c.sendComms[r.Comm], pr)
	c.restageLocked()
}

// notPipelineLocked takes comm for an all-to-all's: its sends stage
// nobody, and the processes staged through it are staged again without.
func (c *Collector) notPipelineLocked(comm uint64) {
	if c.notPipeline == nil {
		c.notPipeline = make(map[uint64]bool)
	}
	c.notPipeline[comm] = true
	for _, q := range c.sendComms[comm] {
		delete(q.sends, comm)
	}
	delete(c.sendComms, comm)
	c.restageLocked()
}

// restageLocked stages every process that sends and receives and that
// no name staged. Its sets are those of processes joined by their sends
// and receives: a process's peer in a communicator is the process of
// that rank there, once that one has sent or received over it too; a set
// is complete when every peer of every member is known, and is one
// pipeline. In a complete set, a process's stage is its rank in a
// communicator of 3 ranks or more that spans the set (the stage group,
// over which PyTorch sends in a batch, or outside one with eager
// initialisation), else its place in the set by launcher rank: the set's
// communicators have two ranks (a pipeline of two, or PyTorch's
// communicators of two neighbours for a send outside a batch, whose rank
// 0 is the lower group rank), or are larger than the pipeline (the
// world's); PyTorch's groups list their ranks in order, and a pipeline's
// stages come in that order (Megatron-LM's, a device mesh's). Without
// launcher ranks only a set of two is staged. Until the set is complete
// (its first sends still coming, or some of its processes on another
// host) a process is staged provisionally: by its rank in its largest
// communicator where that has 3 ranks or more, else by its place among
// those seen, no lower than its rank in a pair (a lower bound). One
// host's collector sees a few dozen processes at most, and this runs
// only when a process first uses a communicator or a peer.
func (c *Collector) restageLocked() {
	byRank := make(map[uint64]map[int32]*process, len(c.sendComms))
	for comm, members := range c.sendComms {
		m := make(map[int32]*process, len(members))
		for _, q := range members {
			m[q.sends[comm].rank] = q
		}
		byRank[comm] = m
	}
	parent := map[*process]*process{}
	var find func(q *process) *process
	find = func(q *process) *process {
		if p, ok := parent[q]; ok && p != q {
			r := find(p)
			parent[q] = r
			return r
		}
		parent[q] = q
		return q
	}
	resolved := map[*process]bool{}
	var procs []*process
	for _, q := range c.procs {
		if len(q.sends) == 0 {
			if !q.byName {
				q.stage, q.stages, q.provisional = profiler.None, 0, false
			}
			continue
		}
		procs = append(procs, q)
		ok := true
		for comm, sc := range q.sends {
			for _, peer := range sc.peers[:sc.npeers] {
				if o := byRank[comm][peer]; o != nil {
					parent[find(q)] = find(o)
				} else {
					ok = false
				}
			}
		}
		resolved[q] = ok
	}
	sets := map[*process][]*process{}
	for _, q := range procs {
		root := find(q)
		sets[root] = append(sets[root], q)
	}
	for _, set := range sets {
		stageSet(set, resolved)
	}
}

// stageSet stages the processes of one set (restageLocked).
func stageSet(set []*process, resolved map[*process]bool) {
	complete, ranked := true, true
	for _, q := range set {
		complete = complete && resolved[q]
		ranked = ranked && q.worldRank >= 0
	}
	slices.SortFunc(set, func(a, b *process) int { return cmp.Compare(a.worldRank, b.worldRank) })
	for i, q := range set {
		if q.byName {
			continue
		}
		// Its largest communicator, the higher rank where two tie.
		var largest sendComm
		for _, sc := range q.sends {
			if sc.nranks > largest.nranks || sc.nranks == largest.nranks && sc.rank > largest.rank {
				largest = sc
			}
		}
		stage, stages := int16(profiler.None), int32(0)
		switch {
		case complete && largest.nranks >= 3 && int(largest.nranks) == len(set):
			// A stage group its sends span: its rank there.
			stage, stages = int16(largest.rank), largest.nranks
		case complete && ranked && len(set) <= math.MaxInt16:
			// Its place: pairs, or a larger communicator (the whole
			// world's, say) of which its pipeline is a part.
			stage, stages = int16(i), int32(len(set))
		case complete && len(set) <= 2:
			stage, stages = int16(largest.rank), 2
		case !complete && largest.nranks >= 3:
			// A stage group some of whose processes have not sent yet,
			// or are elsewhere (another host).
			stage, stages = int16(largest.rank), largest.nranks
		case !complete && ranked && len(set) <= math.MaxInt16:
			// Its place among those seen, no lower than its rank in a
			// pair whose other member has not sent yet: a lower bound.
			stage, stages = int16(max(int32(i), largest.rank)), int32(max(len(set), 2))
		}
		q.stage, q.stages, q.provisional = stage, stages, !complete && stage != profiler.None
	}
}

// labelsAt is the labels of an operation or range of the process that
// started at t (plugin CLOCK_MONOTONIC ns): the step whose range holds t,
// and the process's pipeline stage.
func (pr *process) labelsAt(t uint64) profiler.Labels {
	l := profiler.NoLabels
	l.Stage = pr.stage
	for i := len(pr.steps) - 1; i >= 0; i-- {
		s := &pr.steps[i]
		if s.start <= t {
			if s.end == 0 || t <= s.end {
				l.Step = s.n
			}
			break
		}
	}
	return l
}

func (c *Collector) ingest(recs []profiler.Record) {
	if len(recs) == 0 {
		return
	}
	if err := c.p.Ingest(c.ingestCtx, recs); err != nil {
		c.mu.Lock()
		c.stats.IngestErrors++
		c.stats.LastError = err.Error()
		c.mu.Unlock()
	}
}

// Close stops accepting connections, waits (until ctx is done) for the
// open ones to end, closes what is still open, delivers every operation
// still waiting for kernel channels host-only, and removes the socket
// directory. Connections it had to close are an error; a ctx already done
// with none open is not. Later calls return the first call's result.
func (c *Collector) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

// acceptGrace is how long Close goes on accepting: connections already
// made but not yet accepted (the last counts of a process whose stream
// was stuck as it exited) must not be dropped with the listener.
const acceptGrace = 50 * time.Millisecond

func (c *Collector) close(ctx context.Context) error {
	close(c.stop)
	// From ctx's end, a hand-over waiting for the profiler (a sink stuck
	// in Consume) gives up, counted in IngestErrors: Close returns by its
	// deadline whatever the sinks do.
	defer c.stopIngest()
	defer context.AfterFunc(ctx, c.stopIngest)()
	// Accept what is waiting; the loop returns at the first deadline
	// that finds none (the stop is closed).
	if err := c.ln.SetDeadline(time.Now().Add(acceptGrace)); err == nil {
		select {
		case <-c.accepting:
		case <-ctx.Done():
		}
	}
	c.ln.Close()
	// The accept loop may still be starting a reader (ctx ended first):
	// every reader must be counted before the wait for them begins.
	<-c.accepting
	done := make(chan struct{})
	go func() { c.readers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		c.mu.Lock()
		c.closing = true
		n := len(c.conns)
		for conn := range c.conns {
			conn.Close()
		}
		c.mu.Unlock()
		<-done
		// ctx may have ended before Close was called, with no connection
		// ever open, or as the last reader was on its way out: nothing was
		// cut short then.
		c.mu.Lock()
		c.stats.Cut += n
		c.mu.Unlock()
		if n > 0 {
			err = fmt.Errorf("ncclplugin: Close: %d plugin connection(s) still open: %w", n, ctx.Err())
		}
	}
	c.bg.Wait()
	c.mu.Lock()
	c.closing = true
	var out []profiler.Record
	for _, pr := range c.procs {
		out = c.expireLocked(pr, time.Time{}, out)
	}
	c.mu.Unlock()
	c.ingest(out)
	if rerr := os.RemoveAll(c.dir); rerr != nil && err == nil {
		err = fmt.Errorf("ncclplugin: removing %s: %w", c.dir, rerr)
	}
	return err
}
