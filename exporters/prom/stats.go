package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/profiler"
)

// StatsSource is what NewStatsCollector reads; *profiler.Profiler
// implements it.
type StatsSource interface {
	Stats() profiler.Stats
}

// statsCollector maps a profiler's Stats to metrics at scrape time, so a
// scrape always sees the current counts and nothing is updated on the
// recording path.
type statsCollector struct {
	src StatsSource

	recorders, kept, pending                 *prometheus.Desc
	dropped, overflow, shortages, unbalanced *prometheus.Desc
	backendErrors, unfinished, discarded     *prometheus.Desc
	sinkFailures                             *prometheus.Desc
}

// NewStatsCollector returns a collector exporting src's Stats as the
// trainscope_recorders, trainscope_records_kept and
// trainscope_records_pending gauges and the trainscope_records_dropped_total,
// trainscope_records_overflow_total, trainscope_event_shortages_total,
// trainscope_unbalanced_ends_total, trainscope_backend_errors_total,
// trainscope_device_unfinished_total, trainscope_records_discarded_total
// and trainscope_sink_failures_total counters. The counts are the profiler's, across all its recorders, so the
// series carry no rank. New registers one for its profiler.
func NewStatsCollector(src StatsSource) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &statsCollector{
		src:       src,
		recorders: d("trainscope_recorders", "Recorders (one per rank goroutine) the profiler has made."),
		kept:      d("trainscope_records_kept", "Records the profiler keeps for Snapshot, up to its record bound (none when the bound is 0, as under profile-run)."),
		pending:   d("trainscope_records_pending", "Device ranges whose events have not completed yet."),
		dropped: d("trainscope_records_dropped_total",
			"Ranges lost while recording (a full recorder buffer or nesting deeper than 64); no exporter saw them."),
		overflow: d("trainscope_records_overflow_total",
			"Records beyond the profiler's nonzero record bound: exported, but not kept for Snapshot."),
		shortages: d("trainscope_event_shortages_total",
			"Device ranges timed on the host only because the recorder's event pool was empty."),
		unbalanced:    d("trainscope_unbalanced_ends_total", "End calls with no open range."),
		backendErrors: d("trainscope_backend_errors_total", "Events the device backend refused to record or resolve."),
		unfinished: d("trainscope_device_unfinished_total",
			"Device ranges whose device work had not finished when the profiler gave up on it (a kernel that hangs, a stopped run): exported with host times only."),
		discarded: d("trainscope_records_discarded_total",
			"Device ranges a Reset discarded while they still waited for their events: no exporter saw them."),
		sinkFailures: d("trainscope_sink_failures_total", "Exporters removed because they panicked; the others get every record."),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.recorders, c.kept, c.pending, c.dropped, c.overflow, c.shortages, c.unbalanced, c.backendErrors, c.unfinished, c.discarded, c.sinkFailures} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(c.recorders, s.Recorders)
	gauge(c.kept, s.Records)
	gauge(c.pending, s.Pending)
	counter(c.dropped, s.Dropped)
	counter(c.overflow, s.Overflow)
	counter(c.shortages, s.EventDrops)
	counter(c.unbalanced, s.Unbalanced)
	counter(c.backendErrors, s.Errors)
	counter(c.unfinished, s.Abandoned)
	counter(c.discarded, s.Discarded)
	counter(c.sinkFailures, s.SinkFailures)
}
