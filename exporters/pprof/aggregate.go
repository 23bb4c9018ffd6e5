package pprof

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/google/pprof/profile"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// Aggregate keeps the profile of a whole run as records arrive, in memory
// that does not grow with the run. It is a profiler.Sink: register it
// with Profiler.AddSink before the run and it sees every record, also
// those beyond the profiler's record bound.
//
// Its profile is Build's over the same records with the samples that
// differ only in their step label summed into one, without that label:
// a per-step label would make the samples grow with the steps. Stacks,
// values and the other labels (rank, stage, chunk, phase, tag) are
// Build's, so every total Write lists holds for it too.
//
// A record's stack is the names of its ancestors, which arrive after it
// (a range ends before its parent). Per rank the aggregate therefore
// keeps:
//
//   - the records still waiting for an ancestor, to place them when it
//     arrives — in a profiler's delivery order, at most the records of one
//     top-level range (one step) and of device ranges not yet resolved;
//   - the placed records of the latest WithWindow top-level ranges
//     (default 4), so that a device range resolved after its top-level
//     ancestor still finds its parent.
//
// Both together are bounded by WithMaxNodes (default 65536 records per
// rank, about 120 bytes each); the samples are bounded by the number of
// distinct stacks and label sets. A record whose parent never comes
// within the window (the parent was dropped, or resolved later than the
// window, or the bound forced it out) is placed at the root of a stack of
// its own, as Build places a record whose parent is absent, and counted
// in AggregateStats.Orphans; nothing panics and nothing grows without
// bound.
//
// Consume and the other methods may be called from different goroutines.
type Aggregate struct {
	mu  sync.Mutex
	cfg aggregateConfig
	st  *aggState
}

type aggregateConfig struct {
	window   uint64
	maxNodes int
}

// AggregateOption configures NewAggregate.
type AggregateOption interface{ applyAggregate(*aggregateConfig) }

type aggregateOptionFunc func(*aggregateConfig)

func (f aggregateOptionFunc) applyAggregate(c *aggregateConfig) { f(c) }

// WithWindow keeps the placed records of the latest n top-level ranges
// of each rank (default 4, at least 1), for device ranges that arrive
// after their top-level ancestor, and places a record at the root of its
// own stack once more than n top-level ranges have arrived after it
// without its parent.
func WithWindow(n int) AggregateOption {
	return aggregateOptionFunc(func(c *aggregateConfig) { c.window = uint64(max(n, 1)) })
}

// WithMaxNodes bounds the records an Aggregate keeps per rank (default
// 65536, at least 16): the oldest placed ones go first, then the oldest
// waiting ones are placed at the root of their own stacks.
func WithMaxNodes(n int) AggregateOption {
	return aggregateOptionFunc(func(c *aggregateConfig) { c.maxNodes = max(n, 16) })
}

// NewAggregate returns an empty aggregate.
func NewAggregate(opts ...AggregateOption) *Aggregate {
	cfg := aggregateConfig{window: 4, maxNodes: 1 << 16}
	for _, o := range opts {
		if o != nil {
			o.applyAggregate(&cfg)
		}
	}
	return &Aggregate{cfg: cfg, st: newAggState()}
}

// AggregateStats says what an Aggregate holds.
type AggregateStats struct {
	Records uint64 // records consumed
	Samples int    // distinct stacks and label sets so far
	Waiting int    // records waiting for an ancestor
	Kept    int    // placed records kept for descendants that may still arrive
	// Orphans counts records placed at the root of their own stack
	// because their parent did not arrive in time (see Aggregate).
	Orphans uint64
}

// Stats returns what the aggregate holds now.
func (a *Aggregate) Stats() AggregateStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.st
	out := AggregateStats{Records: s.records, Samples: len(s.samples), Orphans: s.orphans}
	for _, rt := range s.ranks {
		out.Waiting += rt.waiting
		out.Kept += rt.held() - rt.waiting
	}
	return out
}

// Consume adds a batch of records. It implements profiler.Sink and keeps
// nothing of the batch but the few fields a record waiting for its
// ancestors needs.
func (a *Aggregate) Consume(batch []profiler.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range batch {
		a.st.add(&batch[i], a.cfg)
	}
}

// AddStep adds an analysed step's wall-time split as step_time samples
// (see StepTime): feed it every step, from analysis.WithStepFunc on the
// analysis sink of the same run. Steps add to the samples without a step
// label, as records do. A nil step adds nothing.
func (a *Aggregate) AddStep(st *analysis.Step) {
	if st == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.addStep(st)
}

// Profile returns the profile of every record consumed so far. Records
// still waiting for an ancestor are placed at the root of their own
// stacks in the profile returned, as Build places a record whose parent
// is absent; the aggregate itself keeps waiting for their ancestors.
func (a *Aggregate) Profile(opts ...Option) (*profile.Profile, error) {
	a.mu.Lock()
	st := a.st.clone()
	a.mu.Unlock()
	if st.records == 0 {
		return nil, ErrNoRecords
	}
	// In rank order: placing makes stacks and samples, whose order is
	// the file's.
	for _, r := range slices.Sorted(maps.Keys(st.ranks)) {
		rt := st.ranks[r]
		for rt.waiting > 0 {
			st.giveUpOldest(rt)
		}
	}
	return st.profile(newConfig(opts)), nil
}

// Write writes the gzip-compressed profile to w, after checking it with
// CheckValid, and says how many samples it holds.
func (a *Aggregate) Write(w io.Writer, opts ...Option) (Stats, error) {
	if w == nil {
		return Stats{}, errors.New("pprof: Write: nil writer")
	}
	p, err := a.Profile(opts...)
	if err != nil {
		return Stats{}, err
	}
	if err := p.CheckValid(); err != nil {
		return Stats{}, fmt.Errorf("pprof: invalid profile: %w", err)
	}
	if err := p.Write(w); err != nil {
		return Stats{}, fmt.Errorf("pprof: %w", err)
	}
	var ranges int64
	for _, s := range p.Sample {
		ranges += s.Value[2]
	}
	return Stats{Samples: len(p.Sample), Ranges: int(ranges)}, nil
}

// WriteFile writes the profile to path (created or truncated).
func (a *Aggregate) WriteFile(path string, opts ...Option) (Stats, error) {
	f, err := os.Create(path)
	if err != nil {
		return Stats{}, fmt.Errorf("pprof: %w", err)
	}
	st, err := a.Write(f, opts...)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pprof: %w", cerr)
	}
	if err != nil {
		return Stats{}, err
	}
	return st, nil
}
