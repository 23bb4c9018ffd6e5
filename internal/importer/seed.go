package importer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// The framework's profiler (profiler.cc, Profiler::ReportGroupedByRank and
// PrintRecordsGroupedByRank) writes, per rank and then per tag in the
// order of std::map (bytes ascending):
//
//	=== Profiler Report for Rank N ===            === Kernel Call Log for Rank N ===
//	Tag: T                                        Tag: T
//	Peak Device Memory Usage: M MB                Idx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)
//	Name Count Host Total(us) Host % ...          0   2026-02-25 13:05:07 matmul Device(CUDA, 0)1834 1790 512
//
// every column left-aligned with std::setw, which pads but never cuts: a
// value as wide as its column runs into the next one. Names are padded to
// 40 bytes, the device to 10, and "Device(CUDA, 0)" (Device::ToString) is
// 15, so the host time always follows it with no space; a name of 40
// bytes or more runs into the count (report) or the device (log).
const (
	seedReportPrefix = "=== Profiler Report for Rank "
	seedLogPrefix    = "=== Kernel Call Log for Rank "
	seedNameWidth    = 40
)

var (
	seedSectionRe = regexp.MustCompile(`^=== (?:Profiler Report|Kernel Call Log) for Rank (-?\d+) ===$`)
	seedReportHdr = strings.Fields("Name Count Host Total(us) Host % Device Total(us) Device % Avg Host(us) Avg Device(us)")
	seedLogHdr    = strings.Fields("Idx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)")
	// A call log row after its index and timestamp: the name (greedy: the
	// device is the last one on the line), the device, then three
	// integers.
	seedLogRowRe = regexp.MustCompile(`^(\d+)\s*(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*(.*?)\s*(cpu|Device\(([A-Za-z]+), (-?\d+)\))\s*(-?\d+)\s+(-?\d+)\s+(-?\d+)\s*$`)
	seedPeakRe   = regexp.MustCompile(`^Peak Device Memory Usage: (-?\d+) MB$`)
)

// seedTimeLayout is GetCurrentTimestamp's strftime "%Y-%m-%d %H:%M:%S":
// local wall time, to the second, when the range ended.
const seedTimeLayout = "2006-01-02 15:04:05"

// The timestamps a call log can hold: the framework reads the system
// clock, which starts in 1970, and a record's times are nanoseconds since
// then in an int64, which end in April 2262. Outside them a range has no
// place on the timeline (time.UnixNano's result would be undefined).
var (
	seedEarliest = time.Unix(0, 0).UTC()
	seedLatest   = time.Unix(0, math.MaxInt64).UTC().Truncate(time.Second)
)

// Table is one summary table of a seed report: one rank's ranges of one
// tag, a row per name.
type Table struct {
	Rank   int
	Tag    string
	PeakMB int64 // "Peak Device Memory Usage"
	Rows   []Row
	Path   string
	Line   int // of its "Tag:" line
}

// Row is one line of a Table, as written (times in whole microseconds).
type Row struct {
	Name                       string
	Count                      int64
	HostTotalUS, DeviceTotalUS int64
	HostPercent, DevicePercent float64
	AvgHostUS, AvgDeviceUS     int64
	Line                       int
}

type seedSection int

const (
	sectionNone seedSection = iota
	sectionReport
	sectionLog
)

// seedCall is one call log row before it is placed on the timeline.
type seedCall struct {
	rank        int
	tag         string
	at          time.Time // end, to the second
	name        string
	device      runtime.Device
	hasDevice   bool
	hostUS, dUS int64
	peakMB      int64
	order       int // position in the file
	line        int
}

// ParseSeed reads the framework profiler's text output: any number of
// report and call log sections, in any order. Call log rows become
// records; report tables become Tables (they hold totals, not calls, so
// they carry no timeline). Lines other than the profiler's own are an
// error: the file must be what Report(prefix) or PrintRecords(prefix)
// wrote, or several such files concatenated.
func ParseSeed(path string, r io.Reader) (*Profile, error) {
	p := &Profile{Path: path, Format: FormatSeed, RankKnown: true}
	tail := &lastByte{r: r}
	sc := bufio.NewScanner(tail)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var (
		section seedSection
		rank    int
		tag     string
		haveTag bool
		header  bool
		table   *Table
		calls   []seedCall
		line    int
		rowAt   int // the line of the last table or call log row
	)
	fail := func(format string, args ...any) error {
		return &ParseError{Path: path, Line: line, Err: fmt.Errorf(format, args...)}
	}
	flush := func() {
		if table != nil {
			p.Tables = append(p.Tables, *table)
			table = nil
		}
	}
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), " \r")
		if line == 1 {
			text = strings.TrimPrefix(text, "\xef\xbb\xbf")
		}
		switch {
		case strings.TrimSpace(text) == "":
			continue
		case strings.HasPrefix(text, "=== "):
			m := seedSectionRe.FindStringSubmatch(text)
			if m == nil {
				return nil, fail("unrecognised section heading %q", text)
			}
			n, err := strconv.Atoi(m[1])
			if err != nil || n < 0 {
				return nil, fail("rank %q is not a rank", m[1])
			}
			flush()
			rank, haveTag, header = n, false, false
			section = sectionLog
			if strings.HasPrefix(text, seedReportPrefix) {
				section = sectionReport
			}
			continue
		case section == sectionNone:
			return nil, fail("expected a %q or %q heading, found %q", strings.TrimSpace(seedReportPrefix)+" N ===", strings.TrimSpace(seedLogPrefix)+" N ===", clip(text))
		case strings.HasPrefix(text, "Tag: ") || text == "Tag:":
			flush()
			tag, haveTag, header = strings.TrimPrefix(strings.TrimPrefix(text, "Tag:"), " "), true, false
			if section == sectionReport {
				table = &Table{Rank: rank, Tag: tag, PeakMB: -1, Path: path, Line: line}
			}
			continue
		case !haveTag:
			return nil, fail("expected \"Tag: …\" after the section heading, found %q", clip(text))
		}
		switch section {
		case sectionReport:
			if m := seedPeakRe.FindStringSubmatch(text); m != nil {
				if table.PeakMB >= 0 || header {
					return nil, fail("a second peak memory line in tag %q", tag)
				}
				// PeakMB < 0 stands for no peak line yet: a negative
				// peak would read as one missing, at the tag.
				v, err := strconv.ParseInt(m[1], 10, 64)
				if err != nil || v < 0 {
					return nil, fail("peak memory %q MB: want a whole number ≥ 0 of a sane size", m[1])
				}
				table.PeakMB = v
				continue
			}
			if !header {
				if !sameFields(text, seedReportHdr) {
					return nil, fail("expected the report's column header (%s), found %q", strings.Join(seedReportHdr, " "), clip(text))
				}
				header = true
				continue
			}
			row, warn, err := parseSeedReportRow(text)
			if err != nil {
				return nil, fail("%v", err)
			}
			if warn != "" {
				p.warnf("%s:%d: %s", path, line, warn)
			}
			row.Line, rowAt = line, line
			table.Rows = append(table.Rows, row)
		case sectionLog:
			if !header {
				if !sameFields(text, seedLogHdr) {
					return nil, fail("expected the call log's column header (%s), found %q", strings.Join(seedLogHdr, " "), clip(text))
				}
				header = true
				continue
			}
			c, err := parseSeedLogRow(text)
			if err != nil {
				return nil, fail("%v", err)
			}
			c.rank, c.tag, c.order, c.line = rank, tag, len(calls), line
			rowAt = line
			calls = append(calls, c)
		}
	}
	err := sc.Err()
	if err != nil {
		line++
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fail("line longer than 1 MiB")
		}
		return nil, fail("%v", err)
	}
	if rowAt == line && tail.n > 0 && tail.last != '\n' {
		// The profiler ends every row with a line end: a last row
		// without one was cut short, maybe inside a number, which
		// would read as a smaller one.
		return nil, fail("the file ends inside this row, with no line end after it: was the file cut short? (if it is whole, end it with a line end)")
	}
	flush()
	if line == 0 {
		return nil, &ParseError{Path: path, Line: 1, Err: errors.New("empty file")}
	}
	for _, t := range p.Tables {
		if t.PeakMB < 0 {
			return nil, &ParseError{Path: path, Line: t.Line, Err: fmt.Errorf("tag %q has no \"Peak Device Memory Usage\" line", t.Tag)}
		}
	}
	if p.Records, err = placeSeedCalls(p, calls); err != nil {
		return nil, err
	}
	return p, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

func sameFields(line string, want []string) bool {
	got := strings.Fields(line)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func parseSeedLogRow(text string) (seedCall, error) {
	m := seedLogRowRe.FindStringSubmatch(text)
	if m == nil {
		return seedCall{}, fmt.Errorf("not a call log row (Idx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)): %q", clip(text))
	}
	var c seedCall
	at, err := time.Parse(seedTimeLayout, m[2])
	if err != nil {
		return c, fmt.Errorf("timestamp %q: %v", m[2], err)
	}
	if at.Before(seedEarliest) || at.After(seedLatest) {
		return c, fmt.Errorf("timestamp %q: out of range: a call log's clock runs from %s to %s (nanoseconds since 1970 in 64 bits)",
			m[2], seedEarliest.Format(seedTimeLayout), seedLatest.Format(seedTimeLayout))
	}
	c.at, c.name = at, m[3]
	if c.name == "" {
		return c, errors.New("a row without a name")
	}
	if m[4] == "cpu" {
		c.device = runtime.Device{Type: runtime.CPU}
	} else {
		t, err := runtime.ParseDeviceType(m[5])
		if err != nil {
			return c, fmt.Errorf("device %q: unknown type %q", m[4], m[5])
		}
		idx, err := strconv.Atoi(m[6])
		if err != nil || idx < 0 {
			return c, fmt.Errorf("device %q: bad index", m[4])
		}
		c.device = runtime.Device{Type: t, Index: idx}
		c.hasDevice = t != runtime.CPU
	}
	vals := [3]int64{}
	for i, s := range m[7:10] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || v > int64(time.Duration(1<<62)/time.Microsecond) {
			return c, fmt.Errorf("%s %q: want a whole number ≥ 0 of a sane size", []string{"Host(us)", "Device(us)", "Peak Mem(MB)"}[i], s)
		}
		vals[i] = v
	}
	c.hostUS, c.dUS, c.peakMB = vals[0], vals[1], vals[2]
	if vals[2] > 1<<40 {
		return c, fmt.Errorf("column Peak Mem(MB): %d is too large", vals[2])
	}
	return c, nil
}

// parseSeedReportRow splits a report row: six numbers from the right, then
// the count, then the name. A name of 40 bytes or more runs into the count;
// the split is the one where the averages the row states equal its totals
// over the count (the framework truncates them to whole microseconds).
func parseSeedReportRow(text string) (Row, string, error) {
	var row Row
	rest := text
	var tail [6]string
	for i := 5; i >= 0; i-- {
		rest = strings.TrimRight(rest, " \t")
		j := strings.LastIndexAny(rest, " \t")
		if j < 0 {
			return row, "", fmt.Errorf("not a report row (name, count and seven numbers): %q", clip(text))
		}
		tail[i], rest = rest[j+1:], rest[:j]
	}
	ints := []*int64{&row.HostTotalUS, nil, &row.DeviceTotalUS, nil, &row.AvgHostUS, &row.AvgDeviceUS}
	for i, s := range tail {
		if ints[i] == nil {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return row, "", fmt.Errorf("percentage %q is not a number", s)
			}
			if i == 1 {
				row.HostPercent = f
			} else {
				row.DevicePercent = f
			}
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || v > int64(time.Duration(1<<62)/time.Microsecond) {
			return row, "", fmt.Errorf("%q is not a whole number of microseconds ≥ 0", s)
		}
		*ints[i] = v
	}
	rest = strings.TrimRight(rest, " \t")
	end := len(rest)
	start := end
	for start > 0 && rest[start-1] >= '0' && rest[start-1] <= '9' {
		start--
	}
	if start == end {
		return row, "", fmt.Errorf("no count before the totals: %q", clip(text))
	}
	consistent := func(count int64) bool {
		return count > 0 && row.HostTotalUS/count == row.AvgHostUS && row.DeviceTotalUS/count == row.AvgDeviceUS
	}
	if start == 0 || rest[start-1] == ' ' || rest[start-1] == '\t' {
		count, err := strconv.ParseInt(rest[start:end], 10, 64)
		if err != nil || count < 1 {
			return row, "", fmt.Errorf("count %q is not a whole number ≥ 1", rest[start:end])
		}
		row.Count, row.Name = count, strings.TrimRight(rest[:start], " \t")
		if row.Name == "" {
			return row, "", errors.New("a row without a name")
		}
		warn := ""
		if !consistent(count) {
			warn = fmt.Sprintf("%s: averages %d/%d µs are not the totals %d/%d µs over the count %d", row.Name, row.AvgHostUS, row.AvgDeviceUS, row.HostTotalUS, row.DeviceTotalUS, count)
		}
		return row, warn, nil
	}
	// The name ran into the count: it is at least seedNameWidth bytes,
	// and the count at most 19 digits (an int64).
	var found []int
	for k := max(start, seedNameWidth, end-19); k < end; k++ {
		if rest[k] == '0' {
			continue // a count has no leading zero
		}
		count, err := strconv.ParseInt(rest[k:end], 10, 64)
		if err == nil && consistent(count) {
			found = append(found, k)
		}
	}
	if len(found) == 0 {
		return row, "", fmt.Errorf("cannot tell the name from the count in %q (no split agrees with the averages)", clip(rest))
	}
	k := found[0]
	row.Name = rest[:k]
	row.Count, _ = strconv.ParseInt(rest[k:end], 10, 64)
	warn := ""
	if len(found) > 1 {
		warn = fmt.Sprintf("%q: the name runs into the count and %d splits agree with the averages; took count %d", clip(rest), len(found), row.Count)
	}
	return row, warn, nil
}

// placeSeedCalls lays each rank's calls out on a timeline. A row's
// timestamp is the wall time, to the second, when the range ended; the
// framework records only the outermost range of a thread, so one rank's
// ranges follow one another. Each range therefore ends at its timestamp's
// second or, when the ranges before it in that second need the room, right
// after the previous one; its device time starts with its host time (the
// framework synchronises the stream, then records the start event). A
// range that would end past what 64 bits of nanoseconds hold (each time is
// accepted up to 2^62 ns, and ranges add up) is an error naming its row.
func placeSeedCalls(p *Profile, calls []seedCall) ([]profiler.Record, error) {
	byRank := map[int][]seedCall{}
	var ranks []int
	for _, c := range calls {
		if _, ok := byRank[c.rank]; !ok {
			ranks = append(ranks, c.rank)
		}
		byRank[c.rank] = append(byRank[c.rank], c)
	}
	var out []profiler.Record
	for _, rank := range ranks {
		cs := byRank[rank]
		// Tags come in map order, not time order: merge them by timestamp,
		// the file's order within one second.
		slices.SortStableFunc(cs, func(a, b seedCall) int { return a.at.Compare(b.at) })
		var prevEnd time.Duration
		late := 0
		for i, c := range cs {
			host := time.Duration(c.hostUS) * time.Microsecond
			at := time.Duration(c.at.UnixNano())
			end := at
			if i > 0 && prevEnd > at-host {
				// The ranges before it in its second need the room.
				if prevEnd > math.MaxInt64-host {
					return nil, &ParseError{Path: p.Path, Line: c.line, Err: fmt.Errorf("%s: laid out after the ranges before it, its range would end past what 64 bits of nanoseconds since 1970 hold", c.name)}
				}
				end = prevEnd + host
			}
			if c.hasDevice && end-host > math.MaxInt64-time.Duration(c.dUS)*time.Microsecond {
				return nil, &ParseError{Path: p.Path, Line: c.line, Err: fmt.Errorf("%s: its device time would end past what 64 bits of nanoseconds since 1970 hold", c.name)}
			}
			if i > 0 && end-at >= time.Second { // at+time.Second may not fit
				late++
			}
			rec := profiler.Record{
				ID: uint64(i + 1), Name: c.name, Rank: rank, Device: c.device, Tag: c.tag,
				Labels:    profiler.NoLabels,
				HostStart: end - host, HostEnd: end,
			}
			if c.hasDevice {
				rec.Kind = profiler.KindDevice
				rec.HasDevice = true
				rec.DeviceStart = rec.HostStart
				rec.DeviceEnd = rec.HostStart + time.Duration(c.dUS)*time.Microsecond
				rec.PeakMemory = c.peakMB << 20
			}
			prevEnd = end
			out = append(out, rec)
		}
		if late > 0 {
			p.warnf("%s: rank %d: %s %s later than %s timestamp's second allows: the rank's ranges overlapped (several threads recorded for it), so its timeline is stretched", p.Path, rank, plural(late, "call"), either(late, "ends", "end"), either(late, "its", "their"))
		}
	}
	return out, nil
}

// lastByte passes r through and remembers the last byte read from it.
type lastByte struct {
	r    io.Reader
	n    int64
	last byte
}

func (l *lastByte) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if n > 0 {
		l.n += int64(n)
		l.last = p[n-1]
	}
	return n, err
}
