package otel

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/trainscope/trainscope/profiler"
)

// CycleNumbers numbers the cycles of a job that marks no steps: a wrapped
// command whose collectives repeat every step (cycle.Sink implements it).
// Number returns the cycle a collective or point-to-point record belongs
// to, the same on every rank for the same operation, or false while none
// is known.
type CycleNumbers interface {
	Number(r *profiler.Record) (int64, bool)
}

// KeyCycle is the cycle of a job that marks no steps (Config.Cycles), on
// the spans of its trace.
const KeyCycle = attribute.Key("training.cycle")

// CycleSpanName names the span of one rank's cycle: the root of that
// rank's spans in the cycle's trace.
const CycleSpanName = "cycle"

// A cycle k travels through the exporter as the step label
// cycleBase − k, below profiler.None: its trace is a trace of its own,
// sampled like a step's, and never a step's.
const cycleBase = profiler.None - 1

func cycleStep(k int64) (int32, bool) {
	if k < 0 || k > int64(cycleBase)-math.MinInt32 {
		return 0, false
	}
	return int32(int64(cycleBase) - k), true
}

// cycleOf returns the cycle a step label encodes (cycleStep), if it
// encodes one.
func cycleOf(step int32) (int64, bool) {
	if step > cycleBase {
		return 0, false
	}
	return int64(cycleBase) - int64(step), true
}

// cycleMarks are a rank's latest cycles: where each began (its first
// operation's host start) and where its records ended, oldest first.
type cycleMarks struct {
	k     []int64
	start []time.Duration
	end   []time.Duration
}

// marksKept bounds the cycles a rank remembers for placing records that
// are not collectives, and for their spans' ends.
const marksKept = 8

// numberCycles labels the records of a job that marks no steps with their
// cycle (Config.Cycles): a collective or point-to-point record by the
// cycle its communicator's sequence number falls in, any other record
// without a step by its rank's latest cycle that had begun when it
// started. Records before the first cycle found stay in the run-level
// trace. Once a record with a step arrives, the job marks steps, and
// nothing more is labelled. It returns batch, or a relabelled copy of it
// (the batch itself is the profiler's and other sinks'), and queues the
// span of each rank's cycle that ended.
func (e *Exporter) numberCycles(batch []profiler.Record) []profiler.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stepsSeen || e.finished {
		return batch
	}
	defer e.flushCyclesLocked(false)
	var out []profiler.Record
	for i := range batch {
		r := &batch[i]
		if r.Step != profiler.None {
			e.stepsSeen = true
			return batch
		}
		k, ok := e.cycleOfRecord(r)
		if !ok {
			continue
		}
		step, ok := cycleStep(k)
		if !ok {
			continue
		}
		if out == nil {
			out = append(e.cycleBuf[:0], batch...)
		}
		out[i].Step = step
	}
	if out == nil {
		return batch
	}
	e.cycleBuf = out
	return out
}

// cycleOfRecord is the cycle of one record without a step; it keeps its
// rank's marks. Under e.mu.
func (e *Exporter) cycleOfRecord(r *profiler.Record) (int64, bool) {
	m := e.marks[r.Rank]
	if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
		k, ok := e.cfg.Cycles.Number(r)
		if !ok || k < 0 {
			return 0, false
		}
		if m == nil {
			m = &cycleMarks{}
			if e.marks == nil {
				e.marks = map[int]*cycleMarks{}
			}
			e.marks[r.Rank] = m
		}
		e.mark(r.Rank, m, k, r.HostStart, r.HostEnd)
		return k, true
	}
	if m == nil {
		return 0, false
	}
	for i := len(m.k) - 1; i >= 0; i-- {
		if m.start[i] <= r.HostStart {
			m.end[i] = max(m.end[i], r.HostEnd)
			return m.k[i], true
		}
	}
	return 0, false
}

// mark notes an operation of cycle k on rank from start to end. A cycle
// later than any before begins a new mark; the cycle before it, if it is
// the one just before, ends there, and its span is queued. Under e.mu.
func (e *Exporter) mark(rank int, m *cycleMarks, k int64, start, end time.Duration) {
	n := len(m.k)
	if n == 0 || k > m.k[n-1] {
		if n > 0 {
			last := m.end[n-1]
			if k == m.k[n-1]+1 {
				last = start
			}
			e.queueCycle(rank, m.k[n-1], m.start[n-1], last)
		}
		if n == marksKept {
			copy(m.k, m.k[1:])
			copy(m.start, m.start[1:])
			copy(m.end, m.end[1:])
			m.k, m.start, m.end = m.k[:n-1], m.start[:n-1], m.end[:n-1]
		}
		m.k = append(m.k, k)
		m.start = append(m.start, start)
		m.end = append(m.end, end)
		return
	}
	for i := n - 1; i >= 0; i-- {
		if m.k[i] == k {
			m.start[i] = min(m.start[i], start)
			m.end[i] = max(m.end[i], end)
			return
		}
	}
}

// queueCycle gathers the span of cycle k on rank for flushCyclesLocked.
// Under e.mu.
func (e *Exporter) queueCycle(rank int, k int64, start, end time.Duration) {
	step, ok := cycleStep(k)
	if !ok {
		return
	}
	e.cycleSpans = append(e.cycleSpans, analysisSpan{
		rank: rank, step: step, cycle: true, start: start, end: max(end, start),
		attrs: []attribute.KeyValue{KeyRank.Int(rank), KeyCycle.Int64(k)},
	})
}

// flushCyclesLocked queues the cycle spans gathered by numberCycles, as
// sampled as their cycles (under the tail policy, held with their cycle
// until its decision); with last, also the span of every rank's
// latest cycle, which no later cycle will end. Under e.mu. It reports
// whether it queued any.
func (e *Exporter) flushCyclesLocked(last bool) bool {
	if last {
		for rank, m := range e.marks {
			if n := len(m.k); n > 0 {
				e.queueCycle(rank, m.k[n-1], m.start[n-1], m.end[n-1])
				m.k, m.start, m.end = m.k[:0], m.start[:0], m.end[:0]
			}
		}
	}
	if len(e.cycleSpans) == 0 {
		return false
	}
	q := e.cycleSpans
	e.cycleSpans = nil
	e.stats.Spans += uint64(len(q))
	kept := q[:0]
	for _, a := range q {
		switch {
		case e.tail != nil:
			if e.tailCycleLocked(a) {
				kept = append(kept, a)
			}
		case e.sampler.sampled(e.build.ids.traceID(a.step)):
			kept = append(kept, a)
		default:
			e.stats.Unsampled++
		}
	}
	return e.enqueueStepsLocked(kept)
}
