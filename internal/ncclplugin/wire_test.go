package ncclplugin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReaderDecodesEveryKind(t *testing.T) {
	in := stream(
		helloFrame(wireVersion, 4242, "node7"),
		wireRec{kind: 1, tid: 9, hash: 0xfeed, t0: 100, a0: 22809, a1: 0x0706050403020100, a2: 0x0f0e0d0c0b0a0908, rank: 2, nranks: 8, nnodes: 2, peer: 3, name: "pg0"}.frame(),
		wireRec{kind: 2, tid: 9, hash: 0xfeed, task: 11, seq: 4, t0: 200, t1: 250, a0: 1024, a1: 2048, rank: 2, nranks: 8, peer: -1,
			fn: 1, dtype: 10, algo: 2, proto: 3, nch: 4, nwarps: 16, name: "pg0"}.frame(),
		wireRec{kind: 3, hash: 0xfeed, task: 12, seq: 1, t0: 300, t1: 310, a0: 3, a1: 24, rank: 2, nranks: 8, peer: 5, fn: 6, dtype: 5, nch: 1}.frame(),
		wireRec{kind: 4, tid: 77, hash: 0xfeed, task: 11, seq: 4, t0: 9000, t1: 9500, a0: 400, a1: 450, rank: 2, nranks: 8, peer: -1,
			fn: 1, channel: 3, parent: 2}.frame(),
		wireRec{kind: 5, t0: 500, t1: 3, a0: 7, a1: 8, a2: 9, seq: 4, task: 6}.frame(),
		wireRec{kind: 6, hash: 0xfeed, t0: 600, rank: 2, nranks: 8}.frame(),
	)
	d := NewReader(bytes.NewReader(in))
	h, err := d.Hello()
	if err != nil {
		t.Fatal(err)
	}
	if h.PID != 4242 || h.Hostname != "node7" || h.Version != wireVersion || h.UID != 1000 {
		t.Fatalf("hello %+v", h)
	}
	got := readAll(t, d)
	if len(got) != 6 || d.Offset() != 7*128 {
		t.Fatalf("%d records, offset %d", len(got), d.Offset())
	}
	ci := got[0]
	if ci.Kind != KindCommInit || ci.At != 100 || ci.Rank != 2 || ci.NRanks != 8 || ci.NNodes != 2 || ci.Device != 3 || ci.CommName != "pg0" || ci.Comm != 0xfeed ||
		ci.NCCLVersion != 22809 || ci.DeviceUUID != [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} {
		t.Errorf("comm init %+v", ci)
	}
	co := got[1]
	if co.Op() != "AllReduce" || co.DTypeName() != "bfloat16" || co.AlgoName() != "RING" || co.ProtoName() != "SIMPLE" ||
		co.Task != 11 || co.Seq != 4 || co.HostStart != 200 || co.HostEnd != 250 || co.Count != 1024 || co.Bytes != 2048 ||
		co.NChannels != 4 || co.NWarps != 16 || co.Peer != -1 || co.TID != 9 {
		t.Errorf("collective %+v", co)
	}
	p := got[2]
	if p.Kind != KindP2P || p.Op() != "Send" || p.DTypeName() != "int64" || p.Peer != 5 || p.Seq != 1 || p.Bytes != 24 {
		t.Errorf("p2p %+v", p)
	}
	k := got[3]
	if k.Kind != KindKernelChannel || k.ParentKind != KindCollective || k.Channel != 3 || k.GPUStart != 9000 || k.GPUStop != 9500 ||
		k.SeenStart != 400 || k.SeenStop != 450 || k.Task != 11 || k.TID != 77 {
		t.Errorf("kernel channel %+v", k)
	}
	dr := got[4]
	if dr.Kind != KindDrops || dr.RingFull != 7 || dr.Refused != 8 || dr.Unsent != 9 || dr.ActivityDropped != 4 || dr.BuffersUnreturned != 3 || dr.ForeignProxyOps != 6 || dr.At != 500 {
		t.Errorf("drops %+v", dr)
	}
	if got[5].Kind != KindCommFinalize || got[5].At != 600 {
		t.Errorf("finalize %+v", got[5])
	}
}

// TestReaderRejectsOtherVersions: a plugin older (version 1, before
// RANGE records; version 2, before ACTIVITY records; version 3, before
// memory records) or newer than this decoder is named, with the fix.
func TestReaderRejectsOtherVersions(t *testing.T) {
	for _, v := range []uint16{1, 2, 3, 5} {
		d := NewReader(bytes.NewReader(helloFrame(v, 1, "h")))
		_, err := d.Next()
		if !errors.Is(err, ErrVersion) {
			t.Fatalf("version %d: error %v, want ErrVersion", v, err)
		}
		for _, want := range []string{fmt.Sprintf("version %d,", v), "reads version 4", "make -C plugins/nccl"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
	}
}

func TestReaderErrorsNameTheOffset(t *testing.T) {
	good := wireRec{kind: 2, task: 1, t0: 1, t1: 2}.frame()
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "byte 0: empty stream"},
		{"short hello", helloFrame(wireVersion, 1, "h")[:60], "byte 60: stream ends inside the hello"},
		{"bad magic", append([]byte("HTTP"), make([]byte, 124)...), "byte 0: not a trainscope"},
		{"truncated record", stream(helloFrame(wireVersion, 1, "h"), good, good[:40]), "byte 256: stream ends inside a record (40 of 128"},
		{"unknown kind", stream(helloFrame(wireVersion, 1, "h"), wireRec{kind: 99}.frame()), "byte 128: unknown record kind 99"},
		{"task 0", stream(helloFrame(wireVersion, 1, "h"), good, wireRec{kind: 3, t0: 1, t1: 1}.frame()), "byte 256: p2p record with task 0"},
		{"ends before it starts", stream(helloFrame(wireVersion, 1, "h"), wireRec{kind: 2, task: 1, t0: 5, t1: 4}.frame()), "byte 128: collective record ends"},
		{"kernel parent", stream(helloFrame(wireVersion, 1, "h"), wireRec{kind: 4, task: 1, parent: 9}.frame()), "byte 128: kernel-channel record with parent kind 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewReader(bytes.NewReader(tc.in))
			var err error
			for err == nil {
				_, err = d.Next()
			}
			if err == io.EOF || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if _, again := d.Next(); again == nil || again.Error() != err.Error() {
				t.Errorf("second Next: %v", again)
			}
		})
	}
}

// The constants here and in the C header must agree.
func TestWireHeaderAgrees(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "plugins", "nccl", "trainscope_nccl_wire.h"))
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) int {
		m := regexp.MustCompile(`\b` + name + `\s*=?\s*(\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s not in the header", name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	if !bytes.Contains(src, []byte(`#define TSNP_MAGIC "`+Magic+`"`)) {
		t.Error("magic differs")
	}
	checks := map[string]int{
		"TSNP_VERSION": Version, "TSNP_RECORD_SIZE": RecordSize,
		"TSNP_COMM_INIT": int(KindCommInit), "TSNP_COLLECTIVE": int(KindCollective), "TSNP_P2P": int(KindP2P),
		"TSNP_KERNEL_CHANNEL": int(KindKernelChannel), "TSNP_DROPS": int(KindDrops), "TSNP_COMM_FINALIZE": int(KindCommFinalize),
		"TSNP_PROXY_OP": int(KindProxyOp), "TSNP_RANGE": int(KindRange), "TSNP_RANGE_START": rangeStart, "TSNP_RANGE_TRUNCATED": rangeTruncated,
		"TSNP_ACT_LABELLED": actLabelled, "TSNP_PHASE_FORWARD": PhaseForward, "TSNP_PHASE_BACKWARD": PhaseBackward,
		"TSNP_ACT_KERNEL": int(ActKernel), "TSNP_ACT_MEMCPY": int(ActMemcpy), "TSNP_ACT_MEMSET": int(ActMemset),
		"TSNP_ACT_UNAVAILABLE": int(ActUnavailable), "TSNP_ACT_MEMORY": int(ActMemory),
	}
	for name, want := range checks {
		if got := def(name); got != want {
			t.Errorf("%s = %d in the header, %d here", name, got, want)
		}
	}
	for i, n := range funcNames[1:] {
		c := "TSNP_FUNC_" + strings.ToUpper(n)
		if got := def(c); got != i+1 {
			t.Errorf("%s = %d in the header, %d here", c, got, i+1)
		}
	}
	for i, d := range dtypes[1:] {
		c := "TSNP_DTYPE_" + strings.ToUpper(d.name)
		if got := def(c); got != i+1 {
			t.Errorf("%s = %d in the header, %d here", c, got, i+1)
		}
		if !regexp.MustCompile(c + `\s*=\s*\d+,\s*/\*\s*\(` + strconv.Itoa(int(d.size)) + `\)`).Match(src) {
			t.Errorf("%s: size %d not in the header", c, d.size)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(stream(helloFrame(wireVersion, 1, "h"), wireRec{kind: 2, task: 1, t0: 1, t1: 2, nch: 1}.frame(),
		wireRec{kind: 4, task: 1, parent: 2, t0: 5, t1: 6}.frame()))
	f.Add(helloFrame(wireVersion, 1, "h"))
	f.Add(stream(helloFrame(wireVersion, 1, "h"), rangeFrame(7, 1, 1, 0, 10, 0, 0, "step"), rangeFrame(7, 2, 1, 3, 10, 20, 0, "step 1")))
	f.Add(helloFrame(1, 1, "h"))
	f.Add(stream(helloFrame(wireVersion, 1, "h"), wireRec{kind: 5}.frame()[:77]))
	f.Add(stream(helloFrame(wireVersion, 1, "h"), labelled(activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""), 2, 1, 3)))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewReader(bytes.NewReader(in))
		n := 0
		for {
			rec, err := d.Next()
			if err == io.EOF {
				if int64(len(in)) != d.Offset() {
					t.Fatalf("EOF at %d of %d bytes", d.Offset(), len(in))
				}
				return
			}
			if err != nil {
				if !errors.Is(err, ErrVersion) && !strings.Contains(err.Error(), "byte ") {
					t.Fatalf("error without an offset: %v", err)
				}
				return
			}
			// A NAME record's text is a raw piece of a kernel's name: the
			// pieces are joined first and the whole made valid UTF-8 then
			// (KernelName), since a piece may end inside a character.
			name := rec.Name
			if rec.Kind == KindName {
				name = KernelName(name)
			}
			if !utf8.ValidString(name) || !utf8.ValidString(rec.CommName) || !utf8.ValidString(d.hello.Hostname) {
				t.Fatalf("a name is not UTF-8: %q %q %q", rec.Name, rec.CommName, d.hello.Hostname)
			}
			n++
			if int64(n+1)*RecordSize != d.Offset() {
				t.Fatalf("offset %d after %d records", d.Offset(), n)
			}
		}
	})
}

// TestDecodeRange: range records read back field by field, and the
// impossible ones are errors naming their offset.
func TestDecodeRange(t *testing.T) {
	long := strings.Repeat("x", 72)
	d := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"),
		rangeFrame(7, 1, 3, 0, 100, 0, 0, "step"),
		rangeFrame(7, 2, 4, 5, 110, 190, 1, long),
	)))
	a, err := d.Next()
	if err != nil || a.Kind != KindRange || !a.RangeStart || a.TID != 7 || a.Ordinal != 3 || a.RangeBegin != 100 || a.RangeEnd != 0 ||
		a.Depth != 0 || a.Name != "step" || a.Truncated {
		t.Errorf("start record %+v, %v", a, err)
	}
	b, err := d.Next()
	if err != nil || b.RangeStart || !b.Truncated || b.Name != long || b.LostRanges != 5 || b.Depth != 1 || b.RangeEnd != 190 {
		t.Errorf("end record %+v, %v", b, err)
	}
	for _, tc := range []struct {
		frame []byte
		want  string
	}{
		{rangeFrame(7, 0, 0, 0, 1, 2, 0, "a"), "byte 128: range record with ordinal 0"},
		{rangeFrame(7, 0, 1, 0, 1, 2, -1, "a"), "byte 128: range record with depth -1"},
		{rangeFrame(7, 0, 1, 0, 1, 2, 1<<20, "a"), "byte 128: range record with depth 1048576 (0 to 1024)"},
		{rangeFrame(7, 1, 1, 0, 1, 2, 0, "a"), "byte 128: range start record with an end"},
		{rangeFrame(7, 0, 1, 0, 5, 2, 0, "a"), "byte 128: range record ends (2 ns) before it starts (5 ns)"},
	} {
		_, err := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"), tc.frame))).Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// TestNamesAreUTF8: a name cut inside a character by its field (72 bytes
// of "é", two bytes each, from 37 of them) reads back as valid UTF-8.
func TestNamesAreUTF8(t *testing.T) {
	name := strings.Repeat("é", 37) // 74 bytes: the field keeps 72, then half of nothing
	odd := "x" + name               // 75 bytes: the field ends inside the 36th "é"
	for _, n := range []string{name, odd} {
		d := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"), rangeFrame(7, 2, 1, 0, 1, 2, 0, n))))
		rec, err := d.Next()
		if err != nil || !utf8.ValidString(rec.Name) || !strings.HasPrefix(n, strings.TrimSuffix(rec.Name, "\uFFFD")) {
			t.Errorf("%q read back as %q (%v)", n, rec.Name, err)
		}
	}
}

// TestDecodeLabels: a labelled kernel's phase, chunk and microbatch read
// back; labels no plugin writes are errors naming their offset.
func TestDecodeLabels(t *testing.T) {
	d := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"),
		labelled(activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""), 2, 1, 3),
		labelled(activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""), 1, -1, -1),
		activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""))))
	var got []string
	for _, r := range readAll(t, d) {
		got = append(got, fmt.Sprintf("%v %d %d %d", r.Labelled, r.ActPhase, r.ActChunk, r.ActMicrobatch))
	}
	want := []string{"true 2 1 3", "true 1 -1 -1", "false 0 0 0"}
	if !slices.Equal(got, want) {
		t.Errorf("labels %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		f    []byte
		want string
	}{
		{"phase 3", labelled(activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""), 3, 0, 0), "byte 128: activity record labelled with phase 3"},
		{"chunk -2", labelled(activityFrame(1, 10, 20, 0, 7, 0, 0, 0, ""), 1, -2, 0), "byte 128: activity record labelled with chunk -2"},
	} {
		_, err := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"), tc.f))).Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// readAll reads d's records to the end of its stream, failing t on an
// error.
func readAll(t *testing.T, d *Reader) []Record {
	t.Helper()
	var got []Record
	for {
		r, err := d.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
}

// TestDecodeMemory: a device memory record reads back with its operation
// and size, and an impossible one is an error naming its offset.
func TestDecodeMemory(t *testing.T) {
	r, err := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"), activityFrame(uint8(ActMemory), 50, 50, 1, 0, 0, 3<<20, MemAllocated, "")))).Next()
	if err != nil || r.What != ActMemory || r.CopyKind != MemAllocated || r.Bytes != 3<<20 || r.Device != 1 || r.RangeBegin != 50 {
		t.Errorf("memory record %+v, %v", r, err)
	}
	for _, tc := range []struct {
		frame []byte
		want  string
	}{
		{activityFrame(uint8(ActMemory), 50, 60, 1, 0, 0, 1, MemAllocated, ""), "byte 128: memory record spans 50–60 ns: want one instant"},
		{activityFrame(uint8(ActMemory), 50, 50, 1, 0, 0, 1, 7, ""), "byte 128: memory record of operation 7"},
		{activityFrame(uint8(ActMemory), 50, 50, 1, 0, 0, 1<<63, MemReleased, ""), "byte 128: memory record of 9223372036854775808 bytes"},
	} {
		_, err := NewReader(bytes.NewReader(stream(helloFrame(wireVersion, 1, "h"), tc.frame))).Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
