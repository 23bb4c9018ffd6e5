package otel

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"

	"go.opentelemetry.io/otel/trace"
)

// ids derives trace and span ids from the run id, so that a span's id can
// be computed before the span is seen: records arrive children first, and a
// rank links to its peers' spans of a collective without any exchange.
//
// Each id is a bijective 64-bit mix of a key that packs what identifies the
// span, xored with a per-run seed: within a run, distinct keys give
// distinct ids.
type ids struct {
	trace1, trace2, span, coll uint64
}

func newIDs(runID string) ids {
	h := sha256.Sum256([]byte("trainscope/otel\x00" + runID))
	return ids{
		trace1: binary.LittleEndian.Uint64(h[0:]),
		trace2: binary.LittleEndian.Uint64(h[8:]),
		span:   binary.LittleEndian.Uint64(h[16:]),
		coll:   binary.LittleEndian.Uint64(h[24:]),
	}
}

// mix64 is the SplitMix64 finaliser: a bijection on uint64.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// traceID is the trace of one training step; step None (-1) is the
// run-level trace.
func (s ids) traceID(step int32) trace.TraceID {
	key := uint64(uint32(step))
	var t trace.TraceID
	binary.BigEndian.PutUint64(t[0:], mix64(s.trace1^key))
	binary.BigEndian.PutUint64(t[8:], mix64(s.trace2^key))
	return t
}

// Key layout of a record's span: rank in the top 20 bits, record id in the
// next 43, and the low bit set for the device-time child span. Ids are
// distinct for up to a million ranks of 8.8e12 ranges each.
const (
	rankBits = 20
	idBits   = 43
)

func (s ids) spanID(rank int, id uint64, device bool) trace.SpanID {
	key := (uint64(rank)&(1<<rankBits-1))<<(idBits+1) | (id&(1<<idBits-1))<<1
	if device {
		key |= 1
	}
	return toSpanID(mix64(key ^ s.span))
}

// analysisSalt keeps analysisSpanID's keys apart from spanID's.
const analysisSalt = 0x9e3779b97f4a7c15

// analysisSpanID is the pipeline analysis span of a step on a rank. A
// record's key already uses all 64 bits (rank, id, device bit), so the
// analysis span cannot take a key of its own there: it is derived apart,
// as collectiveSpanID is, and meets a record's id only by a 64-bit chance.
func (s ids) analysisSpanID(rank int, step int32) trace.SpanID {
	return toSpanID(mix64(mix64(s.span^analysisSalt^uint64(uint32(step))) ^ uint64(uint32(rank))))
}

// collectiveSpanID is the span of a collective on the group rank that
// issued it: every rank of the group computes its peers' ids from the
// group name and the call's sequence number, which agree across ranks.
func (s ids) collectiveSpanID(groupHash, seq uint64, groupRank int32) trace.SpanID {
	return toSpanID(mix64(mix64(mix64(s.coll^groupHash)^seq) ^ uint64(uint32(groupRank))))
}

func groupHash(group string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(group))
	return h.Sum64()
}

func toSpanID(v uint64) trace.SpanID {
	if v == 0 {
		v = 1 // the one key that mixes to 0; an all-zero id is invalid
	}
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], v)
	return id
}
