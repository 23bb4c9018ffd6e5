package pprof

import (
	"encoding/binary"
	"io"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/profiler"
)

// The profile.proto field numbers this file writes.
const (
	fieldSampleType        = 1
	fieldSample            = 2
	fieldMapping           = 3
	fieldLocation          = 4
	fieldFunction          = 5
	fieldStringTable       = 6
	fieldTimeNanos         = 9
	fieldDurationNanos     = 10
	fieldPeriodType        = 11
	fieldPeriod            = 12
	fieldComment           = 13
	fieldDefaultSampleType = 14

	wireVarint = 0
	wireBytes  = 2
)

// encoder writes profile.proto's wire format straight from a tree, one
// sample per record. pprof's own encoder builds per-sample index slices
// and sorts label keys for every sample, which makes Build+profile.Write
// about nine times slower (BenchmarkBuildProfileWrite); here each
// distinct stack and label set is encoded once and a sample costs a few
// appends. Parsing the output with profile.Parse gives the same profile as
// Build (TestWriteMatchesBuild).
type encoder struct {
	strings map[string]int64
	table   []string
	out     []byte
}

// flushAt is the buffered size at which samples are handed to the writer.
const flushAt = 64 << 10

func (e *encoder) str(s string) int64 {
	if i, ok := e.strings[s]; ok {
		return i
	}
	i := int64(len(e.table))
	e.strings[s] = i
	e.table = append(e.table, s)
	return i
}

// writeProfile writes the profile of p's header and t's samples to w
// (uncompressed; Write puts gzip in between).
func writeProfile(w io.Writer, p *profile.Profile, t *tree) error {
	e := &encoder{strings: map[string]int64{}, out: make([]byte, 0, flushAt+4096)}
	e.str("")

	for _, st := range p.SampleType {
		e.out = appendMessage(e.out, fieldSampleType, e.valueType(st))
	}
	// Each distinct stack's packed location IDs and each label set's
	// labels, encoded once as the fields of a Sample message.
	stacks := make([][]byte, len(t.stacks))
	for i, st := range t.stacks {
		var ids []byte
		for _, l := range st {
			ids = binary.AppendUvarint(ids, l.ID)
		}
		stacks[i] = appendField(nil, 1, ids)
	}
	labels := make([][]byte, len(t.labelKeys))
	for i, k := range t.labelKeys {
		labels[i] = e.labels(k)
	}
	var vals []byte
	for i := range t.stackOf {
		vals = vals[:0]
		vals = binary.AppendUvarint(vals, uint64(t.hostSelf[i]))
		vals = binary.AppendUvarint(vals, uint64(t.deviceSelf[i]))
		vals = append(vals, 1)
		st, lb := stacks[t.stackOf[i]], labels[t.labelOf[i]]
		n := len(st) + 1 + varintLen(uint64(len(vals))) + len(vals) + len(lb)
		e.out = appendKey(e.out, fieldSample, wireBytes)
		e.out = binary.AppendUvarint(e.out, uint64(n))
		e.out = append(e.out, st...)
		e.out = appendField(e.out, 2, vals)
		e.out = append(e.out, lb...)
		if len(e.out) >= flushAt {
			if _, err := w.Write(e.out); err != nil {
				return err
			}
			e.out = e.out[:0]
		}
	}

	for _, mp := range p.Mapping {
		var m []byte
		m = appendVarintField(m, 1, mp.ID)
		m = appendVarintField(m, 5, uint64(e.str(mp.File)))
		m = appendVarintField(m, 7, 1) // has_functions
		e.out = appendMessage(e.out, fieldMapping, m)
	}
	for _, l := range p.Location {
		var line []byte
		line = appendVarintField(line, 1, l.Line[0].Function.ID)
		var m []byte
		m = appendVarintField(m, 1, l.ID)
		m = appendVarintField(m, 2, l.Mapping.ID)
		m = appendField(m, 4, line)
		e.out = appendMessage(e.out, fieldLocation, m)
	}
	for _, f := range p.Function {
		var m []byte
		m = appendVarintField(m, 1, f.ID)
		m = appendVarintField(m, 2, uint64(e.str(f.Name)))
		m = appendVarintField(m, 3, uint64(e.str(f.SystemName)))
		e.out = appendMessage(e.out, fieldFunction, m)
	}
	if p.TimeNanos != 0 {
		e.out = appendVarintField(e.out, fieldTimeNanos, uint64(p.TimeNanos))
	}
	if p.DurationNanos != 0 {
		e.out = appendVarintField(e.out, fieldDurationNanos, uint64(p.DurationNanos))
	}
	if p.PeriodType != nil {
		e.out = appendMessage(e.out, fieldPeriodType, e.valueType(p.PeriodType))
	}
	if p.Period != 0 {
		e.out = appendVarintField(e.out, fieldPeriod, uint64(p.Period))
	}
	for _, c := range p.Comments {
		e.out = appendVarintField(e.out, fieldComment, uint64(e.str(c)))
	}
	e.out = appendVarintField(e.out, fieldDefaultSampleType, uint64(e.str(p.DefaultSampleType)))
	// The string table goes last, once every string has its index.
	for _, s := range e.table {
		e.out = appendKey(e.out, fieldStringTable, wireBytes)
		e.out = binary.AppendUvarint(e.out, uint64(len(s)))
		e.out = append(e.out, s...)
	}
	_, err := w.Write(e.out)
	return err
}

func (e *encoder) valueType(v *profile.ValueType) []byte {
	var m []byte
	m = appendVarintField(m, 1, uint64(e.str(v.Type)))
	return appendVarintField(m, 2, uint64(e.str(v.Unit)))
}

// labels encodes the Label messages of a label set, in the order pprof's
// own encoder uses: string labels, then numeric ones, each sorted by key.
func (e *encoder) labels(k labelKey) []byte {
	var out []byte
	str := func(key, v string) {
		var m []byte
		m = appendVarintField(m, 1, uint64(e.str(key)))
		m = appendVarintField(m, 2, uint64(e.str(v)))
		out = appendMessage(out, 3, m)
	}
	num := func(key string, v int64) {
		var m []byte
		m = appendVarintField(m, 1, uint64(e.str(key)))
		if v != 0 {
			m = appendVarintField(m, 3, uint64(v))
		}
		m = appendVarintField(m, 4, uint64(e.str(numUnit)))
		out = appendMessage(out, 3, m)
	}
	if k.phase != profiler.PhaseNone {
		str(LabelPhase, k.phase.String())
	}
	if k.tag != "" {
		str(LabelTag, k.tag)
	}
	if k.chunk >= 0 {
		num(LabelChunk, int64(k.chunk))
	}
	if k.mb >= 0 {
		num(LabelMicrobatch, int64(k.mb))
	}
	num(LabelRank, int64(k.rank))
	if k.stage >= 0 {
		num(LabelStage, int64(k.stage))
	}
	if k.step >= 0 {
		num(LabelStep, int64(k.step))
	}
	return out
}

func appendKey(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return binary.AppendUvarint(appendKey(b, field, wireVarint), v)
}

// appendField appends a length-delimited field: a message or packed
// scalars.
func appendField(b []byte, field int, data []byte) []byte {
	b = appendKey(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

func appendMessage(b []byte, field int, m []byte) []byte { return appendField(b, field, m) }

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
