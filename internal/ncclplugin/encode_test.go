package ncclplugin

import "encoding/binary"

// The test side of the wire format, written from the layout in
// plugins/nccl/trainscope_nccl_wire.h (offsets in its comments), not from
// the decoder.

// wireVersion is TSNP_VERSION.
const wireVersion = 4

func helloFrame(version uint16, pid uint32, host string) []byte {
	b := make([]byte, 128)
	copy(b, "TSNP")
	binary.LittleEndian.PutUint16(b[4:], version)
	binary.LittleEndian.PutUint16(b[6:], 128)
	binary.LittleEndian.PutUint32(b[8:], pid)
	binary.LittleEndian.PutUint32(b[12:], 1000)
	binary.LittleEndian.PutUint64(b[16:], 5)
	binary.LittleEndian.PutUint64(b[24:], 6)
	copy(b[32:96], host)
	return b
}

// wireRec holds a record's raw fields by their header names.
type wireRec struct {
	kind                         uint16
	tid                          uint32
	hash, task, seq, t0, t1      uint64
	a0, a1, a2                   uint64
	rank, nranks, peer, nnodes   int32
	fn, dtype, algo, proto       uint8
	nch, channel, parent, nwarps uint8
	name                         string
}

func (w wireRec) frame() []byte {
	b := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint16(b[0:], w.kind)
	le.PutUint32(b[4:], w.tid)
	le.PutUint64(b[8:], w.hash)
	le.PutUint64(b[16:], w.task)
	le.PutUint64(b[24:], w.seq)
	le.PutUint64(b[32:], w.t0)
	le.PutUint64(b[40:], w.t1)
	le.PutUint64(b[48:], w.a0)
	le.PutUint64(b[56:], w.a1)
	le.PutUint32(b[64:], uint32(w.rank))
	le.PutUint32(b[68:], uint32(w.nranks))
	le.PutUint32(b[72:], uint32(w.peer))
	le.PutUint32(b[76:], uint32(w.nnodes))
	b[80], b[81], b[82], b[83] = w.fn, w.dtype, w.algo, w.proto
	b[84], b[85], b[86], b[87] = w.nch, w.channel, w.parent, w.nwarps
	le.PutUint64(b[88:], w.a2)
	copy(b[96:128], w.name)
	return b
}

func stream(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// rangeFrame is a RANGE record (struct tsnp_range): flags 1 = START,
// 2 = TRUNCATED.
func rangeFrame(tid uint32, flags uint16, ordinal, lost, t0, t1 uint64, depth int32, name string) []byte {
	b := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint16(b[0:], 8)
	le.PutUint16(b[2:], flags)
	le.PutUint32(b[4:], tid)
	le.PutUint64(b[16:], ordinal)
	le.PutUint64(b[24:], lost)
	le.PutUint64(b[32:], t0)
	le.PutUint64(b[40:], t1)
	le.PutUint32(b[48:], uint32(depth))
	le.PutUint32(b[52:], uint32(len(name)))
	copy(b[56:128], name)
	return b
}

// activityFrame is an ACTIVITY record (struct tsnp_activity): what 0
// tracing, 1 kernel, 2 memcpy, 3 memset, 4 unavailable; flags 1 =
// MONOTONIC.
func activityFrame(what uint8, t0, t1 uint64, device, stream, nameID uint32, bytes uint64, copyKind uint8, note string) []byte {
	b := make([]byte, 128)
	le := binary.LittleEndian
	le.PutUint16(b[0:], 9)
	le.PutUint16(b[2:], 1)
	le.PutUint32(b[4:], 77)
	le.PutUint64(b[8:], t0)
	le.PutUint64(b[16:], t1)
	le.PutUint64(b[24:], bytes)
	le.PutUint32(b[32:], device)
	le.PutUint32(b[36:], 1)
	le.PutUint32(b[40:], stream)
	le.PutUint32(b[44:], 99)
	le.PutUint32(b[48:], nameID)
	b[52], b[53] = what, copyKind
	copy(b[80:128], note)
	return b
}

// labelled is f, an ACTIVITY record, labelled (TSNP_ACT_LABELLED) with
// phase (1 forward, 2 backward), chunk and microbatch (struct tsnp_label).
func labelled(f []byte, phase uint8, chunk int16, microbatch int32) []byte {
	le := binary.LittleEndian
	le.PutUint16(f[2:], le.Uint16(f[2:])|2)
	clear(f[80:128])
	le.PutUint32(f[80:], uint32(microbatch))
	le.PutUint16(f[84:], uint16(chunk))
	f[86] = phase
	return f
}

// nameFrames are the NAME records (struct tsnp_name) of name number id,
// in pieces of 104 bytes.
func nameFrames(id uint32, name string) [][]byte {
	var out [][]byte
	for off := 0; off == 0 || off < len(name); off += 104 {
		b := make([]byte, 128)
		le := binary.LittleEndian
		le.PutUint16(b[0:], 10)
		le.PutUint32(b[4:], 77)
		le.PutUint32(b[8:], id)
		le.PutUint32(b[12:], uint32(len(name)))
		le.PutUint32(b[16:], uint32(off))
		copy(b[24:128], name[off:min(off+104, len(name))])
		out = append(out, b)
	}
	return out
}
