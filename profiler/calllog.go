package profiler

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
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
// write error stops the log (counted like the cap) and is returned by
// Close, and each rank's file says in Files whether an error cut it short.
// A file is created only where none exists: an existing one is never
// replaced (the rank's log is then not written, and Files says why).
// Training is never slowed by waiting on it beyond the write itself.
type CallLog struct {
	prefix string
	limit  int64

	mu    sync.Mutex
	ranks map[int]*rankLog
	err   error // the first error, returned by Close
	// stopped is the first write error: it stops every rank's log (the
	// disk is full, say).
	stopped error
	closed  bool
	line    []byte
}

type rankLog struct {
	path     string
	err      error    // the first error that cut this file short
	f        *os.File // nil when it could not be created
	zw       *gzip.Writer
	bw       *bufio.Writer
	written  int64 // uncompressed bytes
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
	return &CallLog{prefix: prefix, limit: limit, ranks: map[int]*rankLog{}}
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
		if rl.f == nil || c.stopped != nil {
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
			c.stopped = fmt.Errorf("profiler: call log of rank %d: %w", r.Rank, err)
			rl.err = c.stopped
			if c.err == nil {
				c.err = c.stopped
			}
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
	path := c.Path(rank)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		rl := &rankLog{path: path, err: fmt.Errorf("profiler: call log of rank %d: %w", rank, err)}
		if c.err == nil {
			c.err = rl.err
		}
		c.ranks[rank] = rl
		return rl
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	rl := &rankLog{path: path, f: f, zw: zw, bw: bufio.NewWriterSize(zw, 64<<10)}
	n, _ := io.WriteString(rl.bw, CallLogHeader)
	rl.written = int64(n)
	c.ranks[rank] = rl
	return rl
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
	if r.HasDevice {
		b = strconv.AppendFloat(b, us(r.DeviceDuration()), 'f', 3, 64)
	} else {
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
	for rank, rl := range c.ranks {
		if rl.f == nil {
			continue
		}
		err := errors.Join(rl.bw.Flush(), rl.zw.Close(), rl.f.Close())
		if err != nil && rl.err == nil {
			rl.err = fmt.Errorf("profiler: call log of rank %d: %w", rank, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
		if rl.f != nil { // never a file it did not create
			_ = os.Remove(rl.path)
		}
	}
}
