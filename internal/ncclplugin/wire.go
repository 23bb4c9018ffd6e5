package ncclplugin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Wire constants (trainscope_nccl_wire.h).
const (
	Magic      = "TSNP"
	Version    = 4
	RecordSize = 128
)

// Kind is a record's kind.
type Kind uint16

// Record kinds.
const (
	KindCommInit      Kind = 1
	KindCollective    Kind = 2
	KindP2P           Kind = 3
	KindKernelChannel Kind = 4
	KindDrops         Kind = 5
	KindCommFinalize  Kind = 6
	KindProxyOp       Kind = 7
	KindRange         Kind = 8  // an NVTX range of the application's
	KindActivity      Kind = 9  // a kernel, copy or memset the GPU ran (CUPTI)
	KindName          Kind = 10 // a piece of a kernel's name
)

var kindNames = [...]string{"", "comm-init", "collective", "p2p", "kernel-channel", "drops", "comm-finalize", "proxy-op", "range", "activity", "name"}

// What an activity record is (tsnp_activity.what).
type Activity uint8

// Activities.
const (
	ActTracing     Activity = 0 // tracing began; Note names the CUPTI library
	ActKernel      Activity = 1
	ActMemcpy      Activity = 2
	ActMemset      Activity = 3
	ActUnavailable Activity = 4 // tracing could not begin; Note says why
	// ActMemory: device memory allocated (CopyKind MemAllocated) or
	// released (MemReleased), Bytes of it, at RangeBegin = RangeEnd.
	ActMemory Activity = 5
)

// The operations of an ActMemory record (its CopyKind).
const (
	MemAllocated = 1
	MemReleased  = 2
)

// The phases a labelled activity record carries (struct tsnp_label).
const (
	PhaseForward  = 1
	PhaseBackward = 2

	actLabelled = 2 // struct tsnp_activity's flag TSNP_ACT_LABELLED
)

// MaxNameLen is the longest kernel name the plugin sends (TSNP_NAME_MAX).
const MaxNameLen = 4096

// Range record flags.
const (
	rangeStart     = 1 // sent at the push of a top-level range
	rangeTruncated = 2 // the name did not fit
)

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint16(k))
}

// Operation names by wire code, as profiler records name them. NCCL's
// own all-to-all (NCCL spells it AlltoAll) is named as the all-to-alls
// gathered from group blocks (alltoall.go) are: one operation, one name.
var funcNames = [...]string{"", "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "Send", "Recv", "AllToAll", "Gather", "Scatter", "SendRecv"}

// Element types by wire code: name (as runtime.DataType names them where
// it has the type) and size in bytes.
var dtypes = [...]struct {
	name string
	size uint64
}{{"", 0}, {"int8", 1}, {"uint8", 1}, {"int32", 4}, {"uint32", 4}, {"int64", 8}, {"uint64", 8}, {"float16", 2}, {"float32", 4}, {"float64", 8}, {"bfloat16", 2}, {"float8e4m3", 1}, {"float8e5m2", 1}}

var algoNames = [...]string{"", "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"}
var protoNames = [...]string{"", "LL", "LL128", "SIMPLE"}

func name(table []string, code uint8) string {
	if int(code) < len(table) && code != 0 {
		return table[code]
	}
	return "unknown"
}

// Hello is the first frame of a connection: who is sending.
type Hello struct {
	Version    uint16
	RecordSize uint16
	PID        uint32
	UID        uint32
	MonoNs     uint64 // the plugin's CLOCK_MONOTONIC when it connected
	RealtimeNs uint64 // CLOCK_REALTIME at the same moment
	Hostname   string
	// WorldRank is the process's rank as its launcher numbered it
	// (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK), -1 when none
	// was set.
	WorldRank int32
	// LocalSize is the number of processes the launcher started on the
	// process's host, those that can reach the collector's local socket
	// (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
	// SLURM_NTASKS_PER_NODE), -1 when none was set.
	LocalSize int32
}

// Record is one decoded record. Which fields mean something depends on
// Kind (docs/nccl-plugin.md); the rest are zero.
type Record struct {
	Kind     Kind
	TID      uint32 // kernel thread id NCCL called the plugin on
	Comm     uint64 // NCCL communicator id (commHash)
	CommName string
	Rank     int32 // the process's rank in Comm
	NRanks   int32
	NNodes   int32 // comm-init
	Device   int32 // comm-init: CUDA device ordinal, -1 unknown
	// NCCLVersion is the process's NCCL version code (comm-init:
	// ncclGetVersion, 22809 for 2.28.9), 0 where it did not say.
	NCCLVersion int32
	// DeviceUUID is the GPU's UUID (comm-init: cuDeviceGetUuid), zero
	// where it was not read: it names the GPU across processes, whatever
	// their CUDA_VISIBLE_DEVICES made its ordinal.
	DeviceUUID [16]byte

	// Collective, p2p, and (the parent's) kernel-channel identity.
	Task  uint64 // the plugin's number for the operation, unique in the process
	Seq   uint64
	Func  uint8 // wire code; Op names it
	DType uint8
	Peer  int32 // p2p peer, collective root; -1 none
	// Collective and p2p.
	Count, Bytes       uint64 // elements, and count × element size
	Algo, Proto        uint8
	NChannels, NWarps  uint8
	HostStart, HostEnd uint64 // CLOCK_MONOTONIC ns: enqueue start and end
	// P2p: the process's number for the ncclGroupStart/ncclGroupEnd
	// block that enqueued it, the same for every p2p of the block; 0
	// where NCCL does not say (profiler interface v4).
	APIGroup uint64
	// Kernel channel.
	ParentKind          Kind // KindCollective or KindP2P
	Channel             uint8
	GPUStart, GPUStop   uint64 // GPU %globaltimer ns; GPUStop 0 when not reported
	SeenStart, SeenStop uint64 // CLOCK_MONOTONIC ns when the proxy thread reported them
	// Proxy operation (a p2p's, over a network transport): CLOCK_MONOTONIC
	// ns when the proxy thread started it (the host posted it) and when it
	// finished moving the data; ProxyStop is 0 in the record sent at the
	// start. ParentKind and Channel as for a kernel channel.
	ProxyStart, ProxyStop uint64
	IsSend                bool

	// Range (NVTX): CLOCK_MONOTONIC ns at the push and the pop (RangeEnd
	// 0 in the record sent at a top-level push, RangeStart true); its
	// nesting depth on its thread (0 top level); the thread's push
	// number, the same in both records of a range; the name (Truncated:
	// cut to the record's 72 bytes); LostRanges, the thread's ranges so
	// far not sent for being nested too deeply.
	RangeBegin, RangeEnd uint64
	RangeStart           bool
	Depth                int32
	Ordinal              uint64
	Name                 string
	Truncated            bool
	LostRanges           uint64

	// Activity (CUPTI): what it is; its device interval (CLOCK_MONOTONIC
	// ns, in RangeBegin and RangeEnd); Device (CUDA ordinal); the CUPTI
	// context, stream and correlation ids; bytes copied or set (in
	// Bytes); a kernel's name number (NameID, 0 none), grid and block;
	// Monotonic: CUPTI took the times on CLOCK_MONOTONIC itself. A
	// tracing or unavailable record has its time in At and its text in
	// Note. Labelled: it was launched inside an NVTX range named as
	// forward or backward work (PhaseForward, PhaseBackward), of
	// ActChunk and ActMicrobatch where the name gave them (else −1).
	What                         Activity
	CopyKind                     uint8
	Context, Stream, Correlation uint32
	NameID                       uint32
	Grid, Block                  [3]int32
	Monotonic                    bool
	Note                         string
	Labelled                     bool
	ActPhase                     uint8
	ActChunk                     int16
	ActMicrobatch                int32

	// Name: a piece of kernel name NameID, Name at byte NameOffset of a
	// name NameLen bytes long (Truncated: cut to MaxNameLen).
	NameOffset, NameLen uint32

	// Comm-init, comm-finalize, drops: when (CLOCK_MONOTONIC ns).
	At uint64
	// Drops, cumulative for the process; ActivityDropped: device
	// activity records CUPTI dropped or could not time; BuffersUnreturned: once the
	// process is exiting, the activity buffers CUPTI had not handed back
	// (their records are in no count).
	RingFull, Refused, Unsent, ActivityDropped, BuffersUnreturned uint64
	// Drops: proxy operations of other processes (PXN) that this
	// process's proxy threads ran and did not record (0 from a plugin
	// before this count).
	ForeignProxyOps uint64
}

// Op is the operation's name ("AllReduce"), or "unknown".
func (r *Record) Op() string { return name(funcNames[:], r.Func) }

// DTypeName is the element type's name ("float32"), or "unknown".
func (r *Record) DTypeName() string {
	if int(r.DType) < len(dtypes) && r.DType != 0 {
		return dtypes[r.DType].name
	}
	return "unknown"
}

// AlgoName and ProtoName are NCCL's algorithm and protocol names.
func (r *Record) AlgoName() string  { return name(algoNames[:], r.Algo) }
func (r *Record) ProtoName() string { return name(protoNames[:], r.Proto) }

// ErrVersion matches (errors.Is) the error a stream of another format
// version gives, a *VersionError.
var ErrVersion = errors.New("ncclplugin: unsupported record stream version")

// ErrCutShort matches (errors.Is) the error of a stream that ends inside
// a record: its process exited, or was killed, while sending it. A plugin
// that cut its own stream as it exited counts the record as unsent.
var ErrCutShort = errors.New("stream ends inside a record")

// VersionError is the error for a stream whose hello names a format
// version this decoder does not read: the plugin and profile-run were
// built from different sources.
type VersionError struct{ Version uint16 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("ncclplugin: plugin record stream version %d, this profile-run reads version %d: rebuild the plugin (make -C plugins/nccl)", e.Version, Version)
}

// Is reports whether target is ErrVersion.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// Reader decodes a record stream. It never panics on bad input: the
// first malformed or truncated frame is an error naming its byte offset.
type Reader struct {
	r     io.Reader
	off   int64
	hello *Hello
	err   error
	buf   [RecordSize]byte
}

// NewReader returns a Reader of r; the hello is read by the first call of
// Hello or Next.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Offset is the number of bytes consumed so far.
func (d *Reader) Offset() int64 { return d.off }

func (d *Reader) fill() (int, error) {
	n, err := io.ReadFull(d.r, d.buf[:])
	return n, err
}

// Hello reads and validates the hello frame (once).
func (d *Reader) Hello() (Hello, error) {
	if d.hello != nil {
		return *d.hello, nil
	}
	if d.err != nil {
		return Hello{}, d.err
	}
	n, err := d.fill()
	switch {
	case err == io.EOF:
		d.err = fmt.Errorf("ncclplugin: byte 0: empty stream, no hello")
	case err == io.ErrUnexpectedEOF:
		d.err = fmt.Errorf("ncclplugin: byte %d: stream ends inside the hello (%d of %d bytes)", d.off+int64(n), n, RecordSize)
	case err != nil:
		d.err = fmt.Errorf("ncclplugin: byte %d: %w", d.off+int64(n), err)
	}
	if d.err != nil {
		return Hello{}, d.err
	}
	b := d.buf[:]
	if string(b[0:4]) != Magic {
		d.err = fmt.Errorf("ncclplugin: byte 0: not a trainscope NCCL plugin stream (magic %q, want %q)", b[0:4], Magic)
		return Hello{}, d.err
	}
	h := Hello{
		Version:    binary.LittleEndian.Uint16(b[4:]),
		RecordSize: binary.LittleEndian.Uint16(b[6:]),
		PID:        binary.LittleEndian.Uint32(b[8:]),
		UID:        binary.LittleEndian.Uint32(b[12:]),
		MonoNs:     binary.LittleEndian.Uint64(b[16:]),
		RealtimeNs: binary.LittleEndian.Uint64(b[24:]),
		Hostname:   cstring(b[32:96]),
		WorldRank:  int32(binary.LittleEndian.Uint32(b[96:])) - 1,
		LocalSize:  int32(binary.LittleEndian.Uint32(b[100:])) - 1,
	}
	if h.Version != Version {
		d.err = &VersionError{Version: h.Version}
		return Hello{}, d.err
	}
	if h.RecordSize != RecordSize {
		d.err = fmt.Errorf("ncclplugin: byte 6: record size %d, version %d has %d", h.RecordSize, Version, RecordSize)
		return Hello{}, d.err
	}
	d.off += RecordSize
	d.hello = &h
	return h, nil
}

// Next returns the next record; io.EOF at a clean end of the stream (on
// a record boundary).
func (d *Reader) Next() (Record, error) {
	if _, err := d.Hello(); err != nil {
		return Record{}, err
	}
	if d.err != nil {
		return Record{}, d.err
	}
	n, err := d.fill()
	switch {
	case err == io.EOF:
		d.err = io.EOF
		return Record{}, io.EOF
	case err == io.ErrUnexpectedEOF:
		d.err = fmt.Errorf("ncclplugin: byte %d: %w (%d of %d bytes)", d.off, ErrCutShort, n, RecordSize)
		return Record{}, d.err
	case err != nil:
		d.err = fmt.Errorf("ncclplugin: byte %d: %w", d.off+int64(n), err)
		return Record{}, d.err
	}
	rec, err := decode(d.buf[:])
	if err != nil {
		d.err = fmt.Errorf("ncclplugin: byte %d: %w", d.off, err)
		return Record{}, d.err
	}
	d.off += RecordSize
	return rec, nil
}

// cstring is the NUL-padded string in b, as valid UTF-8: a name cut to
// its field can end inside a character, and what leaves here ends up in
// OTLP, where a string that is not UTF-8 fails the whole export.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func decode(b []byte) (Record, error) {
	le := binary.LittleEndian
	k := Kind(le.Uint16(b[0:]))
	switch k {
	case KindRange:
		return decodeRange(b)
	case KindActivity:
		return decodeActivity(b)
	case KindName:
		return decodeName(b)
	}
	r := Record{
		Kind:     k,
		TID:      le.Uint32(b[4:]),
		Comm:     le.Uint64(b[8:]),
		Rank:     int32(le.Uint32(b[64:])),
		NRanks:   int32(le.Uint32(b[68:])),
		CommName: cstring(b[96:128]),
	}
	task, seq := le.Uint64(b[16:]), le.Uint64(b[24:])
	t0, t1 := le.Uint64(b[32:]), le.Uint64(b[40:])
	a0, a1, a2 := le.Uint64(b[48:]), le.Uint64(b[56:]), le.Uint64(b[88:])
	peer := int32(le.Uint32(b[72:]))
	switch k {
	case KindCommInit, KindCommFinalize:
		r.At = t0
		if k == KindCommInit {
			r.NNodes = int32(le.Uint32(b[76:]))
			r.Device = peer
			if a0 <= math.MaxInt32 {
				r.NCCLVersion = int32(a0)
			}
			le.PutUint64(r.DeviceUUID[:8], a1)
			le.PutUint64(r.DeviceUUID[8:], a2)
		}
	case KindCollective, KindP2P:
		r.Task, r.Seq, r.HostStart, r.HostEnd = task, seq, t0, t1
		r.Count, r.Bytes, r.Peer = a0, a1, peer
		if k == KindP2P {
			r.APIGroup = a2
		}
		r.Func, r.DType, r.Algo, r.Proto, r.NChannels, r.NWarps = b[80], b[81], b[82], b[83], b[84], b[87]
		if task == 0 {
			return r, fmt.Errorf("%v record with task 0", k)
		}
		if t1 < t0 {
			return r, fmt.Errorf("%v record ends (%d ns) before it starts (%d ns)", k, t1, t0)
		}
	case KindKernelChannel:
		r.Task, r.Seq, r.GPUStart, r.GPUStop = task, seq, t0, t1
		r.SeenStart, r.SeenStop, r.Peer = a0, a1, peer
		r.Func, r.DType, r.Channel, r.ParentKind = b[80], b[81], b[85], Kind(b[86])
		if r.ParentKind != KindCollective && r.ParentKind != KindP2P {
			return r, fmt.Errorf("kernel-channel record with parent kind %d", b[86])
		}
		if task == 0 {
			return r, fmt.Errorf("kernel-channel record with task 0")
		}
	case KindProxyOp:
		r.Task, r.Seq, r.ProxyStart, r.ProxyStop = task, seq, t0, t1
		r.IsSend, r.Peer = a0 != 0, peer
		r.Func, r.DType, r.Channel, r.ParentKind = b[80], b[81], b[85], Kind(b[86])
		if r.ParentKind != KindP2P {
			return r, fmt.Errorf("proxy-op record with parent kind %d", b[86])
		}
		if task == 0 {
			return r, fmt.Errorf("proxy-op record with task 0")
		}
		if t1 != 0 && t1 < t0 {
			return r, fmt.Errorf("proxy-op record stops (%d ns) before it starts (%d ns)", t1, t0)
		}
	case KindDrops:
		r.At, r.RingFull, r.Refused, r.Unsent, r.ActivityDropped, r.BuffersUnreturned = t0, a0, a1, a2, seq, t1
		r.ForeignProxyOps = task
	default:
		return r, fmt.Errorf("unknown record kind %d", uint16(k))
	}
	return r, nil
}

// maxRangeDepth bounds a range record's depth: the plugin sends none
// deeper than it tracks (16 levels); more is a corrupt stream.
const maxRangeDepth = 1 << 10

// decodeRange reads a RANGE record (struct tsnp_range).
func decodeRange(b []byte) (Record, error) {
	le := binary.LittleEndian
	flags := le.Uint16(b[2:])
	r := Record{
		Kind:       KindRange,
		TID:        le.Uint32(b[4:]),
		Ordinal:    le.Uint64(b[16:]),
		LostRanges: le.Uint64(b[24:]),
		RangeBegin: le.Uint64(b[32:]),
		RangeEnd:   le.Uint64(b[40:]),
		Depth:      int32(le.Uint32(b[48:])),
		Name:       cstring(b[56:128]),
		RangeStart: flags&rangeStart != 0,
		Truncated:  flags&rangeTruncated != 0,
		Peer:       -1,
	}
	switch {
	case r.Ordinal == 0:
		return r, errors.New("range record with ordinal 0")
	case r.Depth < 0 || r.Depth > maxRangeDepth:
		return r, fmt.Errorf("range record with depth %d (0 to %d)", r.Depth, maxRangeDepth)
	case r.RangeStart && r.RangeEnd != 0:
		return r, fmt.Errorf("range start record with an end (%d ns)", r.RangeEnd)
	case !r.RangeStart && r.RangeEnd < r.RangeBegin:
		return r, fmt.Errorf("range record ends (%d ns) before it starts (%d ns)", r.RangeEnd, r.RangeBegin)
	}
	return r, nil
}

// decodeActivity reads an ACTIVITY record (struct tsnp_activity).
func decodeActivity(b []byte) (Record, error) {
	le := binary.LittleEndian
	r := Record{
		Kind:        KindActivity,
		TID:         le.Uint32(b[4:]),
		Monotonic:   le.Uint16(b[2:])&1 != 0,
		RangeBegin:  le.Uint64(b[8:]),
		RangeEnd:    le.Uint64(b[16:]),
		Bytes:       le.Uint64(b[24:]),
		Device:      int32(le.Uint32(b[32:])),
		Context:     le.Uint32(b[36:]),
		Stream:      le.Uint32(b[40:]),
		Correlation: le.Uint32(b[44:]),
		NameID:      le.Uint32(b[48:]),
		What:        Activity(b[52]),
		CopyKind:    b[53],
		Peer:        -1,
	}
	for i := range 3 {
		r.Grid[i] = int32(le.Uint32(b[56+4*i:]))
		r.Block[i] = int32(le.Uint32(b[68+4*i:]))
	}
	switch r.What {
	case ActTracing, ActUnavailable:
		r.At, r.RangeBegin, r.RangeEnd = r.RangeBegin, 0, 0
		r.Note = cstring(b[80:128])
	case ActKernel, ActMemcpy, ActMemset:
		if r.RangeEnd < r.RangeBegin {
			return r, fmt.Errorf("activity record ends (%d ns) before it starts (%d ns)", r.RangeEnd, r.RangeBegin)
		}
		if r.Device < 0 {
			return r, fmt.Errorf("activity record on device %d", r.Device)
		}
		if r.Labelled = le.Uint16(b[2:])&actLabelled != 0; r.Labelled {
			r.ActMicrobatch, r.ActChunk, r.ActPhase = int32(le.Uint32(b[80:])), int16(le.Uint16(b[84:])), b[86]
			switch {
			case r.ActPhase != PhaseForward && r.ActPhase != PhaseBackward:
				return r, fmt.Errorf("activity record labelled with phase %d", r.ActPhase)
			case r.ActChunk < -1 || r.ActMicrobatch < -1:
				return r, fmt.Errorf("activity record labelled with chunk %d, microbatch %d", r.ActChunk, r.ActMicrobatch)
			}
		}
	case ActMemory:
		switch {
		case r.RangeEnd != r.RangeBegin:
			return r, fmt.Errorf("memory record spans %d–%d ns: want one instant", r.RangeBegin, r.RangeEnd)
		case r.Device < 0:
			return r, fmt.Errorf("memory record on device %d", r.Device)
		case r.CopyKind != MemAllocated && r.CopyKind != MemReleased:
			return r, fmt.Errorf("memory record of operation %d: want 1 (allocated) or 2 (released)", r.CopyKind)
		case r.Bytes > 1<<62:
			return r, fmt.Errorf("memory record of %d bytes", r.Bytes)
		}
	default:
		return r, fmt.Errorf("activity record of unknown sort %d", r.What)
	}
	return r, nil
}

// decodeName reads a NAME record (struct tsnp_name).
func decodeName(b []byte) (Record, error) {
	le := binary.LittleEndian
	r := Record{
		Kind:       KindName,
		TID:        le.Uint32(b[4:]),
		Truncated:  le.Uint16(b[2:])&1 != 0,
		NameID:     le.Uint32(b[8:]),
		NameLen:    le.Uint32(b[12:]),
		NameOffset: le.Uint32(b[16:]),
		Peer:       -1,
	}
	text := b[24:128]
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	r.Name = string(text) // raw bytes: pieces are joined before the name is made valid UTF-8
	switch {
	case r.NameID == 0:
		return r, errors.New("name record with number 0")
	case r.NameLen > MaxNameLen:
		return r, fmt.Errorf("name record of a %d-byte name (at most %d)", r.NameLen, MaxNameLen)
	case r.NameOffset > r.NameLen || uint64(r.NameOffset)+uint64(len(r.Name)) > uint64(r.NameLen):
		return r, fmt.Errorf("name record piece at %d+%d of a %d-byte name", r.NameOffset, len(r.Name), r.NameLen)
	}
	return r, nil
}
