package profiler

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// SortKey orders the rows of a report table.
type SortKey int

// Report columns to sort by; numeric columns sort descending, Name
// ascending, ties by name.
const (
	SortHostTotal SortKey = iota
	SortName
	SortCount
	SortHostPercent
	SortDeviceTotal
	SortDevicePercent
	SortAvgHost
	SortAvgDevice
)

var sortKeyNames = [...]string{
	SortHostTotal:     "host_total",
	SortName:          "name",
	SortCount:         "count",
	SortHostPercent:   "host_pct",
	SortDeviceTotal:   "device_total",
	SortDevicePercent: "device_pct",
	SortAvgHost:       "avg_host",
	SortAvgDevice:     "avg_device",
}

func (k SortKey) String() string {
	if k >= 0 && int(k) < len(sortKeyNames) {
		return sortKeyNames[k]
	}
	return fmt.Sprintf("unsupported sort key %d", int(k))
}

// SortKeys lists the accepted sort key names.
func SortKeys() []string { return slices.Clone(sortKeyNames[:]) }

// ParseSortKey parses a column name as SortKey.String writes it.
func ParseSortKey(s string) (SortKey, error) {
	for i, n := range sortKeyNames {
		if s == n {
			return SortKey(i), nil
		}
	}
	return 0, fmt.Errorf("unknown sort column %q (one of: %s)", s, strings.Join(sortKeyNames[:], ", "))
}

func sortNames(rows []NameStats, by SortKey) {
	key := func(s NameStats) float64 {
		switch by {
		case SortCount:
			return float64(s.Count)
		case SortHostPercent:
			return s.HostPercent
		case SortDeviceTotal:
			return float64(s.DeviceTotal)
		case SortDevicePercent:
			return s.DevicePercent
		case SortAvgHost:
			return mean(s.HostTotal, s.Count)
		case SortAvgDevice:
			return mean(s.DeviceTotal, s.DeviceCount)
		}
		return float64(s.HostTotal)
	}
	slices.SortStableFunc(rows, func(a, b NameStats) int {
		if by != SortName {
			if c := cmp.Compare(key(b), key(a)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// mean is total over n in microseconds, unrounded (0 for n = 0): the
// report prints it to the nanosecond, so it must not be cut down to a
// whole nanosecond first, as NameStats.AvgHost and the others are.
func mean(total time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n) / float64(time.Microsecond)
}

// fixed is v with prec decimals, as "%.*f" writes it.
func fixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// oneLine is a range name as a line of a table or log holds it: a name
// with a line break or another control character is written Go-quoted,
// so it stays on its row.
func oneLine(name string) string {
	if strings.IndexFunc(name, unicode.IsControl) < 0 {
		return name
	}
	return strconv.Quote(name)
}

const mib = 1 << 20

// maxNameWidth is the widest a report's Name column is padded to. A
// longer name (a templated kernel's runs to thousands of characters) is
// written whole, pushing its row's figures right, rather than widening
// every row of the table.
const maxNameWidth = 100

// reportTitles are the report table's figure columns, after Name, and
// reportWidths their least widths (the seed's).
var (
	reportTitles = [...]string{"Count", "Host Total(us)", "Host %", "Device Total(us)", "Device %", "Avg Host(us)", "Avg Device(us)"}
	reportWidths = [len(reportTitles)]int{7, 16, 8, 18, 9, 14, 16}
)

// ReportOption adjusts what WriteReport and WriteRankFiles write.
type ReportOption interface{ applyReport(*reportConfig) }

type reportConfig struct {
	peakNote func(rank int) string
}

type reportOptionFunc func(*reportConfig)

func (f reportOptionFunc) applyReport(c *reportConfig) { f(c) }

// WithPeakNote has each rank's peak device memory line say what the
// figure measures, note(rank) in parentheses after it ("" for nothing):
// the same words mean different memory to different sources — tensors a
// framework's allocator handed out, or everything a process obtained
// from CUDA, its allocator's cached pool and NCCL's buffers included.
func WithPeakNote(note func(rank int) string) ReportOption {
	return reportOptionFunc(func(c *reportConfig) { c.peakNote = note })
}

// WriteReport writes the summary tables, one per rank and tag (a row per
// range name: count, host and device totals and shares, averages), rows
// ordered by `by`, then a line per name with transfer ends (p2p over a
// network transport in a wrapped run: how long after their kernels
// started they were done) and one naming the names only some of whose
// ranges have device times (Avg Device is over those), each rank's section
// ending with its peak device memory (peak maps rank to bytes; a missing
// rank prints "not measured"). Groups of ranks summed (MergeRanks) are
// titled "all N ranks" and end with the largest rank's peak.
func WriteReport(w io.Writer, groups []Group, peak map[int]int64, by SortKey, opts ...ReportOption) error {
	if err := checkWriter("WriteReport", w); err != nil {
		return err
	}
	var c reportConfig
	for _, o := range opts {
		o.applyReport(&c)
	}
	bw := bufio.NewWriter(w)
	for i, g := range groups {
		if g.Rank == AllRanks {
			fmt.Fprintf(bw, "=== all %d ranks · %s ===\n", g.Ranks, oneLine(g.Tag))
		} else {
			fmt.Fprintf(bw, "=== rank %d · %s ===\n", g.Rank, oneLine(g.Tag))
		}
		rows := slices.Clone(g.Names)
		sortNames(rows, by)
		// Each figure column is as wide as the seed's, or as its widest
		// figure (a count over 9,999,999, hours of time): a figure never
		// pushes the columns after it out of line.
		widths := reportWidths
		cells := make([][len(reportWidths)]string, len(rows))
		width := len("Name")
		for j := range rows {
			n := &rows[j]
			n.Name = oneLine(n.Name)
			width = max(width, min(len(n.Name), maxNameWidth))
			cells[j] = [...]string{strconv.Itoa(n.Count),
				fixed(us(n.HostTotal), 3), fixed(n.HostPercent, 2), fixed(us(n.DeviceTotal), 3), fixed(n.DevicePercent, 2),
				fixed(mean(n.HostTotal, n.Count), 3), fixed(mean(n.DeviceTotal, n.DeviceCount), 3)}
			if n.DeviceCount == 0 {
				// Not timed on the device, which 0.000 would not say.
				cells[j][3], cells[j][4], cells[j][6] = "-", "-", "-"
			}
			for k, c := range cells[j] {
				widths[k] = max(widths[k], len(c))
			}
		}
		fmt.Fprintf(bw, "%-*s", width, "Name")
		for k, title := range reportTitles {
			fmt.Fprintf(bw, " %*s", widths[k], title)
		}
		fmt.Fprintln(bw)
		for j := range rows {
			fmt.Fprintf(bw, "%-*s", width, rows[j].Name)
			for k, c := range cells[j] {
				fmt.Fprintf(bw, " %*s", widths[k], c)
			}
			fmt.Fprintln(bw)
		}
		for _, n := range rows {
			if n.TransferCount > 0 {
				fmt.Fprintf(bw, "%s over a network transport: %d of %d calls done %.3f us after their kernel started on average, the kernel alone %.3f us (NCCL's proxy moved the data after it)\n",
					n.Name, n.TransferCount, n.DeviceCount, mean(n.TransferTotal, n.TransferCount), mean(n.DeviceTotal, n.DeviceCount))
			}
		}
		writePartlyTimed(bw, rows)
		last := i == len(groups)-1 || groups[i+1].Rank != g.Rank
		switch {
		case last && g.Rank == AllRanks:
			writeLargestPeak(bw, peak, c.peakNote)
		case last:
			if p, ok := peak[g.Rank]; ok {
				fmt.Fprintf(bw, "Peak device memory (rank %d): %.2f MB", g.Rank, float64(p)/mib)
				if c.peakNote != nil {
					if note := c.peakNote(g.Rank); note != "" {
						fmt.Fprintf(bw, " (%s)", note)
					}
				}
				fmt.Fprintln(bw)
			} else {
				// No record carried a peak (a wrapped command's: its
				// allocator is not watched): unknown, not 0.
				fmt.Fprintf(bw, "Peak device memory (rank %d): not measured\n", g.Rank)
			}
		}
		fmt.Fprintln(bw)
	}
	if len(groups) > 0 {
		fmt.Fprintln(bw, reportLegend)
	}
	return bw.Flush()
}

// reportLegend says what the tables' shares are of.
const reportLegend = "Host %: of the table's outermost ranges' host time (its steps, where the run marks them); Device %: of its outermost device-timed ranges' device time, summed over streams (ranges that overlap on several streams can add past the step); -: no device time (not timed on the device)"

// writePartlyTimed names the rows of which only some ranges have device
// times — event-timed ones the event pool ran dry for, trace-timed ones
// whose stream ran nothing while they were open — so that Avg Device,
// over those alone, is not read as over Count.
func writePartlyTimed(w io.Writer, rows []NameStats) {
	sep := "device times for only some ranges (Avg Device is over those): "
	named := false
	for _, n := range rows {
		if n.DeviceCount > 0 && n.DeviceCount < n.Count {
			fmt.Fprintf(w, "%s%s %d of %d", sep, n.Name, n.DeviceCount, n.Count)
			sep, named = ", ", true
		}
	}
	if named {
		fmt.Fprintln(w)
	}
}

// writeLargestPeak ends the tables of ranks summed (MergeRanks) with the
// largest rank's peak device memory, the lowest rank of those at it.
func writeLargestPeak(w io.Writer, peak map[int]int64, note func(rank int) string) {
	rank, p := -1, int64(0)
	for r, b := range peak {
		if rank < 0 || b > p || b == p && r < rank {
			rank, p = r, b
		}
	}
	if rank < 0 {
		fmt.Fprintln(w, "Peak device memory (largest of the ranks): not measured")
		return
	}
	fmt.Fprintf(w, "Peak device memory (largest of the ranks: rank %d): %.2f MB", rank, float64(p)/mib)
	if note != nil {
		if n := note(rank); n != "" {
			fmt.Fprintf(w, " (%s)", n)
		}
	}
	fmt.Fprintln(w)
}

// WriteRecords writes the per-call log: one line per range in the order
// given, with its start time since the profiler's epoch. The device time
// is "-" for a range without one, "unfinished" for a device range whose
// device work had not finished (Record.DeviceUnfinished).
func WriteRecords(w io.Writer, records []Record) error {
	if err := checkWriter("WriteRecords", w); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	// Each figure column is as wide as its widest figure where that is
	// wider than its title (a millionth call, a range of hours), so no
	// figure pushes the columns after it out of line.
	width := len("Name")
	idxW := max(6, len(strconv.Itoa(len(records)-1)))
	tsW, hostW, devW, peakW := 16, 12, 12, 13
	var buf []byte
	flen := func(v float64, prec int) int {
		buf = strconv.AppendFloat(buf[:0], v, 'f', prec, 64)
		return len(buf)
	}
	for i := range records {
		r := &records[i]
		width = max(width, min(len(oneLine(r.Name))+2*max(r.Depth, 0), maxNameWidth))
		tsW = max(tsW, flen(us(r.HostStart), 3))
		hostW = max(hostW, flen(us(r.HostDuration()), 3))
		if r.HasDevice {
			devW = max(devW, flen(us(r.DeviceDuration()), 3))
		}
		peakW = max(peakW, flen(float64(r.PeakMemory)/mib, 2))
	}
	fmt.Fprintf(bw, "%*s %*s  %-*s %-8s %*s %*s %*s\n", idxW, "Idx", tsW, "Timestamp(us)", width, "Name", "Device",
		hostW, "Host(us)", devW, "Device(us)", peakW, "Peak Mem(MB)")
	for i := range records {
		r := &records[i]
		dev := "-"
		if r.HasDevice {
			dev = fixed(us(r.DeviceDuration()), 3)
		} else if r.DeviceUnfinished {
			dev = unfinished
		}
		name := strings.Repeat("  ", max(r.Depth, 0)) + oneLine(r.Name)
		fmt.Fprintf(bw, "%*d %*.3f  %-*s %-8s %*.3f %*s %*.2f\n", idxW, i, tsW, us(r.HostStart), width, name,
			r.Device.String(), hostW, us(r.HostDuration()), devW, dev, peakW, float64(r.PeakMemory)/mib)
	}
	return bw.Flush()
}

// unfinished is the device time column of a record whose device work had
// not finished (Record.DeviceUnfinished), in the call logs.
const unfinished = "unfinished"

// Report writes the summary tables of everything recorded so far.
func (p *Profiler) Report(w io.Writer, by SortKey) error {
	if err := checkWriter("Report", w); err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	recs := p.Snapshot()
	return WriteReport(w, Summarize(recs), recordPeaks(recs), by)
}

// recordPeaks is each rank's highest Record.PeakMemory; a rank none of
// whose records carries one is left out, so the report says "not
// measured" rather than 0 MB.
func recordPeaks(recs []Record) map[int]int64 {
	out := map[int]int64{}
	for i := range recs {
		if pm := recs[i].PeakMemory; pm > 0 {
			out[recs[i].Rank] = max(out[recs[i].Rank], pm)
		}
	}
	return out
}

// WriteRankFiles writes one file per rank, <prefix>.rank<N>, holding the
// header lines, that rank's summary tables (as WriteReport writes them,
// with opts) and its per-call log, and returns the paths written. A file
// that exists already is an error (wrapping fs.ErrExist), never
// replaced; the other ranks' files are still written, and the errors
// joined. Any other error (a missing directory, a full disk) ends it.
func WriteRankFiles(prefix string, records []Record, by SortKey, header []string, opts ...ReportOption) ([]string, error) {
	// Each rank's records, in their order, in one array of the records'
	// size: slices grown by append held up to twice as much, and a run
	// imported whole is hundreds of MB of records.
	count := map[int]int{}
	var ranks []int
	for i := range records {
		if count[records[i].Rank] == 0 {
			ranks = append(ranks, records[i].Rank)
		}
		count[records[i].Rank]++
	}
	slices.Sort(ranks)
	all := make([]Record, len(records))
	byRank := make(map[int][]Record, len(ranks))
	at := 0
	for _, rank := range ranks {
		byRank[rank] = all[at : at : at+count[rank]]
		at += count[rank]
	}
	for i := range records {
		byRank[records[i].Rank] = append(byRank[records[i].Rank], records[i])
	}
	var (
		paths []string
		errs  []error
	)
	for _, rank := range ranks {
		recs := byRank[rank]
		path := fmt.Sprintf("%s.rank%d", prefix, rank)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) // never over an existing file
		if errors.Is(err, fs.ErrExist) {
			errs = append(errs, fmt.Errorf("profiler: report for rank %d: %w", rank, err))
			continue
		}
		if err != nil { // the directory or the disk: the next ranks' would fail alike
			return paths, errors.Join(append(errs, fmt.Errorf("profiler: report for rank %d: %w", rank, err))...)
		}
		peak := recordPeaks(recs)
		for _, h := range header {
			fmt.Fprintln(f, h)
		}
		err = WriteReport(f, Summarize(recs), peak, by, opts...)
		if err == nil {
			err = WriteRecords(f, recs)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, errors.Join(append(errs, fmt.Errorf("profiler: report for rank %d: %w", rank, err))...)
		}
		paths = append(paths, path)
	}
	return paths, errors.Join(errs...)
}

// checkWriter refuses a nil writer, which would panic at the first write.
func checkWriter(fn string, w io.Writer) error {
	if w == nil {
		return errors.New("profiler: " + fn + ": nil writer")
	}
	return nil
}
