package importer

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/trainscope/trainscope/profiler"
)

// Format is a kind of profile file.
type Format int

// Formats Detect recognises.
const (
	FormatUnknown Format = iota
	// FormatSeed is the C++ framework's profiler output: call logs,
	// summary reports, or both.
	FormatSeed
	// FormatKineto is Chrome trace JSON as torch.profiler writes it.
	FormatKineto
	// FormatTrainscope is the trace.json trainscope itself writes
	// (exporters/chrometrace), read back into records.
	FormatTrainscope
)

func (f Format) String() string {
	switch f {
	case FormatSeed:
		return "framework profiler text"
	case FormatKineto:
		return "Chrome/Kineto trace"
	case FormatTrainscope:
		return "trainscope trace"
	}
	return "unknown format"
}

// Profile is what one file holds.
type Profile struct {
	Path   string
	Format Format
	// Records are on the file's own clock: durations since the Unix
	// epoch of the wall time the file states (Combine moves them).
	Records []profiler.Record
	// Tables are the summary tables of a seed report.
	Tables []Table
	// RankKnown reports that the file says which rank it holds; a Kineto
	// trace without distributedInfo does not (its records carry rank 0
	// until AssignRanks gives them one).
	RankKnown bool
	// LeftOut are the ranks whose records AssignRanks left out of this
	// file: an earlier file holds the same rank over the same time.
	LeftOut []int
	// KernelsLabelled counts a Kineto trace's kernels launched inside a
	// range named as forward or backward work (naming.WorkOf), which
	// carry its phase, chunk and microbatch. StagedBy says what gave the
	// trace's rank its pipeline stage: "process group" (distributedInfo's
	// pipeline group), "pipelining actions" (torch.distributed.pipelining's
	// "PP:…" ranges), or "" where nothing did.
	KernelsLabelled int
	StagedBy        string
	// PeakMemory and PeakReserved are the highest bytes a Kineto trace's
	// "[memory]" events (profile_memory=True) say the rank's device
	// allocator held allocated and reserved; MemoryEvents counts those
	// events. Each top-level range's PeakMemory is the highest while it
	// was open.
	PeakMemory, PeakReserved int64
	MemoryEvents             int
	// OtherData holds a trainscope trace's otherData strings (producer,
	// epoch, the steps it covers, whether the run was partial).
	OtherData map[string]string
	Warnings  []string
	// groupRanks holds, by record ID, the "Process Group Ranks" of the
	// collectives of a Kineto trace that does not say its rank, whose
	// GroupRank AssignRanks works out again with the rank it gives.
	groupRanks map[uint64]string
}

// Ranks lists the ranks of the profile's records, ascending.
func (p *Profile) Ranks() []int {
	var out []int
	for i := range p.Records {
		if !slices.Contains(out, p.Records[i].Rank) {
			out = append(out, p.Records[i].Rank)
		}
	}
	slices.Sort(out)
	return out
}

func (p *Profile) warnf(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

// ParseError is malformed input: the file, and the line (text formats) or
// byte offset (JSON) where it went wrong.
type ParseError struct {
	Path   string
	Line   int   // 1-based; 0 when Offset applies
	Offset int64 // byte offset into the input, when Line is 0
	// Decompressed says Offset counts the bytes of a gzipped file's
	// decompressed content: it may lie past the end of the file itself,
	// and the message says so.
	Decompressed bool
	Err          error
}

func (e *ParseError) Error() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err)
	case e.Decompressed:
		return fmt.Sprintf("%s: byte %d of its decompressed content: %v", e.Path, e.Offset, e.Err)
	}
	return fmt.Sprintf("%s: byte %d: %v", e.Path, e.Offset, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ErrUnknownFormat is returned for content Detect does not recognise.
var ErrUnknownFormat = errors.New("not a profile this command reads (want the framework profiler's report or call log, or a Chrome/Kineto trace JSON)")

// unknownFormat says why head is no format Load reads: empty, or one of
// the files of a trainscope run directory other than its trace, named
// with the trace.json to import instead (import RUN_DIR/* meets them
// all), or anything else (ErrUnknownFormat).
func unknownFormat(head []byte) error {
	t := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	switch {
	case len(head) == 0:
		return errors.New("empty file")
	case len(t) == 0:
		return errors.New("nothing but white space")
	case pprofHead(head):
		return fmt.Errorf("%w: this is a pprof profile (a run's profile.pb.gz: time summed per stack, with no ranges to place on a timeline); import its run's trace.json instead (go tool pprof reads the profile)", ErrUnknownFormat)
	case t[0] == '{' && summarySchema.Match(t):
		return fmt.Errorf("%w: this is a trainscope run summary (summary.json: the run's figures, for profile-run compare, not its ranges); import its run's trace.json instead (beside it, unless the run was made with -trace off or -trace PATH)", ErrUnknownFormat)
	case bytes.HasPrefix(t, []byte("<!DOCTYPE html>")) && bytes.Contains(t, []byte("<title>trainscope ")):
		return fmt.Errorf("%w: this is a trainscope HTML report (profile-run report --html); import its run's trace.json instead", ErrUnknownFormat)
	case bytes.HasPrefix(t, []byte("# end_us step rank ")):
		return fmt.Errorf("%w: this is a trainscope call log (calls.rank<N>.gz); import its run's trace.json instead", ErrUnknownFormat)
	case bytes.HasPrefix(t, []byte("=== rank ")), bytes.HasPrefix(t, []byte("partial run: ")),
		bytes.HasPrefix(t, []byte("per-step tables and calls cover ")), bytes.HasPrefix(t, []byte("the wrapped command's NCCL operations")):
		return fmt.Errorf("%w: this is a trainscope report; import its run's trace.json instead (profile-run report RUN_DIR prints the report)", ErrUnknownFormat)
	}
	return ErrUnknownFormat
}

// summarySchema finds the schema of the summary.json a trainscope run
// writes beside its trace (exporters/jsonsummary), of any version.
var summarySchema = regexp.MustCompile(`"schema"\s*:\s*"trainscope\.summary/`)

// pprofHead reports whether head begins as a pprof profile does
// (profile.proto, decompressed): field 1, sample_type, holding a
// ValueType whose first field is its type. No text begins with a line
// end, a byte below 0x80, then a backspace.
func pprofHead(head []byte) bool {
	return len(head) >= 3 && head[0] == 0x0a && head[1] < 0x80 && head[2] == 0x08
}

// Detect tells the format from the first bytes of a (decompressed) file.
// A JSON object whose head names trainscope as its producer is
// trainscope's own trace; a trainscope run's summary.json is no format
// (FormatUnknown); any other JSON is read as Kineto's.
func Detect(head []byte) Format {
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	head = bytes.TrimLeft(head, " \t\r\n")
	switch {
	case len(head) > 0 && head[0] == '{' && producerTrainscope.Match(head):
		return FormatTrainscope
	case len(head) > 0 && head[0] == '{' && summarySchema.Match(head):
		return FormatUnknown
	case len(head) > 0 && (head[0] == '{' || head[0] == '['):
		return FormatKineto
	case bytes.HasPrefix(head, []byte(seedReportPrefix)), bytes.HasPrefix(head, []byte(seedLogPrefix)):
		return FormatSeed
	}
	return FormatUnknown
}

// Load reads one file of either format, gzipped or not, detecting the
// format from its content. path names the file in errors and warnings.
func Load(path string, r io.Reader) (*Profile, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) != 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return load(path, br)
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		if compressionFault(err) {
			err = &gzipError{err}
		}
		return nil, &ParseError{Path: path, Offset: 0, Err: err}
	}
	defer zr.Close()
	gz := &gzipBody{r: zr}
	p, err := load(path, bufio.NewReaderSize(gz, 64<<10))
	return p, gz.blame(path, err)
}

// load reads one file's (decompressed) content.
func load(path string, br *bufio.Reader) (*Profile, error) {
	head, err := br.Peek(4096)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, &ParseError{Path: path, Offset: int64(len(head)), Err: err}
	}
	var p *Profile
	switch Detect(head) {
	case FormatSeed:
		p, err = ParseSeed(path, br)
	case FormatKineto:
		p, err = ParseKineto(path, br)
	case FormatTrainscope:
		p, err = ParseTrainscope(path, br)
	default:
		return nil, &ParseError{Path: path, Line: 1, Err: unknownFormat(head)}
	}
	if p != nil {
		p.validUTF8()
	}
	return p, err
}

// gzipBody reads a gzip member's body, counting the bytes it gives and
// keeping the first error of the compression (a file cut short, a bad
// checksum), for blame.
type gzipBody struct {
	r   io.Reader
	n   int64
	err *gzipError
}

func (g *gzipBody) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.n += int64(n)
	if err != nil && compressionFault(err) {
		if g.err == nil {
			g.err = &gzipError{err}
		}
		return n, g.err
	}
	return n, err
}

// blame says what is wrong with the gzipped file that failed to load
// with err. Where the compression failed, that is what is wrong (unless
// the content is no format Load reads at all): the parser met the
// content cut short, as a JSON value ended early or a last line without
// its line end, and the error says where the content stopped. Otherwise
// err stands, its byte offset (of a JSON format) said to count the
// decompressed content, not the file's: a 5000-byte file can fail at
// byte 60000 of what it decompresses to.
func (g *gzipBody) blame(path string, err error) error {
	if err == nil {
		return nil
	}
	if g.err != nil && !errors.Is(err, ErrUnknownFormat) {
		return &ParseError{Path: path, Offset: g.n, Decompressed: true, Err: g.err}
	}
	var pe *ParseError
	if errors.As(err, &pe) && pe.Line == 0 {
		pe.Decompressed = true
	}
	return err
}

// compressionFault tells gzip's own errors from those of the reader under
// it (a file that cannot be read, an import cancelled), which stand as
// they are.
func compressionFault(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, gzip.ErrHeader) || errors.As(err, &corrupt)
}

// gzipError is a gzipped file's compression at fault, not its content:
// the compressed file cut short (a copy interrupted, a file still being
// written), or corrupt.
type gzipError struct{ err error }

func (e *gzipError) Error() string {
	if errors.Is(e.err, io.ErrUnexpectedEOF) {
		return "the compressed file is truncated (gzip: unexpected EOF)"
	}
	return fmt.Sprintf("the compressed file is corrupt (%v)", e.err)
}

func (e *gzipError) Unwrap() error { return e.err }

// validUTF8 makes the records' names valid UTF-8 (a log written in
// Latin-1, say): every exporter needs them so, OTLP and Prometheus
// labels most of all.
func (p *Profile) validUTF8() {
	fix := func(s *string) {
		if !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	for i := range p.Records {
		r := &p.Records[i]
		fix(&r.Name)
		fix(&r.Tag)
		fix(&r.Collective.Op)
		fix(&r.Collective.Group)
		fix(&r.Collective.DType)
	}
	for i := range p.Tables {
		for j := range p.Tables[i].Rows {
			fix(&p.Tables[i].Rows[j].Name)
		}
	}
}

// AssignRanks gives the profiles that do not say their rank the lowest
// ranks no other profile holds, in the order given, and settles a rank
// that several files hold; what it did is said in warnings.
//
// Two files of one rank are combined only when they are of one format
// (one clock) and lie apart, in time and in step labels: windows of one
// run profiled one after another, as torch.profiler's repeating schedule
// writes them. Otherwise they describe the same time twice (the same
// profile copied, or two runs), and combining them would count every
// range and step twice: the later file's records of that rank are left
// out (Profile.LeftOut) and the first file's kept.
func AssignRanks(profiles []*Profile) []string {
	var warnings []string
	holders := map[int][]*Profile{}
	for _, p := range profiles {
		if !p.RankKnown {
			continue
		}
		var drop []int
		for _, r := range p.Ranks() {
			earlier := holders[r]
			if len(earlier) == 0 {
				holders[r] = []*Profile{p}
				continue
			}
			names := make([]string, len(earlier))
			apart := true
			for i, q := range earlier {
				names[i] = q.Path
				apart = apart && separate(q, p, r)
			}
			if apart {
				holders[r] = append(earlier, p)
				warnings = append(warnings, fmt.Sprintf("rank %d is in %s and %s, at different times and steps: combined as one rank's records", r, strings.Join(names, ", "), p.Path))
				continue
			}
			drop = append(drop, r)
			n := rankRecords(p, r)
			warnings = append(warnings, fmt.Sprintf("rank %d is in both %s and %s, over the same time or steps: %s's %s of rank %d %s left out (give one file per rank)",
				r, strings.Join(names, ", "), p.Path, p.Path, plural(n, "range"), r, either(n, "is", "are")))
		}
		if len(drop) > 0 {
			p.Records = slices.DeleteFunc(p.Records, func(rec profiler.Record) bool { return slices.Contains(drop, rec.Rank) })
			p.LeftOut = append(p.LeftOut, drop...)
		}
	}
	next := 0
	for _, p := range profiles {
		if p.RankKnown || len(p.Records) == 0 {
			continue
		}
		for {
			if _, ok := holders[next]; !ok {
				break
			}
			next++
		}
		for i := range p.Records {
			r := &p.Records[i]
			r.Rank = next
			if list, ok := p.groupRanks[r.ID]; ok {
				r.Collective.GroupRank = groupRank(list, r.Collective.GroupSize, next)
			}
		}
		holders[next] = []*Profile{p}
		warnings = append(warnings, fmt.Sprintf("%s does not say its rank (no distributedInfo): imported as rank %d", p.Path, next))
	}
	return warnings
}

// separate reports whether the records of rank r in p and q can be
// combined: one format, so one clock, and no time or step label shared.
func separate(p, q *Profile, r int) bool {
	if p.Format != q.Format {
		return false // each format is moved to start at 0: they overlap
	}
	ps, pe, psteps := rankSpan(p, r)
	qs, qe, qsteps := rankSpan(q, r)
	if ps < qe && qs < pe {
		return false
	}
	for s := range psteps {
		if qsteps[s] {
			return false
		}
	}
	return true
}

// rankSpan is the time rank r's records in p cover, host or device, and
// the step labels they carry.
func rankSpan(p *Profile, r int) (start, end time.Duration, steps map[int32]bool) {
	steps = map[int32]bool{}
	first := true
	for i := range p.Records {
		rec := &p.Records[i]
		if rec.Rank != r {
			continue
		}
		s, e := rec.HostStart, rec.HostEnd
		if rec.HasDevice {
			s, e = min(s, rec.DeviceStart), max(e, rec.DeviceEnd)
		}
		if first || s < start {
			start = s
		}
		if first || e > end {
			end = e
		}
		first = false
		if rec.Step != profiler.None {
			steps[rec.Step] = true
		}
	}
	return start, end, steps
}

func rankRecords(p *Profile, r int) int {
	n := 0
	for i := range p.Records {
		if p.Records[i].Rank == r {
			n++
		}
	}
	return n
}

// Combine puts the records of profiles on one timeline, starting at 0,
// and numbers them uniquely per rank, in the order a profiler delivers
// records: by end time, a range after those it encloses. Files of one
// format share a clock (the wall time they state), so the ranks of one
// run line up; files of different formats are each moved to start at 0.
func Combine(profiles []*Profile) []profiler.Record {
	origin := map[Format]int64{}
	for _, p := range profiles {
		for i := range p.Records {
			r := &p.Records[i]
			start := int64(r.HostStart)
			if r.HasDevice {
				start = min(start, int64(r.DeviceStart))
			}
			if o, ok := origin[p.Format]; !ok || start < o {
				origin[p.Format] = start
			}
		}
	}
	var out []profiler.Record
	total := 0
	for _, p := range profiles {
		total += len(p.Records)
	}
	if total > 0 {
		// Made to measure: the records are most of what an import holds,
		// and grown by append they were copied several times over.
		out = make([]profiler.Record, 0, total)
	}
	next := map[int]uint64{}
	for _, p := range profiles {
		base := map[int]uint64{}
		top := map[int]uint64{}
		for _, r := range p.Records {
			if _, ok := base[r.Rank]; !ok {
				base[r.Rank] = next[r.Rank]
			}
			off := origin[p.Format]
			r.HostStart -= durationOf(off)
			r.HostEnd -= durationOf(off)
			if r.HasDevice {
				r.DeviceStart -= durationOf(off)
				r.DeviceEnd -= durationOf(off)
			}
			r.ID += base[r.Rank]
			if r.Parent != 0 {
				r.Parent += base[r.Rank]
			}
			top[r.Rank] = max(top[r.Rank], r.ID)
			out = append(out, r)
		}
		for rank, id := range top {
			next[rank] = id
		}
	}
	slices.SortStableFunc(out, func(a, b profiler.Record) int {
		if c := cmp.Compare(a.HostEnd, b.HostEnd); c != 0 {
			return c
		}
		return cmp.Compare(b.Depth, a.Depth)
	})
	return out
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
