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

// metrics are the vectors the sink updates.
type metrics struct {
	rangeHost, rangeDevice *prometheus.HistogramVec // name, kind, stage, chunk, phase
	records                *prometheus.CounterVec   // name

	collBytes, collBusBytes *prometheus.CounterVec   // op, group, size
	collSeconds             *prometheus.HistogramVec // op, group, size
	collAlgBW, collBusBW    *prometheus.HistogramVec // op, group, size

	step                   *prometheus.HistogramVec // stage
	stageBusy, stageIdle   *prometheus.CounterVec   // stage
	stageLate              *prometheus.CounterVec   // stage
	stepsWithoutAccounting *prometheus.CounterVec   // (per rank only)
}

func newMetrics(c config) metrics {
	rangeLabels := withRank("name", "kind", "stage", "chunk", "phase")
	collLabels := withRank("op", "group", "size")
	hist := func(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
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
			"Profiler records exported, by range name; equals the report's counts plus the records beyond the profiler's record bound.", withRank("name")),

		collBytes: counter("trainscope_collective_bytes_total",
			"Message bytes of collective and point-to-point calls (S as nccl-tests defines it).", collLabels),
		collBusBytes: counter("trainscope_collective_bus_bytes_total",
			"Message bytes times the bus factor of each call; its rate over the rate of trainscope_collective_seconds_sum is the aggregate bus bandwidth.", collLabels),
		collSeconds: hist("trainscope_collective_seconds",
			"Duration of collective and point-to-point calls: device time, host time where none was measured.", c.durationBuckets, collLabels),
		collAlgBW: hist("trainscope_collective_algbw_bytes_per_second",
			"Algorithm bandwidth S/t of each collective or point-to-point call.", c.bandwidthBucket, collLabels),
		collBusBW: hist("trainscope_collective_busbw_bytes_per_second",
			"Bus bandwidth of each call: algorithm bandwidth times the nccl-tests bus factor.", c.bandwidthBucket, collLabels),

		step: hist("trainscope_step_seconds",
			"Host wall time of top-level \"step\" ranges.", c.durationBuckets, withRank("stage")),
		stageBusy: counter("trainscope_stage_busy_seconds_total",
			"Per step, the time the rank computed: device time of its forward, backward and optimizer ranges, less transfers and input waits on the same stream, clipped to the step.", withRank("stage")),
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
