package profiler_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// columnEnds is where each whitespace-separated field of line ends.
func columnEnds(line string) []int {
	var ends []int
	for i := 0; i < len(line); i++ {
		if line[i] != ' ' && (i+1 == len(line) || line[i+1] == ' ') {
			ends = append(ends, i+1)
		}
	}
	return ends
}

// checkTable checks that every row of the table starting at header has
// its figures (the last len(titles) fields, each right-aligned) ending
// where the header's column titles end: no figure wider than its column
// pushes the columns after it right. It returns the rows by their first
// field.
func checkTable(t *testing.T, lines []string, header int, titles []string) map[string][]string {
	t.Helper()
	hdr := lines[header]
	var ends []int
	at := 0
	for _, title := range titles {
		i := strings.Index(hdr[at:], title)
		if i < 0 {
			t.Fatalf("header %q lacks %q", hdr, title)
		}
		at += i + len(title)
		ends = append(ends, at)
	}
	rows := map[string][]string{}
	for _, line := range lines[header+1:] {
		f := strings.Fields(line)
		if len(f) < len(titles) || strings.HasPrefix(line, "Peak device memory") || strings.HasPrefix(line, "device times for only some") {
			break // the end of the table
		}
		got := columnEnds(line)
		got = got[len(got)-len(titles):]
		for i := range titles {
			if got[i] != ends[i] {
				t.Errorf("row %q: the %s column ends at %d, the header's at %d\n%s\n%s", f[0], titles[i], got[i], ends[i], hdr, line)
				break
			}
		}
		rows[f[0]] = f[len(f)-len(titles):]
	}
	return rows
}

var reportTitles = []string{"Count", "Host Total(us)", "Host %", "Device Total(us)", "Device %", "Avg Host(us)", "Avg Device(us)"}

// TestReportColumnsHoldWideFigures: a name counted more than 9,999,999
// times (a kernel over a long run) and a range of three hours (a whole
// training run's) keep every column of the table aligned with its title.
func TestReportColumnsHoldWideFigures(t *testing.T) {
	const calls = 12_345_678
	groups := []profiler.Group{{
		Rank: 0, Tag: "all", HostTotal: 3 * time.Hour, DeviceTotal: 2 * time.Hour,
		Names: []profiler.NameStats{
			{Name: "train", Count: 1, HostTotal: 3 * time.Hour, HostPercent: 100},
			{Name: "kernel", Count: calls, HostTotal: calls * time.Microsecond, DeviceCount: calls,
				DeviceTotal: 2 * time.Hour, HostPercent: 100 * float64(calls*time.Microsecond) / float64(3*time.Hour), DevicePercent: 100},
			{Name: "gemm", Count: 2, DeviceCount: 1, HostTotal: 6 * time.Hour, DeviceTotal: 5 * time.Hour, HostPercent: 200, DevicePercent: 250},
		},
	}}
	for _, by := range []profiler.SortKey{profiler.SortName, profiler.SortCount, profiler.SortAvgHost} {
		var buf bytes.Buffer
		if err := profiler.WriteReport(&buf, groups, nil, by); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(buf.String(), "\n")
		rows := checkTable(t, lines, 1, reportTitles)
		if len(rows) != 3 {
			t.Fatalf("%d rows, want 3:\n%s", len(rows), buf.String())
		}
		// 3 h = 10,800,000,000 us; 2 h = 7,200,000,000 us.
		if r := rows["train"]; r[0] != "1" || r[1] != "10800000000.000" || r[5] != "10800000000.000" {
			t.Errorf("train row %q", r)
		}
		if r := rows["kernel"]; r[0] != "12345678" || r[1] != "12345678.000" || r[3] != "7200000000.000" || r[5] != "1.000" {
			t.Errorf("kernel row %q", r)
		}
		// 6 h over 2 calls, 5 h over the 1 device-timed one, which a
		// line below the table says.
		if r := rows["gemm"]; r[5] != "10800000000.000" || r[6] != "18000000000.000" {
			t.Errorf("gemm row %q", r)
		}
		if !slices.Contains(lines, "device times for only some ranges (Avg Device is over those): gemm 1 of 2") {
			t.Errorf("no line says gemm's Avg Device is over 1 of its 2 ranges:\n%s", buf.String())
		}
	}
}

// TestWriteRecordsColumnsHoldLongRanges: the call log's Host(us) and
// Device(us) columns hold a range of hours (10,800,000,000 us) aligned
// with their titles, and a short range beside it.
func TestWriteRecordsColumnsHoldLongRanges(t *testing.T) {
	cpu := runtime.Device{Type: runtime.CPU, Index: 0}
	recs := []profiler.Record{
		{ID: 1, Name: "train", Device: cpu, Labels: profiler.NoLabels, HostStart: 0, HostEnd: 3 * time.Hour,
			HasDevice: true, DeviceStart: time.Second, DeviceEnd: time.Second + 2*time.Hour, PeakMemory: 5 << 20},
		{ID: 2, Parent: 1, Depth: 1, Name: "step", Device: cpu, Labels: profiler.NoLabels, HostStart: 200 * time.Second,
			HostEnd: 200*time.Second + 5*us},
	}
	var buf bytes.Buffer
	if err := profiler.WriteRecords(&buf, recs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	rows := checkTable(t, lines, 0, []string{"Host(us)", "Device(us)", "Peak Mem(MB)"})
	if r := rows["0"]; len(r) != 3 || r[0] != "10800000000.000" || r[1] != "7200000000.000" || r[2] != "5.00" {
		t.Errorf("train row %q:\n%s", r, buf.String())
	}
	if r := rows["1"]; len(r) != 3 || r[0] != "5.000" || r[1] != "-" {
		t.Errorf("step row %q:\n%s", r, buf.String())
	}
	// The timestamps stay right-aligned under their title too.
	hdrEnd := strings.Index(lines[0], "Timestamp(us)") + len("Timestamp(us)")
	for _, line := range lines[1:3] {
		if e := columnEnds(line); len(e) < 2 || e[1] != hdrEnd {
			t.Errorf("timestamp of %q does not end at %d", line, hdrEnd)
		}
	}
}

// TestReportTagOnOneLine: a tag with a line break (one read from a trace
// file, or set by a program) stays on its table's title line, written
// Go-quoted as names with one are.
func TestReportTagOnOneLine(t *testing.T) {
	recs := []profiler.Record{{ID: 1, Name: "step", Tag: "fwd\nmb 0", Labels: profiler.NoLabels, HostEnd: 5 * us}}
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, profiler.Summarize(recs), nil, profiler.SortName); err != nil {
		t.Fatal(err)
	}
	want := "=== rank 0 · \"fwd\\nmb 0\" ===\nName "
	if !strings.HasPrefix(buf.String(), want) {
		t.Errorf("report begins %q, want %q", buf.String(), want)
	}
}

// TestReportMeansRounded: the averages are the totals over the counts to
// the nearest nanosecond (the last digit printed), not cut down to it,
// and sorting by an average follows the figures printed.
func TestReportMeansRounded(t *testing.T) {
	mk := func(id uint64, name string, start, host, dev time.Duration) profiler.Record {
		return profiler.Record{ID: id, Name: name, Labels: profiler.NoLabels, HostStart: start, HostEnd: start + host,
			HasDevice: true, DeviceStart: start, DeviceEnd: start + dev}
	}
	recs := []profiler.Record{
		// "b": host 1000+1001+1001 = 3002 ns over 3 = 1000.667 ns -> 1.001 us;
		// device 2000+2001+2001 = 6002 ns over 3 = 2000.667 ns -> 2.001 us.
		mk(1, "b", 0, 1000, 2000), mk(2, "b", 10000, 1001, 2001), mk(3, "b", 20000, 1001, 2001),
		// "a": host 1000+1000+1001 = 3001 ns over 3 = 1000.333 ns -> 1.000 us;
		// device 2000 ns -> 2.000 us.
		mk(4, "a", 30000, 1000, 2000), mk(5, "a", 40000, 1000, 2000), mk(6, "a", 50000, 1001, 2000),
	}
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, profiler.Summarize(recs), nil, profiler.SortAvgHost); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	var got [][]string
	for _, l := range lines[2:4] {
		got = append(got, strings.Fields(l))
	}
	if got[0][0] != "b" || got[1][0] != "a" {
		t.Errorf("sorted by average host time: %q then %q, want b (1000.667 ns) then a (1000.333 ns):\n%s", got[0][0], got[1][0], buf.String())
	}
	want := map[string][2]string{"b": {"1.001", "2.001"}, "a": {"1.000", "2.000"}}
	for _, f := range got {
		if w := want[f[0]]; f[6] != w[0] || f[7] != w[1] {
			t.Errorf("%s: averages %s and %s us, want %s and %s:\n%s", f[0], f[6], f[7], w[0], w[1], buf.String())
		}
	}
}

// TestWriteRecordsIdxHoldsMillions: the call log of a rank with more
// than a million ranges keeps its Idx column aligned with its title.
func TestWriteRecordsIdxHoldsMillions(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a million lines")
	}
	const n = 1_000_001
	recs := make([]profiler.Record, n)
	for i := range recs {
		recs[i].Name = "k"
	}
	var buf bytes.Buffer
	if err := profiler.WriteRecords(&buf, recs); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	header := string(out[:bytes.IndexByte(out, '\n')])
	last := string(out[bytes.LastIndexByte(out[:len(out)-1], '\n')+1 : len(out)-1])
	if !strings.HasPrefix(strings.TrimSpace(last), "1000000 ") {
		t.Fatalf("last row %q, want index 1000000", last)
	}
	if h, l := columnEnds(header), columnEnds(last); h[0] != l[0] || h[1] != l[1] {
		t.Errorf("Idx and Timestamp of the last row end at %d and %d, the header's at %d and %d:\n%s\n%s", l[0], l[1], h[0], h[1], header, last)
	}
}
