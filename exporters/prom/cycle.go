package prom

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/profiler/cycle"
)

// CycleCollector maps the cycle each rank's collectives repeat
// (cycle.Sink: the step, most likely, of a wrapped command that marks
// none) to two gauges per rank where one is found, and a third where its
// kernels were traced (the GPU's busy time in a cycle); and every cycle
// timed over the run (cycle.Run) to a summary and the longest's gauge. The search reads every
// rank's window, a few milliseconds each, so a scrape reuses the last
// result for up to a refresh interval. Register it with Exporter.Register.
type CycleCollector struct {
	sink                   *cycle.Sink
	every                  time.Duration
	seconds, opsDesc, busy *prometheus.Desc
	run, longest           *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	last cycle.Result
}

// NewCycleCollector returns a collector of s's cycles, searched again at
// most every refresh (5 s where refresh is 0 or less).
func NewCycleCollector(s *cycle.Sink, refresh time.Duration) *CycleCollector {
	if refresh <= 0 {
		refresh = 5 * time.Second
	}
	return &CycleCollector{
		sink:    s,
		every:   refresh,
		seconds: prometheus.NewDesc("trainscope_collective_cycle_seconds", "Median time of the cycle the rank's collectives repeat (the step, most likely, of a job that marks none), from its latest operations kept (up to 32768).", []string{labelRank}, nil),
		opsDesc: prometheus.NewDesc("trainscope_collective_cycle_operations", "Collectives and point-to-point operations in one cycle of the rank's.", []string{labelRank}, nil),
		busy:    prometheus.NewDesc("trainscope_collective_cycle_busy_seconds", "Median time within a cycle of the rank's collectives that its GPU was busy (its traced kernels, less transfers on their streams); absent where no kernel was traced.", []string{labelRank}, nil),
		run:     prometheus.NewDesc("trainscope_collective_cycle_run_seconds", "Every cycle of the rank's collectives over the run, timed one by one (a second behind its latest operation): count, sum and quantiles within 1 %. rate(_sum)/rate(_count) is the mean step time of a job that marks none.", []string{labelRank}, nil),
		longest: prometheus.NewDesc("trainscope_collective_cycle_longest_seconds", "The longest cycle of the rank's collectives so far in the run (a stall: a checkpoint, a data loader, a slow peer).", []string{labelRank}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *CycleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.seconds
	ch <- c.opsDesc
	ch <- c.busy
	ch <- c.run
	ch <- c.longest
}

// Collect implements prometheus.Collector.
func (c *CycleCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if now := time.Now(); c.at.IsZero() || now.Sub(c.at) >= c.every {
		c.at, c.last = now, c.sink.Result()
	}
	res := c.last
	c.mu.Unlock()
	for _, r := range res.Ranks {
		if run := r.Run; run.Cycles > 0 {
			rank := strconv.Itoa(r.Rank)
			q := map[float64]float64{0.5: run.P50.Seconds(), 0.9: run.P90.Seconds(), 0.99: run.P99.Seconds()}
			ch <- prometheus.MustNewConstSummary(c.run, uint64(run.Cycles), run.Sum.Seconds(), q, rank)
			ch <- prometheus.MustNewConstMetric(c.longest, prometheus.GaugeValue, run.Max.Seconds(), rank)
		}
		if !r.Found {
			continue
		}
		rank := strconv.Itoa(r.Rank)
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, r.Median.Seconds(), rank)
		ch <- prometheus.MustNewConstMetric(c.opsDesc, prometheus.GaugeValue, float64(r.Length), rank)
		if r.BusyKnown {
			ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, r.Busy.Seconds(), rank)
		}
	}
}
