package prom

import "github.com/prometheus/client_golang/prometheus"

// Label names. Hostname, gpu and UUID are spelled as NVIDIA's DCGM
// exporter spells them, so trainscope's series join with its GPU metrics.
const (
	labelHostname = "Hostname"
	labelRank     = "rank"
	labelGPU      = "gpu"
	labelUUID     = "UUID"
)

// perRank are the labels of every per-rank series, before its own.
var perRank = []string{labelRank, labelGPU, labelUUID}

func withRank(labels ...string) []string {
	return append(append([]string(nil), perRank...), labels...)
}

// metrics are the vectors the sink updates. Their labels depend on
// WithDetail; the comments give the default, then the detail labels.
type metrics struct {
	rangeHost, rangeDevice *prometheus.HistogramVec // name; + rank, kind, stage, chunk, phase
	records                *prometheus.CounterVec   // name; + rank

	collBytes, collBusBytes *prometheus.CounterVec   // rank, op, group; + size
	collSeconds             *prometheus.HistogramVec // rank, op, group; + size
	collAlgBW, collBusBW    *prometheus.HistogramVec // op; + rank, group, size

	step                   *prometheus.HistogramVec // rank, stage
	stageBusy, stageIdle   *prometheus.CounterVec   // rank, stage
	stageLate              *prometheus.CounterVec   // rank, stage
	stepsWithoutAccounting *prometheus.CounterVec   // rank
}

// histogramOpts are the options of every histogram: native buckets at
// the configured factor beside the classic ones, so a server with native
// histograms stores one series per histogram and one without them still
// reads the classic buckets.
func histogramOpts(c config, name, help string, buckets []float64) prometheus.HistogramOpts {
	o := prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}
	if c.nativeFactor > 1 {
		o.NativeHistogramBucketFactor = c.nativeFactor
		// Bounded memory: past 160 buckets the resolution halves; the
		// histogram is never reset to make room.
		o.NativeHistogramMaxBucketNumber = 160
		o.NativeHistogramMinResetDuration = 0
	}
	return o
}

func newMetrics(c config) metrics {
	rangeLabels, recordLabels := []string{"name"}, []string{"name"}
	collLabels, bwLabels := withRank("op", "group"), []string{"op"}
	if c.detail {
		rangeLabels = withRank("name", "kind", "stage", "chunk", "phase")
		recordLabels = withRank("name")
		collLabels = withRank("op", "group", "size")
		bwLabels = collLabels
	}
	hist := func(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(histogramOpts(c, name, help, buckets), labels)
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return metrics{
		rangeHost: hist("trainscope_range_host_seconds",
			"Host wall time of profiled ranges.", c.rangeBuckets, rangeLabels),
		rangeDevice: hist("trainscope_range_device_seconds",
			"Device time of device-timed ranges, measured with stream events.", c.rangeBuckets, rangeLabels),
		records: counter("trainscope_records_total",
			"Profiler records exported, by range name; equals the report's counts plus the records beyond the profiler's record bound.", recordLabels),

		collBytes: counter("trainscope_collective_bytes_total",
			"Message bytes of collective and point-to-point calls (S as nccl-tests defines it).", collLabels),
		collBusBytes: counter("trainscope_collective_bus_bytes_total",
			"Message bytes times the bus factor of each call; its rate over the rate of the sum of trainscope_collective_seconds is the aggregate bus bandwidth.", collLabels),
		collSeconds: hist("trainscope_collective_seconds",
			"Duration of collective and point-to-point calls: device time, host time where none was measured.", c.durationBuckets, collLabels),
		collAlgBW: hist("trainscope_collective_algbw_bytes_per_second",
			"Algorithm bandwidth S/t of each collective or point-to-point call.", c.bandwidthBucket, bwLabels),
		collBusBW: hist("trainscope_collective_busbw_bytes_per_second",
			"Bus bandwidth of each call: algorithm bandwidth times the nccl-tests bus factor.", c.bandwidthBucket, bwLabels),

		step: hist("trainscope_step_seconds",
			"Host wall time of top-level \"step\" ranges.", c.stepBuckets, withRank("stage")),
		stageBusy: counter("trainscope_stage_busy_seconds_total",
			"Per step, the time the rank computed: device time of its forward, backward and optimizer ranges and of traced kernels, less transfers and input waits on the same stream, clipped to the step.", withRank("stage")),
		stageIdle: counter("trainscope_stage_idle_seconds_total",
			"Per step, the step's wall time minus its busy time.", withRank("stage")),
		stageLate: counter("trainscope_stage_late_ranges_total",
			"Compute, transfer and wait ranges whose device time arrived after their step was accounted, so left out of its busy time.", withRank("stage")),
		stepsWithoutAccounting: counter("trainscope_stage_unaccounted_steps_total",
			"Steps whose device work arrived without their step range (dropped, or never ended), so not counted as busy or idle.", withRank()),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.rangeHost, m.rangeDevice, m.records,
		m.collBytes, m.collBusBytes, m.collSeconds, m.collAlgBW, m.collBusBW,
		m.step, m.stageBusy, m.stageIdle, m.stageLate, m.stepsWithoutAccounting,
	}
}
