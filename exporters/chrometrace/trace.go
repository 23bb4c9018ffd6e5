package chrometrace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// Option configures Write and WriteFile.
type Option interface{ apply(*config) }

type config struct {
	epoch time.Time
	other [][2]string
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithEpoch records the wall-clock time that event times count from
// (profiler.Profiler.Epoch) in the trace's otherData, as "epoch".
func WithEpoch(t time.Time) Option { return optionFunc(func(c *config) { c.epoch = t }) }

// WithOtherData adds key: value to the trace's otherData, which trace
// viewers show as the trace's metadata (Perfetto: "Info and stats"); a
// partial run says so there, for one. Keys "producer" and "epoch" are the
// writer's own.
func WithOtherData(key, value string) Option {
	return optionFunc(func(c *config) { c.other = append(c.other, [2]string{key, value}) })
}

// Stats says what a trace holds.
type Stats struct {
	Events    int // complete ("X") events: one per record with a host range on a host track (a traced kernel has none), one per device-timed record on a device track
	Flows     int // flow arrows: one per matched Send/Recv pair, n−1 per collective of n participants
	Unmatched int // Send, Recv and collective ranges of a group of several ranks that have no partner among the records
}

// ErrNoRecords is returned when there is nothing to draw.
var ErrNoRecords = errors.New("chrometrace: no records")

// Write writes the trace of records to w and says what it holds. records
// is not modified.
func Write(w io.Writer, records []profiler.Record, opts ...Option) (Stats, error) {
	return write(w, records, opts)
}

// WriteFile writes the trace of records to path (created or truncated).
func WriteFile(path string, records []profiler.Record, opts ...Option) (Stats, error) {
	f, err := os.Create(path)
	if err != nil {
		return Stats{}, fmt.Errorf("chrometrace: %w", err)
	}
	st, err := write(f, records, opts)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("chrometrace: %w", cerr)
	}
	if err != nil {
		return Stats{}, err
	}
	return st, nil
}

func write(w io.Writer, records []profiler.Record, opts []Option) (Stats, error) {
	if len(records) == 0 {
		return Stats{}, ErrNoRecords
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	tr := layout(records)
	st := Stats{Events: len(tr.events)}
	st.Flows, st.Unmatched = tr.link(records)

	bw := bufio.NewWriterSize(w, 1<<16)
	jw := &jsonWriter{w: bw, buf: make([]byte, 0, 4096)}
	jw.header(cfg)
	for i := range tr.tracks {
		jw.metadata(&tr.tracks[i])
	}
	for i := range tr.events {
		jw.event(&tr.events[i], &records[tr.events[i].rec], &tr)
	}
	jw.footer()
	if jw.err == nil {
		jw.err = bw.Flush()
	}
	if jw.err != nil {
		return Stats{}, fmt.Errorf("chrometrace: %w", jw.err)
	}
	return st, nil
}
