package analysis

import "math"

// Option configures Analyze and NewSink.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	align      bool
	oneClock   bool
	domains    map[int]int
	applied    *Offsets
	minSamples int
	// chunks and microbatches: WithSchedule.
	chunks, microbatches int
	delay                int
	maxRecords           int
	maxSet               bool // WithMaxRecords was given
	maxOpen              int
	keep                 int
	onStep               func(*Step)
}

func newConfig(opts []Option) config {
	c := config{delay: 2, maxRecords: 1 << 20, maxOpen: 16, keep: 16}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.oneClock {
		c.align, c.applied = false, nil
	}
	return c
}

// WithClockAlignment estimates the ranks' clock offsets from their
// collectives (EstimateOffsets) and applies them before analysing: for
// records from several processes or hosts. Analyze estimates once from
// every record; a Sink estimates per step from that step's collectives.
// Step.Clock holds what was applied.
func WithClockAlignment() Option { return optionFunc(func(c *config) { c.align = true }) }

// WithOneClock says every rank was recorded on one clock — the processes
// of a wrapped command, all on the host of the collector they report to
// (CLOCK_MONOTONIC, their GPU times each converted to it), or records put
// on one clock before (a trace an import wrote): nothing is aligned, and the summaries say so (Summary.OneClock). Departures from
// a collective then differ for what the ranks did, not for their clocks,
// and aligning on them would move a rank by that difference: on one
// H200 shared by four processes, one all-reduce put two ranks 10.5 ms off.
// It overrides WithClockAlignment and WithAppliedOffsets.
func WithOneClock() Option { return optionFunc(func(c *config) { c.oneClock = true }) }

// WithClockDomains says which ranks share a clock: ranks mapped to the
// same id (≥ 0) were recorded on one clock (one process, or one host's
// monotonic clock) and are given one offset, so that a clock is aligned
// through whichever of its ranks shares collectives with the others —
// the ranks of one pipeline stage on one host, say, whose data-parallel
// peers are on another. Ranks not in the map, or mapped to a negative id,
// are each on a clock of their own. It matters with WithClockAlignment and
// for EstimateOffsets.
func WithClockDomains(domains map[int]int) Option {
	return optionFunc(func(c *config) { c.domains = domains })
}

// WithSchedule gives the pipeline's virtual chunks per stage and
// microbatches per step where the work carries stages but neither (a
// wrapped job's kernels), so that a step has the ideal bubble
// (p−1)/(v·m+p−1) beside its measured one; Pipeline.Given says so.
func WithSchedule(chunks, microbatches int) Option {
	return optionFunc(func(c *config) { c.chunks, c.microbatches = chunks, microbatches })
}

// WithMinClockSamples has EstimateOffsets align a clock only through at
// least n collectives (or sends matched with their receives) shared with
// the clocks already aligned; one with fewer, and any clock that could
// only join through it, is left unaligned (a few departures say little
// about a clock). profile-run import uses MinClockSamples. With
// WithClockAlignment it holds for Analyze's estimate and for each of a
// Sink's steps, which, short of n, takes the latest step's offsets that
// aligned every rank (Offsets.Carried) where there is one.
func WithMinClockSamples(n int) Option { return optionFunc(func(c *config) { c.minSamples = n }) }

// WithAppliedOffsets says the records were put on one clock before they
// reach the Sink or CallSink: EstimateOffsets over all of them, then
// Offsets.Apply — what an offline import does, where one estimate over
// the whole run is steadier than one per step. The sinks then estimate
// nothing and report o as the alignment (Step.Clock, Summary.Offsets).
// It overrides WithClockAlignment.
func WithAppliedOffsets(o Offsets) Option {
	return optionFunc(func(c *config) { c.applied = &o })
}

// WithStepDelay makes a Sink analyse a step once every rank it has seen
// has delivered the step range of a step n later (default 2), so that
// device ranges resolved after their step range are in. Flush analyses
// what is left. A delay beyond 2^31 steps (a step number's range) waits
// for Flush.
func WithStepDelay(n int) Option {
	return optionFunc(func(c *config) { c.delay = min(max(n, 0), math.MaxInt32) })
}

// WithMaxRecords caps the records a Sink holds for steps not yet
// analysed (default 1<<20, about 120 bytes each); beyond it records are
// dropped and counted, and their step says so.
//
// A CallSink holds far fewer (default 1<<16): only the collectives some
// rank has not recorded yet.
func WithMaxRecords(n int) Option {
	return optionFunc(func(c *config) { c.maxRecords, c.maxSet = max(n, 1), true })
}

// WithMaxOpenSteps caps the steps a Sink holds (default 16); beyond it the
// oldest is analysed with what it has, and says so.
func WithMaxOpenSteps(n int) Option { return optionFunc(func(c *config) { c.maxOpen = max(n, 1) }) }

// WithKeepSteps sets how many of the latest analysed steps a Sink keeps
// whole for Steps (default 16); the run's totals (Summary) cover every
// step whatever it is.
func WithKeepSteps(n int) Option { return optionFunc(func(c *config) { c.keep = max(n, 0) }) }

// WithStepFunc makes a Sink call f with every step it analyses, in step
// order, from the goroutine that delivered the records (the profiler's
// collector) with the sink's lock held: f must return quickly, must not
// call back into the sink, and must copy what it keeps. An exporter that
// builds per-step figures (the pprof profile's step time) takes steps so.
func WithStepFunc(f func(*Step)) Option { return optionFunc(func(c *config) { c.onStep = f }) }
