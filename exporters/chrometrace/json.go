package chrometrace

import (
	"bufio"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/trainscope/trainscope/profiler"
)

// jsonWriter appends the trace's JSON by hand: encoding/json's reflection
// would cost more than everything else here together. One event per line
// keeps the output diffable.
type jsonWriter struct {
	w     *bufio.Writer
	buf   []byte
	first bool // no event written yet
	err   error
}

func (j *jsonWriter) flush() {
	if j.err == nil {
		_, j.err = j.w.Write(j.buf)
	}
	j.buf = j.buf[:0]
}

func (j *jsonWriter) header(cfg config) {
	b := append(j.buf, `{"displayTimeUnit":"ns","otherData":{"producer":"trainscope"`...)
	if !cfg.epoch.IsZero() {
		b = append(b, `,"epoch":`...)
		b = appendString(b, cfg.epoch.UTC().Format(time.RFC3339Nano))
	}
	for _, kv := range cfg.other {
		if kv[0] == "producer" || kv[0] == "epoch" {
			continue
		}
		b = append(b, ',')
		b = appendString(b, kv[0])
		b = append(b, ':')
		b = appendString(b, kv[1])
	}
	b = append(b, "},\n\"traceEvents\":["...)
	j.buf = b
	j.first = true
	j.flush()
}

func (j *jsonWriter) footer() {
	j.buf = append(j.buf, "\n]}\n"...)
	j.flush()
}

// open starts the next element of traceEvents.
func (j *jsonWriter) open() []byte {
	if j.first {
		j.first = false
		return append(j.buf, '\n')
	}
	return append(j.buf, ",\n"...)
}

// metadata names a track, and its process when the track is its rank's
// first, and sets their order in the viewer.
func (j *jsonWriter) metadata(t *track) {
	if t.process != "" {
		j.buf = j.meta(j.open(), "process_name", t.pid, -1)
		j.buf = append(appendString(append(j.buf, `"name":`...), t.process), "}}"...)
		j.buf = j.meta(j.open(), "process_sort_index", t.pid, -1)
		j.buf = append(strconv.AppendInt(append(j.buf, `"sort_index":`...), int64(t.rank), 10), "}}"...)
	}
	j.buf = j.meta(j.open(), "thread_name", t.pid, t.tid)
	j.buf = append(appendString(append(j.buf, `"name":`...), t.name), "}}"...)
	j.buf = j.meta(j.open(), "thread_sort_index", t.pid, t.tid)
	j.buf = append(strconv.AppendInt(append(j.buf, `"sort_index":`...), int64(t.sort), 10), "}}"...)
	j.flush()
}

// meta opens a metadata event up to its args' first member.
func (j *jsonWriter) meta(b []byte, name string, pid, tid int) []byte {
	b = append(b, `{"ph":"M","name":"`...)
	b = append(b, name...)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	if tid >= 0 {
		b = append(b, `,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
	}
	return append(b, `,"args":{`...)
}

func (j *jsonWriter) event(e *event, r *profiler.Record, tr *trace) {
	t := &tr.tracks[e.track]
	b := j.open()
	b = append(b, `{"ph":"X","name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"cat":"`...)
	b = append(b, r.Kind.String()...)
	b = append(b, `","ts":`...)
	b = appendTime(b, e.start)
	b = append(b, `,"dur":`...)
	b = appendTime(b, e.dur)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(t.pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(t.tid), 10)
	if e.bindID != 0 {
		b = append(b, `,"bind_id":`...)
		b = strconv.AppendUint(b, uint64(e.bindID), 10)
		if e.flowIn {
			b = append(b, `,"flow_in":true`...)
		}
		if e.flowOut {
			b = append(b, `,"flow_out":true`...)
		}
	}
	b = append(b, `,"args":{`...)
	b = appendArgs(b, r, e.device, tr)
	b = append(b, "}}"...)
	j.buf = b
	if len(j.buf) >= 32<<10 {
		j.flush()
	}
}

// appendArgs appends a record's pipeline labels, the other timeline's
// duration, and for collectives what moved, between whom and how fast.
func appendArgs(b []byte, r *profiler.Record, device bool, tr *trace) []byte {
	start := len(b)
	sep := func(b []byte, key string) []byte {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, key...)
		return append(b, `":`...)
	}
	num := func(b []byte, key string, v int64) []byte { return strconv.AppendInt(sep(b, key), v, 10) }
	if r.Step >= 0 {
		b = num(b, "step", int64(r.Step))
	}
	if r.Stage >= 0 {
		b = num(b, "stage", int64(r.Stage))
	}
	if r.Chunk >= 0 {
		b = num(b, "chunk", int64(r.Chunk))
	}
	if r.Microbatch >= 0 {
		b = num(b, "microbatch", int64(r.Microbatch))
	}
	if r.Phase != profiler.PhaseNone {
		b = appendString(sep(b, "phase"), r.Phase.String())
	}
	if r.Tag != "" {
		b = appendString(sep(b, "tag"), r.Tag)
	}
	if device {
		b = appendMicros(sep(b, "host_us"), int64(r.HostEnd-r.HostStart))
	} else if r.HasDevice {
		b = appendMicros(sep(b, "device_us"), int64(r.DeviceEnd-r.DeviceStart))
	} else if d, ok := tr.rankDevice[r.Rank]; ok && r.Device != d {
		// A host range off its rank's device (the process name's).
		b = appendString(sep(b, "device"), r.Device.String())
	}
	if r.HasDevice {
		// Tracks are per device and class, not per stream; the stream lets
		// a reader apply the busy definition (per stream) to the trace.
		b = strconv.AppendUint(sep(b, "stream"), r.Stream, 10)
	}
	if r.PeakMemory > 0 {
		b = num(b, "peak_memory_bytes", r.PeakMemory)
	}
	if r.CutShort {
		b = append(sep(b, "cut_short"), "true"...)
	}
	if r.DeviceUnfinished {
		b = append(sep(b, "device_unfinished"), "true"...)
	}
	if r.Kind != profiler.KindCollective && r.Kind != profiler.KindP2P {
		return b
	}
	c := &r.Collective
	b = appendString(sep(b, "op"), c.Op)
	b = num(b, "bytes", c.Bytes)
	b = num(b, "count", c.Count)
	if c.DType != "" {
		b = appendString(sep(b, "dtype"), c.DType)
	}
	if c.Peer >= 0 {
		b = num(b, "peer", int64(c.Peer))
		if rank, ok := tr.ranks[groupMember{c.Group, c.GroupID, c.Peer}]; ok {
			b = num(b, "peer_rank", int64(rank))
		}
	}
	if c.Root >= 0 {
		b = num(b, "root", int64(c.Root))
	}
	b = appendString(sep(b, "group"), c.Group)
	if c.GroupID != 0 {
		// Hexadecimal text: JSON numbers above 2^53 lose digits.
		b = strconv.AppendUint(append(sep(b, "group_id"), '"'), c.GroupID, 16)
		b = append(b, '"')
	}
	b = num(b, "group_size", int64(c.GroupSize))
	b = num(b, "group_rank", int64(c.GroupRank))
	b = strconv.AppendUint(sep(b, "seq"), c.Seq, 10)
	if c.TransferEnd != 0 && r.HasDevice {
		// How long after the kernel stopped the network transfer ended
		// (negative: before).
		b = appendMicros(sep(b, "transfer_end_after_device_us"), int64(c.TransferEnd-r.DeviceEnd))
	}
	if v := r.AlgBandwidth; v > 0 && !math.IsInf(v, 0) {
		b = strconv.AppendFloat(sep(b, "algbw_GBps"), v/1e9, 'g', 6, 64)
	}
	if v := r.BusBandwidth; v > 0 && !math.IsInf(v, 0) {
		b = strconv.AppendFloat(sep(b, "busbw_GBps"), v/1e9, 'g', 6, 64)
	}
	return b
}

// appendTime appends a time or duration of ns nanoseconds in
// microseconds, a quarter of a nanosecond away from zero: "1234.56725"
// for 1234567ns. A reader that multiplies by 1000 in floating point gets
// ns back exactly whether it then truncates (Perfetto before v51) or
// rounds to nearest (Perfetto since v51): the exact
// decimal could come out a nanosecond short under truncation, and half a
// nanosecond above it rounds up to the next nanosecond, either of which
// can make a child end after its parent or an event start inside the one
// before it. It holds while |ns| < 2^50 (13 days).
func appendTime(b []byte, ns int64) []byte {
	b, u := appendSign(b, ns)
	b = strconv.AppendUint(b, u/1000, 10)
	frac := u % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10), '2', '5')
}

// appendMicros appends ns nanoseconds as exact microseconds, with no
// trailing zeros after the point: "1234.567", "12.5", "3".
func appendMicros(b []byte, ns int64) []byte {
	b, u := appendSign(b, ns)
	b = strconv.AppendUint(b, u/1000, 10)
	frac := u % 1000
	if frac == 0 {
		return b
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	b = append(b, '.')
	return append(b, digits[:n]...)
}

// appendSign appends a minus sign for a negative ns and returns ns's
// magnitude, which for math.MinInt64 only an unsigned value holds.
func appendSign(b []byte, ns int64) ([]byte, uint64) {
	if ns < 0 {
		return append(b, '-'), -uint64(ns)
	}
	return b, uint64(ns)
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hex = "0123456789abcdef"
