package prom

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// AnalysisCollector maps an analysis sink's run totals (analysis.Summary,
// the complete steps) to metrics when scraped, as client_golang's
// database statistics collector maps sql.DBStats: a series per stage or
// rank, none per step or collective. Register it with
// Exporter.Register. A wrapped run's analysis.CallSink, without steps,
// gives the straggler scores and the collective skew only.
type AnalysisCollector struct {
	sink                             Summarizer
	steps, bubble, bubbleFrac, ideal *prometheus.Desc
	overlap, score, skew             *prometheus.Desc
}

// Summarizer is what AnalysisCollector reads: analysis.Sink or
// analysis.CallSink.
type Summarizer interface {
	Summary() analysis.Summary
}

// NewAnalysisCollector returns a collector of s's totals.
func NewAnalysisCollector(s Summarizer) *AnalysisCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &AnalysisCollector{
		sink:       s,
		steps:      d("trainscope_pipeline_steps_total", "Steps analysed, by whether their records were complete (only complete steps count in the other pipeline metrics).", "complete"),
		bubble:     d("trainscope_pipeline_bubble_seconds", "Mean pipeline bubble per step of the stage's ranks: time within the step's span (first to last forward/backward on any rank) doing no forward or backward computation.", "stage"),
		bubbleFrac: d("trainscope_pipeline_bubble_fraction", "The stage's bubble over the steps' spans.", "stage"),
		ideal:      d("trainscope_pipeline_bubble_ideal_fraction", "The ideal bubble (p−1)/(v·m+p−1) of the pipeline shape the steps' labels show."),
		overlap:    d("trainscope_pipeline_overlap_ratio", "Share of the rank's communication time during which it was busy computing.", labelRank),
		score:      d("trainscope_pipeline_straggler_score", "Share of all ranks' waiting at collectives that the rank caused, by arriving last or by holding up the rank that did.", labelRank),
		skew:       d("trainscope_collective_skew_seconds", "Arrival skew (last arrival less first) of collectives matched across ranks; quantiles within 1%."),
	}
}

// Describe implements prometheus.Collector.
func (c *AnalysisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.steps, c.bubble, c.bubbleFrac, c.ideal, c.overlap, c.score, c.skew} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *AnalysisCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.sink.Summary()
	if !s.Stepless {
		ch <- prometheus.MustNewConstMetric(c.steps, prometheus.CounterValue, float64(s.Complete), "true")
		ch <- prometheus.MustNewConstMetric(c.steps, prometheus.CounterValue, float64(s.Steps-s.Complete), "false")
	}
	for _, st := range s.Stages {
		if st.RankSteps == 0 {
			continue
		}
		stage := label(st.Stage)
		ch <- prometheus.MustNewConstMetric(c.bubble, prometheus.GaugeValue, st.Bubble.Seconds()/float64(st.RankSteps), stage)
		ch <- prometheus.MustNewConstMetric(c.bubbleFrac, prometheus.GaugeValue, st.Fraction(), stage)
	}
	if !math.IsNaN(s.Pipeline.Ideal) {
		ch <- prometheus.MustNewConstMetric(c.ideal, prometheus.GaugeValue, s.Pipeline.Ideal)
	}
	for _, r := range s.Ranks {
		rank := strconv.Itoa(r.Rank)
		if r.Comm > 0 && r.Computed {
			// Without compute timed on the device, overlap is unknown, not 0.
			ch <- prometheus.MustNewConstMetric(c.overlap, prometheus.GaugeValue, float64(r.Overlap)/float64(r.Comm), rank)
		}
		ch <- prometheus.MustNewConstMetric(c.score, prometheus.GaugeValue, r.Score, rank)
	}
	if k := s.Collectives; k.Matched > 0 {
		ch <- prometheus.MustNewConstSummary(c.skew, uint64(k.Matched), k.Skew.Seconds(), map[float64]float64{
			0.5: k.P50Skew.Seconds(), 0.9: k.P90Skew.Seconds(), 0.99: k.P99Skew.Seconds(),
		})
	}
}

func label(v int) string {
	if v == profiler.None {
		return "none"
	}
	return strconv.Itoa(v)
}
