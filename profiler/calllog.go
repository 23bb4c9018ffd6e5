package profiler

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// CallLog is a Sink that writes the per-call log as records arrive: one
// line per range, in the order the collector finishes them, to one gzip
// file per rank (<prefix>.rank<N>.gz), buffered. Each rank's log is capped
// at a number of uncompressed bytes; lines beyond it are counted, not
// written, so a run of any length leaves files of bounded size. The first
// write error stops the log: lines that come after it are counted like
// the cap, those taken before it are still written where the disk takes
// them, the error is returned by Close, and each rank's file says in
// Files whether an error cut it short.
// A file is created only where none exists: an existing one is never
// replaced (the rank's log is then not written, and Files says why).
// Training is never slowed by waiting on it beyond the write itself.
//
// At most MaxOpenCallLogs files are open at once (each holds a file
// descriptor and about a megabyte of compressor state): past that, the
// least recently written file is closed, ending its gzip member, and
// reopened for appending, as a new member, when its rank's lines are
// compressed again. Each rank's lines wait in a buffer of its own
// (CallLogBuffer bytes) until it is full, so a batch of many ranks'
// records, in any order, reopens a file only once a buffer's worth of
// its lines has come. Concatenated gzip members are one gzip file to
// zcat, Python's gzip module and compress/gzip alike.
type CallLog struct {
	prefix  string
	limit   int64
	maxOpen int
	bufSize int // each rank's buffer: CallLogBuffer

	mu    sync.Mutex
	ranks map[int]*rankLog
	open  []*rankLog     // the ranks whose file is open
	clock uint64         // counts writes, for the least recently written
	spare []*gzip.Writer // the compressors of closed files, to reuse
	err   error          // the first error, returned by Close
	// stopped is the first write error: it stops every rank's log (the
	// disk is full, say).
	stopped error
	closed  bool
	line    []byte
}

// MaxOpenCallLogs is how many ranks' call log files a CallLog keeps open
// at once.
const MaxOpenCallLogs = 64

// CallLogBuffer is the size of each rank's buffer of lines not yet
// compressed: 16 MB for a thousand ranks.
const CallLogBuffer = 16 << 10

type rankLog struct {
	rank     int
	path     string
	err      error // the first error that cut this file short
	created  bool  // the file was made (false: it could not be)
	f        *os.File
	zw       *gzip.Writer  // with f, set while the file is open
	zwrote   bool          // zw has had bytes since it was attached
	bw       *bufio.Writer // lines not yet compressed, into rankFile
	used     uint64        // CallLog.clock at its last write to the file
	written  int64         // uncompressed bytes
	lines    uint64
	skipped  uint64
	minStep  int
	maxStep  int
	anySteps bool
}

// CallLogHeader is the first line of every call log.
const CallLogHeader = "# end_us step rank depth kind name device host_us device_us peak_mb (one line per range, in the order ranges finished)\n"

// NewCallLog returns a call log writing <prefix>.rank<N>.gz files, each
// capped at limit uncompressed bytes (limit < 1: no cap).
func NewCallLog(prefix string, limit int64) *CallLog {
	return &CallLog{prefix: prefix, limit: limit, maxOpen: MaxOpenCallLogs, bufSize: CallLogBuffer, ranks: map[int]*rankLog{}}
}

// Consume implements Sink.
func (c *CallLog) Consume(batch []Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for i := range batch {
		r := &batch[i]
		rl := c.rank(r.Rank)
		if !rl.created || c.stopped != nil {
			// Not created, or the log stopped at a write error.
			if rl.err == nil {
				rl.err = c.stopped
			}
			rl.skipped++
			continue
		}
		c.line = appendCall(c.line[:0], r)
		if c.limit > 0 && rl.written+int64(len(c.line)) > c.limit {
			rl.skipped++
			continue
		}
		if _, err := rl.bw.Write(c.line); err != nil {
			if c.stopped == nil {
				c.stop(fmt.Errorf("profiler: call log of rank %d: %w", r.Rank, err))
			}
			rl.err = c.stopped
			rl.skipped++
			continue
		}
		rl.written += int64(len(c.line))
		rl.lines++
		if r.Step != None {
			s := int(r.Step)
			if !rl.anySteps {
				rl.minStep, rl.maxStep, rl.anySteps = s, s, true
			}
			rl.minStep, rl.maxStep = min(rl.minStep, s), max(rl.maxStep, s)
		}
	}
}

// rank opens rank's file on first use; its f is nil once creating it
// failed.
func (c *CallLog) rank(rank int) *rankLog {
	if rl, ok := c.ranks[rank]; ok {
		return rl
	}
	rl := &rankLog{path: c.Path(rank), rank: rank}
	c.ranks[rank] = rl
	c.makeRoom()
	f, err := os.OpenFile(rl.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		rl.err = fmt.Errorf("profiler: call log of rank %d: %w", rank, err)
		if c.err == nil {
			c.err = rl.err
		}
		return rl
	}
	rl.created = true
	c.attach(rl, f)
	rl.bw = bufio.NewWriterSize(rankFile{c, rl}, c.bufSize)
	n, _ := io.WriteString(rl.bw, CallLogHeader)
	rl.written = int64(n)
	return rl
}

// rankFile is where a rank's buffered lines go when its buffer fills
// or is flushed: its compressor, on its file opened again if makeRoom
// closed it.
type rankFile struct {
	c  *CallLog
	rl *rankLog
}

func (w rankFile) Write(p []byte) (int, error) {
	if err := w.c.reopen(w.rl); err != nil {
		return 0, err
	}
	w.rl.zwrote = true
	return w.rl.zw.Write(p)
}

// reopen opens rl's file again for appending, a new gzip member, when
// makeRoom closed it, and marks it as the most recently written.
func (c *CallLog) reopen(rl *rankLog) error {
	c.clock++
	rl.used = c.clock
	if rl.zw != nil {
		return nil
	}
	c.makeRoom()
	f, err := os.OpenFile(rl.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	c.attach(rl, f)
	return nil
}

// attach gives rl, whose file f has just been opened, a compressor
// (reused from a closed file where there is one).
func (c *CallLog) attach(rl *rankLog, f *os.File) {
	rl.f, rl.zwrote = f, false
	if n := len(c.spare); n > 0 {
		rl.zw = c.spare[n-1]
		c.spare = c.spare[:n-1]
		rl.zw.Reset(f)
	} else {
		rl.zw, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
	}
	c.clock++
	rl.used = c.clock
	c.open = append(c.open, rl)
}

// makeRoom closes the least recently written open file when maxOpen are
// open. A file that fails to close is that rank's loss (its log is cut
// short) and, the disk failing, stops the log: later lines are counted,
// not written. The room is made either way.
func (c *CallLog) makeRoom() {
	if len(c.open) < c.maxOpen || len(c.open) == 0 {
		return
	}
	oldest := 0
	for i, rl := range c.open {
		if rl.used < c.open[oldest].used {
			oldest = i
		}
	}
	rl := c.open[oldest]
	c.open = slices.Delete(c.open, oldest, oldest+1)
	if err := c.detach(rl); err != nil {
		err = fmt.Errorf("profiler: call log of rank %d: %w", rl.rank, err)
		if rl.err == nil {
			rl.err = err
		}
		c.stop(err)
	}
}

// stop records err as the write error that stops every rank's log, unless
// an earlier one has.
func (c *CallLog) stop(err error) {
	if c.stopped == nil {
		c.stopped = err
	}
	if c.err == nil {
		c.err = err
	}
}

// detach ends rl's gzip member and closes its file, keeping the
// compressor for reuse; lines still in rl's buffer stay there.
func (c *CallLog) detach(rl *rankLog) error {
	var err error
	if rl.zwrote { // else nothing was compressed: no member to end
		err = rl.zw.Close()
	}
	err = errors.Join(err, rl.f.Close())
	c.spare = append(c.spare, rl.zw)
	rl.f, rl.zw = nil, nil
	return err
}

// Path is the file of rank's log.
func (c *CallLog) Path(rank int) string {
	return c.prefix + ".rank" + strconv.Itoa(rank) + ".gz"
}

// appendCall formats one line of the log.
func appendCall(b []byte, r *Record) []byte {
	b = strconv.AppendFloat(b, us(r.HostEnd), 'f', 3, 64)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Step), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Rank), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Depth), 10)
	b = append(b, ' ')
	b = append(b, r.Kind.String()...)
	b = append(b, ' ')
	if strings.IndexFunc(r.Name, unicode.IsControl) < 0 {
		b = append(b, r.Name...)
	} else {
		b = strconv.AppendQuote(b, r.Name) // a line break would split the call's line
	}
	b = append(b, ' ')
	b = append(b, r.Device.String()...)
	b = append(b, ' ')
	b = strconv.AppendFloat(b, us(r.HostDuration()), 'f', 3, 64)
	b = append(b, ' ')
	switch {
	case r.HasDevice:
		b = strconv.AppendFloat(b, us(r.DeviceDuration()), 'f', 3, 64)
	case r.DeviceUnfinished:
		b = append(b, unfinished...)
	default:
		b = append(b, '-')
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, float64(r.PeakMemory)/mib, 'f', 2, 64)
	return append(b, '\n')
}

// CallLogFile says what one rank's log holds.
type CallLogFile struct {
	Rank    int
	Path    string
	Lines   uint64 // calls written
	Skipped uint64 // calls beyond the size cap (or after a write error)
	Bytes   int64  // uncompressed bytes written (0: the file was not created)
	// Err, when set, is the error that cut the file short (or kept it
	// from being created): Lines and Bytes then count what was handed to
	// it, not what it holds.
	Err error
	// FirstStep and LastStep bound the step labels of the calls written;
	// HasSteps is false when none carried one.
	FirstStep, LastStep int
	HasSteps            bool
}

// Files returns what each rank's log holds, ranks in order.
func (c *CallLog) Files() []CallLogFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []CallLogFile
	for rank, rl := range c.ranks {
		out = append(out, CallLogFile{Rank: rank, Path: rl.path, Lines: rl.lines, Skipped: rl.skipped, Bytes: rl.written,
			FirstStep: rl.minStep, LastStep: rl.maxStep, HasSteps: rl.anySteps, Err: rl.err})
	}
	slices.SortFunc(out, func(a, b CallLogFile) int { return a.Rank - b.Rank })
	return out
}

// Close flushes and closes every file; records consumed afterwards are
// ignored. It returns the first error the log met. Call it after the
// profiler's last delivery (Flush, or Close).
func (c *CallLog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.err
	}
	c.closed = true
	errs := []error{c.err}
	// Ranks in order, so the error reads the same from run to run.
	for _, rank := range slices.Sorted(maps.Keys(c.ranks)) {
		rl := c.ranks[rank]
		if rl.bw == nil {
			continue // not created
		}
		// Lines taken before a write error stopped the log are written
		// too: a log cut short keeps what came before the error.
		err := rl.bw.Flush()
		if i := slices.Index(c.open, rl); i >= 0 {
			// Out of the open files first: a later rank's flush may
			// make room.
			c.open = slices.Delete(c.open, i, i+1)
			err = errors.Join(err, c.detach(rl))
		}
		if err != nil {
			err = fmt.Errorf("profiler: call log of rank %d: %w", rank, err)
			if rl.err == nil {
				rl.err = err
			}
			if c.stopped == nil || len(errs) < 8 {
				// After a stop (a full disk) every rank may fail alike:
				// the first few say it, each file keeps its own.
				errs = append(errs, err)
			}
		}
	}
	c.open, c.spare = nil, nil
	// Kept, so that a later Close (Shutdown, then Close) says so too.
	c.err = errors.Join(errs...)
	return c.err
}

// Shutdown closes the log (SinkShutdowner): a profiler it was added to
// closes it after its last delivery.
func (c *CallLog) Shutdown(context.Context) error { return c.Close() }

// Remove closes the log and removes its files (for a run that wrote
// nothing worth keeping).
func (c *CallLog) Remove() {
	_ = c.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rl := range c.ranks {
		if rl.created { // never a file it did not create
			_ = os.Remove(rl.path)
		}
	}
}
