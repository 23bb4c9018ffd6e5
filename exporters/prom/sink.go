package prom

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// StepRange is the name of the top-level range that marks a training step:
// its host time is the step time, and its busy and idle times are
// accounted by profiler.StepAccountant.
const StepRange = profiler.StepName

// rangeKey identifies one range series. It holds the record's fields
// rather than label strings, so a record finds its series without
// formatting anything.
type rangeKey struct {
	dev          runtime.Device
	name         string
	rank         int32
	stage, chunk int16
	kind         profiler.Kind
	phase        profiler.Phase
}

type rangeSeries struct {
	host, device prometheus.Observer // device is made on the first device time
	records      prometheus.Counter
	labels       []string
}

type collKey struct {
	dev       runtime.Device
	op, group string
	rank      int32
	size      int8 // log2 of the message size bucket; -1 for 0 bytes; noSize without WithDetail
}

// noSize is collKey.size where series carry no size label.
const noSize = -2

type collSeries struct {
	bytes, busBytes     prometheus.Counter
	seconds, alg, busBW prometheus.Observer
}

type stepKey struct {
	dev   runtime.Device
	rank  int32
	stage int16
}

// stepSeries are a rank's per-stage step series, each made when first
// used: a stage that only a late record names (a kernel without a stage
// label) gets its late count, not an empty step histogram and busy and
// idle counters stuck at 0 beside the stage's real ones.
type stepSeries struct {
	labels           []string
	step             prometheus.Observer
	busy, idle, late prometheus.Counter
}

type deviceLabels struct{ gpu, uuid string }

// Consume updates the metrics from a batch of finished records. It
// implements profiler.Sink: it keeps nothing of the batch, allocates only
// when a record opens a new series, and waits for nothing but a scrape
// that is registering the same new series.
func (e *Exporter) Consume(batch []profiler.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		rs := e.rangeSeries(r)
		rs.records.Inc()
		rs.host.Observe(seconds(r.HostDuration()))
		if r.HasDevice {
			if rs.device == nil {
				rs.device = e.m.rangeDevice.WithLabelValues(rs.labels...)
			}
			rs.device.Observe(seconds(r.DeviceDuration()))
		}
		if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
			e.collective(r)
		}
		if r.Depth == 0 && r.Name == StepRange && !r.CutShort {
			s := e.stepSeries(r.Device, r.Rank, r.Stage)
			if s.step == nil {
				s.step = e.m.step.WithLabelValues(s.labels...)
			}
			e.observe(s.step, r.HostDuration(), r.Step, r.HostDuration())
		}
		if e.acct.Add(r) {
			s := e.stepSeries(r.Device, r.Rank, r.Stage)
			if s.late == nil {
				s.late = e.m.stageLate.WithLabelValues(s.labels...)
			}
			s.late.Inc()
		}
	}
	e.acct.Finish(e.accountStep, e.unaccounted)
}

// observe records v, with the step's trace id as an exemplar when the
// step's trace was sampled (WithStepTraces) and the id can be one.
func (e *Exporter) observe(o prometheus.Observer, v time.Duration, step int32, stepTime time.Duration) {
	if e.cfg.stepTrace != nil && step != profiler.None {
		if id, ok := e.cfg.stepTrace(step, stepTime); ok && exemplarFits(id) {
			if eo, ok := o.(prometheus.ExemplarObserver); ok {
				eo.ObserveWithExemplar(seconds(v), prometheus.Labels{ExemplarTraceID: id})
				return
			}
		}
	}
	o.Observe(seconds(v))
}

// exemplarFits reports whether id can be the value of an exemplar's
// ExemplarTraceID label: UTF-8, and within the runes OpenMetrics allows an
// exemplar's labels. client_golang panics on any other, inside Consume.
func exemplarFits(id string) bool {
	return utf8.ValidString(id) && utf8.RuneCountInString(ExemplarTraceID)+utf8.RuneCountInString(id) <= prometheus.ExemplarMaxRunes
}

// seconds is d in seconds, and 0 for a range whose end precedes its
// start: a histogram's sum must not go down, Prometheus reading it as a
// counter.
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

// addCount adds v to a counter when it is a positive number: a counter
// cannot take a negative value (client_golang panics), and NaN or +Inf
// would stay in it for good.
func addCount(c prometheus.Counter, v float64) {
	if v > 0 && !math.IsInf(v, 1) {
		c.Add(v)
	}
}

// observeRate observes a bandwidth that is a number, 0 or more.
func observeRate(o prometheus.Observer, v float64) {
	if v >= 0 && !math.IsInf(v, 1) {
		o.Observe(v)
	}
}

func (e *Exporter) collective(r *profiler.Record) {
	if r.DeviceUnfinished {
		// Its transfer did not finish: no time, bytes or bandwidth to
		// count (the range is in the range series all the same).
		return
	}
	c := &r.Collective
	k := collKey{dev: r.Device, op: c.Op, group: c.Group, rank: int32(r.Rank), size: noSize}
	if e.cfg.detail {
		k.size = sizeBucket(c.Bytes)
	}
	s, ok := e.colls[k]
	if !ok {
		s = e.newCollSeries(k)
	}
	d := r.DeviceDuration()
	if !r.HasDevice {
		d = r.HostDuration()
	}
	addCount(s.bytes, float64(c.Bytes))
	addCount(s.busBytes, float64(c.Bytes)*c.BusFactor)
	e.observe(s.seconds, d, r.Step, 0)
	if d > 0 {
		observeRate(s.alg, r.AlgBandwidth)
		observeRate(s.busBW, r.BusBandwidth)
	}
}

func (e *Exporter) rangeSeries(r *profiler.Record) *rangeSeries {
	k := rangeKey{name: r.Name}
	if e.cfg.detail {
		k = rangeKey{dev: r.Device, name: r.Name, rank: int32(r.Rank), stage: r.Stage, chunk: r.Chunk, kind: r.Kind, phase: r.Phase}
	}
	if s, ok := e.ranges[k]; ok {
		return s
	}
	if !utf8.ValidString(k.name) {
		// A label value must be UTF-8 (client_golang panics otherwise); a
		// name from an imported file or a caller need not be. The series
		// is also found under the name as given, within bounds.
		orig := k
		k.name = strings.ToValidUTF8(k.name, "\uFFFD")
		s, ok := e.ranges[k]
		if !ok {
			s = e.newRangeSeries(k)
		}
		if len(e.ranges) < 64*e.cfg.maxNames {
			e.ranges[orig] = s
		}
		return s
	}
	return e.newRangeSeries(k)
}

// newRangeSeries makes the series of k (its name as a label value:
// UTF-8), or finds Other's when k's name is one too many.
func (e *Exporter) newRangeSeries(k rangeKey) *rangeSeries {
	if _, known := e.names[k.name]; !known {
		if len(e.names) >= e.cfg.maxNames {
			k.name = OtherLabel
			if s, ok := e.ranges[k]; ok {
				return s
			}
		} else {
			e.names[k.name] = struct{}{}
		}
	}
	var s *rangeSeries
	if e.cfg.detail {
		rl := e.rankLabels(k.dev, int(k.rank))
		l := append(rl, k.name, k.kind.String(), optional(int(k.stage)), optional(int(k.chunk)), k.phase.String())
		s = &rangeSeries{
			host:    e.m.rangeHost.WithLabelValues(l...),
			records: e.m.records.WithLabelValues(append(rl[:len(perRank):len(perRank)], k.name)...),
			labels:  l,
		}
	} else {
		l := []string{k.name}
		s = &rangeSeries{host: e.m.rangeHost.WithLabelValues(l...), records: e.m.records.WithLabelValues(l...), labels: l}
	}
	e.ranges[k] = s
	return s
}

func (e *Exporter) newCollSeries(k collKey) *collSeries {
	orig := k
	if !utf8.ValidString(k.op) || !utf8.ValidString(k.group) {
		k.op, k.group = strings.ToValidUTF8(k.op, "\uFFFD"), strings.ToValidUTF8(k.group, "\uFFFD")
		if s, ok := e.colls[k]; ok {
			e.aliasColl(orig, s)
			return s
		}
	}
	if _, known := e.ops[k.op]; !known {
		// Operation names come from outside too (an imported trace's,
		// Ingest's): bounded like names and groups.
		if len(e.ops) >= MaxOps {
			k.op = OtherLabel
			if s, ok := e.colls[k]; ok {
				e.aliasColl(orig, s)
				return s
			}
		} else {
			e.ops[k.op] = struct{}{}
		}
	}
	if _, known := e.groups[k.group]; !known {
		if len(e.groups) >= e.cfg.maxGroups {
			k.group = OtherLabel
			if s, ok := e.colls[k]; ok {
				e.aliasColl(orig, s)
				return s
			}
		} else {
			e.groups[k.group] = struct{}{}
		}
	}
	l := append(e.rankLabels(k.dev, int(k.rank)), k.op, k.group)
	bw := l[len(perRank) : len(perRank)+1] // by op only, summed over ranks and groups, by default
	if e.cfg.detail {
		size := "0"
		if k.size >= 0 {
			size = strconv.FormatUint(1<<uint(k.size), 10)
		}
		l = append(l, size)
		bw = l
	}
	s := &collSeries{
		bytes:    e.m.collBytes.WithLabelValues(l...),
		busBytes: e.m.collBusBytes.WithLabelValues(l...),
		seconds:  e.m.collSeconds.WithLabelValues(l...),
		alg:      e.m.collAlgBW.WithLabelValues(bw...),
		busBW:    e.m.collBusBW.WithLabelValues(bw...),
	}
	e.colls[k] = s
	if orig != k {
		e.aliasColl(orig, s)
	}
	return s
}

// aliasColl remembers that a key beyond the group bound counts under s, up
// to a bound of its own, so the map stays bounded whatever groups come.
func (e *Exporter) aliasColl(k collKey, s *collSeries) {
	if len(e.colls) < 64*e.cfg.maxGroups {
		e.colls[k] = s
	}
}

func (e *Exporter) stepSeries(dev runtime.Device, rank int, stage int16) *stepSeries {
	k := stepKey{dev: dev, rank: int32(rank), stage: stage}
	if s, ok := e.steps[k]; ok {
		return s
	}
	s := &stepSeries{labels: append(e.rankLabels(dev, rank), optional(int(stage)))}
	e.steps[k] = s
	return s
}

// accountStep adds one step's busy and idle time (profiler.StepAccountant
// defines them, for the text report too).
func (e *Exporter) accountStep(st profiler.StepTime) {
	if st.CutShort || !st.Computed {
		// Not a step's time (its work failed or was interrupted), or no
		// compute was timed in it (a wrapped command's step): busy is not
		// known, and idle would claim the whole step.
		return
	}
	s := e.stepSeries(st.Device, st.Rank, int16(st.Stage))
	if s.busy == nil {
		s.busy = e.m.stageBusy.WithLabelValues(s.labels...)
		s.idle = e.m.stageIdle.WithLabelValues(s.labels...)
	}
	addCount(s.busy, st.Busy.Seconds())
	addCount(s.idle, st.Idle().Seconds())
}

func (e *Exporter) unaccounted(dev runtime.Device, rank int) {
	e.m.stepsWithoutAccounting.WithLabelValues(e.rankLabels(dev, rank)...).Inc()
}

// rankLabels returns fresh rank, gpu and UUID label values.
func (e *Exporter) rankLabels(dev runtime.Device, rank int) []string {
	d, ok := e.devs[dev]
	if !ok {
		d.gpu = strconv.Itoa(dev.Index)
		if desc := e.cfg.describer(dev.Type); desc != nil {
			if u, err := desc.DeviceUUID(dev.Index); err == nil {
				// A label value must be UTF-8 (client_golang panics
				// otherwise); a describer of the caller's need not give one.
				d.uuid = strings.ToValidUTF8(u, "\uFFFD")
			}
		}
		e.devs[dev] = d
	}
	l := make([]string, len(perRank), len(perRank)+6)
	l[0], l[1], l[2] = strconv.Itoa(rank), d.gpu, d.uuid
	return l
}

// optional formats a stage or chunk label: empty when not set.
func optional(v int) string {
	if v < 0 {
		return ""
	}
	return strconv.Itoa(v)
}

// sizeBucket is the log2 of the smallest power of two holding n bytes, or
// -1 for none.
func sizeBucket(n int64) int8 {
	if n <= 0 {
		return -1
	}
	return int8(bits.Len64(uint64(n - 1)))
}
