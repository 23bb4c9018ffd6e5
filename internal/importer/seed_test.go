package importer

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

func loadFile(t *testing.T, path string) *Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Load(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wall(s string) time.Duration {
	at, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		panic(err)
	}
	return time.Duration(at.UnixNano())
}

func TestSeedCallLog(t *testing.T) {
	p := loadFile(t, "testdata/seed/calls.rank0")
	if p.Format != FormatSeed || len(p.Tables) != 0 {
		t.Fatalf("format %v, %d tables", p.Format, len(p.Tables))
	}
	if len(p.Records) != 8 {
		t.Fatalf("%d records, want 8 (5 Backward + 3 Forward)", len(p.Records))
	}
	// Merged by timestamp across the tags: both Forward calls of 13:05:07
	// first, then 13:05:08's (Backward's before Forward's: file order),
	// then the four of 13:05:09.
	wantNames := []string{"matmul", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
		"matmul_backward", "to_cpu", "matmul_backward",
		"optimizer_step_fused_adamw_multi_tensor_apply_v2", "optimizer_step_fused_adamw_multi_tensor_apply_v2", "optimizer_step_fused_adamw_multi_tensor_apply_v2"}
	for i, r := range p.Records {
		if r.Name != wantNames[i] {
			t.Errorf("record %d: %q, want %q", i, r.Name, wantNames[i])
		}
		if r.ID != uint64(i+1) || r.Rank != 0 || r.Depth != 0 || r.Parent != 0 {
			t.Errorf("record %d: ID %d rank %d depth %d parent %d", i, r.ID, r.Rank, r.Depth, r.Parent)
		}
	}
	// 13:05:07: matmul ends at the second, the all-reduce 2500 µs later.
	t7 := wall("2026-02-25 13:05:07")
	us := time.Microsecond
	mm, ar := p.Records[0], p.Records[1]
	if mm.HostEnd != t7 || mm.HostStart != t7-1834*us || mm.DeviceStart != mm.HostStart || mm.DeviceDuration() != 1790*us {
		t.Errorf("matmul at %v–%v, device %v for %v", mm.HostStart-t7, mm.HostEnd-t7, mm.DeviceStart-t7, mm.DeviceDuration())
	}
	if ar.HostStart != t7 || ar.HostEnd != t7+2500*us || ar.DeviceDuration() != 2400*us || ar.Tag != "Forward" {
		t.Errorf("all-reduce at %v–%v, device %v, tag %q", ar.HostStart-t7, ar.HostEnd-t7, ar.DeviceDuration(), ar.Tag)
	}
	if mm.Kind != profiler.KindDevice || mm.Device != (runtime.Device{Type: runtime.CUDA, Index: 0}) || mm.PeakMemory != 512<<20 {
		t.Errorf("matmul kind %v device %v peak %d", mm.Kind, mm.Device, mm.PeakMemory)
	}
	cpu := p.Records[3]
	if cpu.Kind != profiler.KindHost || cpu.HasDevice || cpu.Device.Type != runtime.CPU || cpu.HostDuration() != 300*us {
		t.Errorf("to_cpu: kind %v, device %v (%v), host %v", cpu.Kind, cpu.Device, cpu.HasDevice, cpu.HostDuration())
	}
	// 13:05:08: matmul_backward (3000 µs) ends at the second, to_cpu right
	// after it.
	t8 := wall("2026-02-25 13:05:08")
	if p.Records[2].HostEnd != t8 || cpu.HostStart != t8 || cpu.HostEnd != t8+300*us {
		t.Errorf("13:05:08 calls at %v and %v–%v", p.Records[2].HostEnd-t8, cpu.HostStart-t8, cpu.HostEnd-t8)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings: %q", p.Warnings)
	}
}

func TestSeedReport(t *testing.T) {
	p := loadFile(t, "testdata/seed/report.rank0")
	if len(p.Records) != 0 || len(p.Tables) != 2 {
		t.Fatalf("%d records, %d tables; want 0, 2", len(p.Records), len(p.Tables))
	}
	bw, fw := p.Tables[0], p.Tables[1]
	if bw.Tag != "Backward" || bw.PeakMB != 640 || fw.Tag != "Forward" || fw.PeakMB != 512 || bw.Rank != 0 {
		t.Fatalf("tables %q/%d, %q/%d", bw.Tag, bw.PeakMB, fw.Tag, fw.PeakMB)
	}
	// The 48-byte name ran into its count of 3 ("…_v23"); the averages
	// (450/3 = 150, 360/3 = 120) tell them apart.
	opt := bw.Rows[1]
	if opt.Name != "optimizer_step_fused_adamw_multi_tensor_apply_v2" || opt.Count != 3 || opt.HostTotalUS != 450 || opt.DeviceTotalUS != 360 {
		t.Errorf("row %+v", opt)
	}
	ar := fw.Rows[0]
	if !strings.HasPrefix(ar.Name, "ncclDevKernel_AllReduce") || !strings.HasSuffix(ar.Name, "<4096ul>)") || ar.Count != 1 || ar.HostTotalUS != 2500 {
		t.Errorf("row %+v", ar)
	}
	if r := fw.Rows[2]; r.Name != "to_cpu" || r.Count != 1 || r.HostTotalUS != 300 || r.DeviceTotalUS != 0 || r.HostPercent != 6.47 {
		t.Errorf("row %+v", r)
	}
}

func TestCheckTables(t *testing.T) {
	var tables []Table
	var recs []profiler.Record
	for _, rank := range []string{"0", "1"} {
		tables = append(tables, loadFile(t, "testdata/seed/report.rank"+rank).Tables...)
		recs = append(recs, loadFile(t, "testdata/seed/calls.rank"+rank).Records...)
	}
	problems, uncovered := CheckTables(tables, recs)
	if len(problems) != 0 || len(uncovered) != 0 {
		t.Fatalf("problems %q, uncovered %d", problems, len(uncovered))
	}
	// One call fewer: the report no longer agrees.
	short := append([]profiler.Record(nil), recs[1:]...)
	problems, _ = CheckTables(tables, short)
	if len(problems) != 1 || !strings.Contains(problems[0], "matmul") {
		t.Errorf("problems %q, want one about matmul", problems)
	}
	// Rank 1's report without its log is uncovered.
	_, uncovered = CheckTables(tables, recs[:8])
	if len(uncovered) != 1 || uncovered[0].Rank != 1 {
		t.Errorf("uncovered %+v", uncovered)
	}
}

func TestSeedErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/seed/calls.rank0")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(good), "\n")
	for _, tc := range []struct {
		name string
		text string
		line int
		want string
	}{
		{"garbage row", strings.Join(append(lines[:7:7], "7       2026-02-25 13:05:09     matmul"), "\n"), 8, "not a call log row"},
		{"bad date", strings.Replace(string(good), "2026-02-25 13:05:07", "2026-02-30 13:05:07", 1), 14, "timestamp"},
		// Nanoseconds since 1970 in an int64 run from 1970 to 2262-04-11 23:47:16.
		{"year 1", strings.Replace(string(good), "2026-02-25 13:05:07", "0001-01-01 00:00:00", 1), 14, `timestamp "0001-01-01 00:00:00": out of range`},
		{"before 1970", strings.Replace(string(good), "2026-02-25 13:05:07", "1969-12-31 23:59:59", 1), 14, "out of range"},
		{"year 9999", strings.Replace(string(good), "2026-02-25 13:05:08", "9999-12-31 23:59:59", 1), 6, `timestamp "9999-12-31 23:59:59": out of range`},
		{"after 2262-04-11 23:47:16", strings.Replace(string(good), "2026-02-25 13:05:07", "2262-04-11 23:47:17", 1), 14, "out of range"},
		{"no tag", "=== Kernel Call Log for Rank 0 ===\nIdx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)\n", 2, "Tag:"},
		{"no header", "=== Profiler Report for Rank 2 ===\nTag: x\nPeak Device Memory Usage: 0 MB\nmatmul 1 2 3.00 4 5.00 2 4\n", 4, "column header"},
		{"bad rank", "=== Kernel Call Log for Rank -1 ===\n", 1, "rank"},
		{"stray text", "=== Kernel Call Log for Rank 0 ===\n\nTag: a\nIdx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)\nI0225 glog line\n", 5, "not a call log row"},
		{"no count", "=== Profiler Report for Rank 0 ===\nTag: a\nPeak Device Memory Usage: 1 MB\n" + reportHeader + "\nname 1 2.00 3 4.00 5 6\n", 5, "no count"},
		{"no peak", "=== Profiler Report for Rank 0 ===\nTag: a\n" + reportHeader + "\n", 2, "Peak Device Memory"},
		// The peak line is there: its number is what is wrong, not its
		// absence (a negative peak used to read as no peak line, at the tag).
		{"negative peak", "=== Profiler Report for Rank 0 ===\nTag: a\nPeak Device Memory Usage: -5 MB\n" + reportHeader + "\n", 3, `peak memory "-5"`},
		{"peak past int64", "=== Profiler Report for Rank 0 ===\nTag: a\nPeak Device Memory Usage: 9223372036854775808 MB\n" + reportHeader + "\n", 3, `peak memory "9223372036854775808"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSeed("f.txt", strings.NewReader(tc.text))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || pe.Path != "f.txt" || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q at line %d, want line %d mentioning %q", err, pe.Line, tc.line, tc.want)
			}
		})
	}
}

// The first and last seconds a call log's clock can hold are placed where
// they say.
func TestSeedTimestampRange(t *testing.T) {
	good, err := os.ReadFile("testdata/seed/calls.rank0")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []string{"1970-01-01 00:00:00", "2262-04-11 23:47:16"} {
		text := strings.Replace(string(good), "2026-02-25 13:05:07", at, 1) // line 14: matmul
		p, err := ParseSeed("f.txt", strings.NewReader(text))
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		// A range ends within its timestamp's second.
		want := wall(at)
		found := false
		for _, r := range p.Records {
			if r.Name == "matmul" && r.HostEnd >= want && r.HostEnd-want < time.Second {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no matmul range ending in the second from %d ns", at, int64(want))
		}
		if len(p.Warnings) > 0 {
			t.Errorf("%s: warnings %q", at, p.Warnings)
		}
	}
}

const reportHeader = "Name                                    Count     Host Total(us)    Host %    Device Total(us)    Device %  Avg Host(us)    Avg Device(us)    "

// TestLoadMakesNamesUTF8: a call log written in Latin-1 ("matmul_béckward"
// with é as the byte 0xe9) loads with its names as valid UTF-8, the
// character replaced, as every exporter needs them (client_golang panics
// on a label value that is not; OTLP fails the batch).
func TestLoadMakesNamesUTF8(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "seed", "calls.rank0"))
	if err != nil {
		t.Fatal(err)
	}
	latin1 := bytes.ReplaceAll(b, []byte("matmul_backward      "), []byte("matmul_b\xe9ckward     "))
	if bytes.Equal(latin1, b) {
		t.Fatal("the test file has no matmul_backward to rename")
	}
	p, err := Load("calls.rank0", bytes.NewReader(latin1))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range p.Records {
		if !utf8.ValidString(r.Name) {
			t.Errorf("name %q is not UTF-8", r.Name)
		}
		if r.Name == "matmul_b\uFFFDckward" {
			n++
		}
	}
	if n == 0 {
		t.Error("no record named matmul_b\uFFFDckward")
	}
}

// A call log or report cut short inside its last row is an error naming
// that row's line, wherever the cut falls — inside a number too, which
// would otherwise read as a smaller one (Peak Mem "6" of "640") — and a
// file cut at a line end reads as the rows before it.
func TestSeedCutShort(t *testing.T) {
	for _, name := range []string{"calls.rank0", "report.rank0"} {
		good, err := os.ReadFile("testdata/seed/" + name)
		if err != nil {
			t.Fatal(err)
		}
		body := bytes.TrimRight(good, "\n")
		lastRow := bytes.LastIndexByte(body, '\n') + 1
		wantLine := bytes.Count(body, []byte("\n")) + 1
		for cut := lastRow + 1; cut <= len(body); cut++ {
			_, err := ParseSeed(name, bytes.NewReader(body[:cut]))
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != wantLine {
				t.Errorf("%s cut after byte %d (%q): error %v; want one at line %d", name, cut, body[lastRow:cut], err, wantLine)
			}
		}
		if _, err := ParseSeed(name, bytes.NewReader(body[:lastRow])); err != nil {
			t.Errorf("%s cut at the line end before its last row: %v", name, err)
		}
	}
	good, err := os.ReadFile("testdata/seed/calls.rank0")
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(good, []byte("2950        640"))
	if at < 0 {
		t.Fatal("testdata/seed/calls.rank0 lacks the row this test cuts")
	}
	cut := good[:at+len("2950        6")]
	_, err = ParseSeed("c", bytes.NewReader(cut))
	if err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a row cut inside Peak Mem 640: error %v, want one saying the file was cut short", err)
	}
}

// TestSeedReportLongNameRunsIntoCount: a row whose long name ends in
// digits and runs into its count is split without trying every digit as
// the start of the count: a count has at most 19 digits (int64), and
// each failed try copied the rest of the line (strconv's error keeps the
// text), so a line of 100,000 digits cost gigabytes.
func TestSeedReportLongNameRunsIntoCount(t *testing.T) {
	name := "blk" + strings.Repeat("1", 100000)
	text := "=== Profiler Report for Rank 0 ===\n\nTag: Forward\nPeak Device Memory Usage: 1 MB\n" +
		"Name                                    Count     Host Total(us)    Host %    Device Total(us)    Device %  Avg Host(us)    Avg Device(us)\n" +
		name + "3         450               100.00    360                 100.00    150             120\n"
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	p, err := ParseSeed("report.rank0", strings.NewReader(text))
	goruntime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// 450/3 = 150 and 360/3 = 120: the count is 3, the name the rest.
	if row := p.Tables[0].Rows[0]; row.Name != name || row.Count != 3 {
		t.Errorf("row: name of %d bytes, count %d; want %d bytes, count 3", len(row.Name), row.Count, len(name))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Errorf("parsing a line of %d bytes allocated %d MiB", len(text), n>>20)
	}
}

// TestSeedTimesPastInt64: a call log's host and device times are each
// accepted up to 2^62 ns, but a range placed near the end of the clock, or
// after ranges of that length, ends past what 64 bits of nanoseconds hold.
// Its end wrapped around to a negative time: the range was put back at its
// timestamp (the timeline ran backwards, with no warning) or its device
// time came out negative. It is an error naming the row instead.
func TestSeedTimesPastInt64(t *testing.T) {
	const head = "=== Kernel Call Log for Rank 0 ===\nTag: A\n" +
		"Idx     Timestamp               Name                                    Device    Host(us)    Device(us)  Peak Mem(MB)\n"
	for _, tc := range []struct {
		name string
		rows string
		line int
	}{
		// 2262-04-11 23:47:16 is 9223372036 s; 4611686018427387 µs of
		// device time after it is past 2^63 ns.
		{"device time at the clock's end", "0       2262-04-11 23:47:16     a                                       Device(CUDA, 0)0           4611686018427387 0\n", 4},
		// 2026: 1.77e18 ns; three ranges of 4.6e18 ns each, one after
		// another, end at 1.2e19 ns: the third does not fit.
		{"host times laid end to end", strings.Repeat("0       2026-02-25 13:05:07     a                                       cpu       4611686018427387 0           0\n", 3), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseSeed("f.txt", strings.NewReader(head+tc.rows))
			var pe *ParseError
			if !errors.As(err, &pe) {
				for _, r := range p.Records {
					t.Logf("%s: host %d–%d, device %d–%d", r.Name, r.HostStart, r.HostEnd, r.DeviceStart, r.DeviceEnd)
				}
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || pe.Path != "f.txt" || !strings.Contains(err.Error(), "64 bits") {
				t.Errorf("error %q at line %d, want line %d saying the range ends past 64 bits of nanoseconds", err, pe.Line, tc.line)
			}
		})
	}
}

// TestCheckTablesTagMissingFromReport: the framework writes a rank's
// report and call log from the same records, grouped alike, so a tag whose
// calls the log holds and the rank's report has no table for is a
// disagreement, as a name missing from a table is; it used to pass as
// agreement.
func TestCheckTablesTagMissingFromReport(t *testing.T) {
	report := loadFile(t, "testdata/seed/report.rank0")
	recs := loadFile(t, "testdata/seed/calls.rank0").Records
	var forward []Table
	for _, tb := range report.Tables {
		if tb.Tag == "Forward" {
			forward = append(forward, tb)
		}
	}
	if len(forward) != 1 {
		t.Fatalf("report.rank0 has %d Forward tables, want 1", len(forward))
	}
	problems, uncovered := CheckTables(forward, recs)
	// calls.rank0's Backward tag: matmul_backward twice, the optimizer
	// step three times (rows 0–4).
	want := []string{
		`rank 0, tag "Backward": matmul_backward: 2 calls in the call log, none in the report`,
		`rank 0, tag "Backward": optimizer_step_fused_adamw_multi_tensor_apply_v2: 3 calls in the call log, none in the report`,
	}
	if !slices.Equal(problems, want) || len(uncovered) != 0 {
		t.Errorf("problems %q, uncovered %d; want %q", problems, len(uncovered), want)
	}
}

// A disagreement over one call says "1 call", on either side.
func TestCheckTablesCountsOneCall(t *testing.T) {
	us := time.Microsecond
	recs := []profiler.Record{
		{Rank: 0, Tag: "A", Name: "mm", HostStart: 0, HostEnd: 10 * us},
		{Rank: 0, Tag: "A", Name: "gelu", HostStart: 10 * us, HostEnd: 12 * us},
	}
	tables := []Table{{Rank: 0, Tag: "A", Rows: []Row{
		{Name: "mm", Count: 2, HostTotalUS: 10},
		{Name: "relu", Count: 1, HostTotalUS: 3},
	}}}
	problems, _ := CheckTables(tables, recs)
	want := []string{
		`rank 0, tag "A": gelu: 1 call in the call log, none in the report`,
		`rank 0, tag "A": mm: the report says 2 calls, 10 µs host, 0 µs device; the call log sums to 1 call, 10 µs, 0 µs`,
		`rank 0, tag "A": relu: 1 call in the report, none in the call log`,
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

// TestSeedFirstRangeEndsAtItsSecond: a rank's first range ends at its
// timestamp's second, however long it is; it used to be laid out after
// time 0, as though a range before it had ended there, so on a clock
// reading 1970-01-01 00:00:00 a 2 s range ended 2 s after its second.
func TestSeedFirstRangeEndsAtItsSecond(t *testing.T) {
	text := "=== Kernel Call Log for Rank 0 ===\nTag: A\n" +
		"Idx     Timestamp               Name                                    Device    Host(us)    Device(us)  Peak Mem(MB)\n" +
		"0       1970-01-01 00:00:00     a                                       Device(CUDA, 0)2000000     1500000     1\n"
	p, err := ParseSeed("f.txt", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Records[0]
	if r.HostStart != -2*time.Second || r.HostEnd != 0 || r.DeviceStart != -2*time.Second || r.DeviceEnd != -500*time.Millisecond {
		t.Errorf("host %v–%v, device %v–%v; want host -2s–0, device -2s–-0.5s", r.HostStart, r.HostEnd, r.DeviceStart, r.DeviceEnd)
	}
}
