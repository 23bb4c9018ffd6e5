package profiler_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

var update = flag.Bool("update", false, "rewrite golden files")

const us = time.Microsecond

// fixture is a hand-built trace of two ranks: rank 0 has a step holding two
// forward ranges (one device-timed inside) and an all-reduce; rank 1 one step.
func fixture() []profiler.Record {
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	cpu1 := runtime.Device{Type: runtime.CPU, Index: 1}
	lbl := func(step int32) profiler.Labels {
		l := profiler.NoLabels
		l.Step = step
		return l
	}
	return []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Device: cpu0, Labels: lbl(1), HostStart: 0, HostEnd: 1000 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: lbl(1),
			HostStart: 10 * us, HostEnd: 310 * us, HasDevice: true, DeviceStart: 20 * us, DeviceEnd: 420 * us, PeakMemory: 3 << 20},
		{ID: 3, Parent: 2, Depth: 2, Name: "linear", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: lbl(1),
			HostStart: 20 * us, HostEnd: 120 * us, HasDevice: true, DeviceNested: true, DeviceStart: 30 * us, DeviceEnd: 330 * us, PeakMemory: 3 << 20},
		{ID: 4, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: 0, Device: cpu0, Labels: lbl(1),
			HostStart: 400 * us, HostEnd: 600 * us, HasDevice: true, DeviceStart: 420 * us, DeviceEnd: 520 * us, PeakMemory: 4 << 20},
		{ID: 5, Parent: 1, Depth: 1, Name: "allreduce", Kind: profiler.KindCollective, Rank: 0, Device: cpu0, Labels: lbl(1),
			HostStart: 700 * us, HostEnd: 710 * us, HasDevice: true, DeviceStart: 710 * us, DeviceEnd: 810 * us, PeakMemory: 4 << 20},
		{ID: 1, Name: "step", Rank: 1, Device: cpu1, Labels: lbl(1), HostStart: 5 * us, HostEnd: 505 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "backward", Kind: profiler.KindDevice, Rank: 1, Device: cpu1, Labels: lbl(1),
			HostStart: 100 * us, HostEnd: 200 * us, HasDevice: true, DeviceStart: 150 * us, DeviceEnd: 400 * us, PeakMemory: 1 << 20},
	}
}

func TestSummarizeTotals(t *testing.T) {
	groups := profiler.Summarize(fixture())
	if len(groups) != 2 {
		t.Fatalf("%d groups, want 2", len(groups))
	}
	g := groups[0]
	if g.Rank != 0 || g.Tag != "step 1" {
		t.Fatalf("group 0 is rank %d tag %q", g.Rank, g.Tag)
	}
	// Top-level host time is the step only: 1000us. Outermost device
	// time: forward 400 + forward 100 + allreduce 100 = 600us (linear is
	// inside a device range and not counted again).
	if g.HostTotal != 1000*us || g.DeviceTotal != 600*us {
		t.Fatalf("totals host %v device %v, want 1ms and 600us", g.HostTotal, g.DeviceTotal)
	}
	want := map[string]struct {
		count           int
		host, dev       time.Duration
		hostPct, devPct float64
		avgHost, avgDev time.Duration
	}{
		"step":      {1, 1000 * us, 0, 100, 0, 1000 * us, 0},
		"forward":   {2, 500 * us, 500 * us, 50, 500.0 / 6, 250 * us, 250 * us},
		"linear":    {1, 100 * us, 300 * us, 10, 50, 100 * us, 300 * us},
		"allreduce": {1, 10 * us, 100 * us, 1, 100.0 / 6, 10 * us, 100 * us},
	}
	if len(g.Names) != len(want) {
		t.Fatalf("%d names, want %d", len(g.Names), len(want))
	}
	for _, n := range g.Names {
		w, ok := want[n.Name]
		if !ok {
			t.Fatalf("unexpected name %q", n.Name)
		}
		if n.Count != w.count || n.HostTotal != w.host || n.DeviceTotal != w.dev || n.AvgHost() != w.avgHost || n.AvgDevice() != w.avgDev {
			t.Errorf("%s: got %+v avgHost %v avgDev %v", n.Name, n, n.AvgHost(), n.AvgDevice())
		}
		if d := n.HostPercent - w.hostPct; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s host%% %v want %v", n.Name, n.HostPercent, w.hostPct)
		}
		if d := n.DevicePercent - w.devPct; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s device%% %v want %v", n.Name, n.DevicePercent, w.devPct)
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestReportGolden(t *testing.T) {
	recs := fixture()
	peak := map[int]int64{0: 4 << 20, 1: 1 << 20}
	for _, key := range []string{"host_total", "name", "device_pct", "avg_device", "count"} {
		by, err := profiler.ParseSortKey(key)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := profiler.WriteReport(&buf, profiler.Summarize(recs), peak, by); err != nil {
			t.Fatal(err)
		}
		golden(t, "report_"+key+".golden", buf.Bytes())
	}
	var buf bytes.Buffer
	if err := profiler.WriteRecords(&buf, recs[:5]); err != nil {
		t.Fatal(err)
	}
	golden(t, "records.golden", buf.Bytes())
}

func TestParseSortKey(t *testing.T) {
	for _, k := range profiler.SortKeys() {
		got, err := profiler.ParseSortKey(k)
		if err != nil || got.String() != k {
			t.Errorf("ParseSortKey(%q) = %v, %v", k, got, err)
		}
	}
	_, err := profiler.ParseSortKey("speed")
	if err == nil || !strings.Contains(err.Error(), `"speed"`) || !strings.Contains(err.Error(), "host_total") {
		t.Errorf("bad key error %v should name the key and the choices", err)
	}
}

func TestWriteRankFiles(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "report")
	paths, err := profiler.WriteRankFiles(prefix, fixture(), profiler.SortHostTotal, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 || paths[0] != prefix+".rank0" || paths[1] != prefix+".rank1" {
		t.Fatalf("paths %v", paths)
	}
	b, err := os.ReadFile(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "=== rank 1 · step 1 ===") || strings.Contains(s, "rank 0") || !strings.Contains(s, "backward") {
		t.Errorf("rank file 1 content:\n%s", s)
	}
	if _, err := profiler.WriteRankFiles(filepath.Join(t.TempDir(), "missing", "dir", "r"), fixture(), profiler.SortName, nil); err == nil {
		t.Error("unwritable prefix accepted")
	}
}

// TestWriteRankFilesKeepOrder: ranks interleaved in the records each get
// a file holding their records alone, in the order they came.
func TestWriteRankFilesKeepOrder(t *testing.T) {
	var recs []profiler.Record
	for i := range 30 {
		rank := []int{2, 0, 1, 2, 2}[i%5]
		recs = append(recs, profiler.Record{ID: uint64(i + 1), Rank: rank, Name: fmt.Sprintf("r%d-%02d", rank, i),
			HostStart: time.Duration(i) * time.Millisecond, HostEnd: time.Duration(i)*time.Millisecond + 500*time.Microsecond})
	}
	prefix := filepath.Join(t.TempDir(), "report")
	paths, err := profiler.WriteRankFiles(prefix, recs, profiler.SortName, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("paths %v, want 3", paths)
	}
	for rank, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The call log follows the tables: the names in the order written.
		log := string(b)[strings.LastIndex(string(b), "==="):]
		var want []string
		for _, r := range recs {
			if r.Rank == rank {
				want = append(want, r.Name)
			}
		}
		last := -1
		for _, name := range want {
			at := strings.Index(log, name)
			if at < 0 || at < last {
				t.Errorf("rank %d: %s missing from its call log or out of order:\n%s", rank, name, log)
				break
			}
			last = at
		}
		for _, other := range []int{0, 1, 2} {
			if other != rank && strings.Contains(string(b), fmt.Sprintf("r%d-", other)) {
				t.Errorf("rank %d's file holds rank %d's records", rank, other)
			}
		}
	}
}

// A rank file that exists is an error, and is left as it was; the other
// ranks' files are still written (what they recorded is not lost).
func TestWriteRankFilesNeverReplaces(t *testing.T) {
	for _, taken := range []int{0, 1} {
		prefix := filepath.Join(t.TempDir(), "report")
		mine := fmt.Sprintf("%s.rank%d", prefix, taken)
		other := fmt.Sprintf("%s.rank%d", prefix, 1-taken)
		if err := os.WriteFile(mine, []byte("the user's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths, err := profiler.WriteRankFiles(prefix, fixture(), profiler.SortHostTotal, nil)
		if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), mine) {
			t.Errorf("error %v, want one naming %s that wraps fs.ErrExist", err, mine)
		}
		if len(paths) != 1 || paths[0] != other {
			t.Errorf("paths %v, want %s only", paths, other)
		}
		if b, _ := os.ReadFile(mine); string(b) != "the user's\n" {
			t.Errorf("%s was replaced: %q", mine, b)
		}
		if b, err := os.ReadFile(other); err != nil || !strings.Contains(string(b), "Name") {
			t.Errorf("%s: %v, %d bytes; want the rank's report", other, err, len(b))
		}
	}
}

// Wrapped p2p over a network transport: two Sends whose transfers ended
// 300 µs and 100 µs after their 50 µs kernels (done 350 and 150 µs after
// the kernel started), and one whose transfer ended inside its kernel
// (counted at its kernel's end, 50 µs): (350 + 150 + 50) / 3 = 183.333 µs
// on average; a Recv with no transfer end. The report says so in a line
// after the table.
func TestReportTransferEnds(t *testing.T) {
	cpu := runtime.Device{Type: runtime.CPU, Index: 0}
	send := func(id uint64, start, transferAfter time.Duration) profiler.Record {
		return profiler.Record{ID: id, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Device: cpu, Labels: profiler.NoLabels,
			HostStart: start, HostEnd: start + 2*us, HasDevice: true, DeviceStart: start + 10*us, DeviceEnd: start + 60*us,
			Collective: profiler.Collective{Op: "Send", Peer: 1, Root: -1, TransferEnd: start + 60*us + transferAfter}}
	}
	recs := []profiler.Record{
		send(1, 0, 300*us), send(2, 1000*us, 100*us), send(3, 2000*us, -20*us),
		{ID: 4, Name: "Recv", Kind: profiler.KindP2P, Rank: 0, Device: cpu, Labels: profiler.NoLabels,
			HostStart: 3000 * us, HostEnd: 3002 * us, HasDevice: true, DeviceStart: 3010 * us, DeviceEnd: 3060 * us,
			Collective: profiler.Collective{Op: "Recv", Peer: 1, Root: -1}},
	}
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, profiler.Summarize(recs), nil, profiler.SortName); err != nil {
		t.Fatal(err)
	}
	want := "Send over a network transport: 3 of 3 calls done 183.333 us after their kernel started on average, the kernel alone 50.000 us"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, buf.String())
	}
	if strings.Contains(buf.String(), "Recv over a network transport") {
		t.Errorf("a Recv without a transfer end has a transfer line:\n%s", buf.String())
	}
}

// TestReportLongNames: a name longer than 100 characters (a templated
// kernel's) is written whole without widening the Name column of the
// other rows, which stays 100 wide.
func TestReportLongNames(t *testing.T) {
	cpu := runtime.Device{Type: runtime.CPU, Index: 0}
	long := "void at::native::elementwise_kernel<" + strings.Repeat("float, ", 60) + ">"
	recs := []profiler.Record{
		{ID: 1, Name: "aten::mm", Rank: 0, Device: cpu, Labels: profiler.NoLabels, HostStart: 0, HostEnd: 5 * us},
		{ID: 2, Name: long, Rank: 0, Device: cpu, Labels: profiler.NoLabels, HostStart: 10 * us, HostEnd: 12 * us},
	}
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, profiler.Summarize(recs), nil, profiler.SortName); err != nil {
		t.Fatal(err)
	}
	var short, longRow string
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "aten::mm "):
			short = line
		case strings.HasPrefix(line, long+" "):
			longRow = line
		}
	}
	// The count follows the padded name: 100 columns, a space, then "%7d".
	if len(short) < 108 || short[100:108] != "       1" || strings.TrimSpace(short[:100]) != "aten::mm" {
		t.Errorf("aten::mm row %q: want the name padded to 100 columns, then the count", short)
	}
	if f := strings.Fields(strings.TrimPrefix(longRow, long)); len(f) != 7 || f[0] != "1" || f[1] != "2.000" {
		t.Errorf("long name's row %q: want the whole name, then count 1 and host total 2.000", longRow)
	}
}

// A rank whose records carry no peak memory (a wrapped command's: its
// allocator is not watched) says so; a rank with one gives it in MB.
func TestReportPeakNotMeasured(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Labels: profiler.NoLabels, HostEnd: 5 * us, PeakMemory: 3 << 20},
		{ID: 1, Name: "step", Rank: 1, Labels: profiler.NoLabels, HostEnd: 5 * us},
	}
	s := profiler.NewSummary()
	s.Consume(recs)
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, s.Groups(), s.Peaks(), profiler.SortName); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Peak device memory (rank 0): 3.00 MB\n", "Peak device memory (rank 1): not measured\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestReportPeakNote: each measured peak says what it counts where the
// caller says; a rank with no words, or no figure, reads as before.
func TestReportPeakNote(t *testing.T) {
	recs := []profiler.Record{
		{ID: 1, Name: "step", Rank: 0, Labels: profiler.NoLabels, HostEnd: 5 * us, PeakMemory: 3 << 20},
		{ID: 1, Name: "step", Rank: 1, Labels: profiler.NoLabels, HostEnd: 5 * us, PeakMemory: 1 << 19},
		{ID: 1, Name: "step", Rank: 2, Labels: profiler.NoLabels, HostEnd: 5 * us},
	}
	s := profiler.NewSummary()
	s.Consume(recs)
	note := profiler.WithPeakNote(func(rank int) string {
		if rank == 0 {
			return "tensors"
		}
		return ""
	})
	var buf bytes.Buffer
	if err := profiler.WriteReport(&buf, s.Groups(), s.Peaks(), profiler.SortName, note); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Peak device memory (rank 0): 3.00 MB (tensors)\n",
		"Peak device memory (rank 1): 0.50 MB\n",
		"Peak device memory (rank 2): not measured\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}
