package prom

import (
	"go.uber.org/zap"
	"unicode/utf8"

	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainscope/trainscope/internal/buildinfo"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Exporter turns profiler records into Prometheus metrics held in its own
// registry, which Serve exposes and Push sends. Make one with New.
type Exporter struct {
	cfg config
	reg *prometheus.Registry
	m   metrics

	// mu serialises Consume; scrapes read the metrics without it.
	mu     sync.Mutex
	ranges map[rangeKey]*rangeSeries
	colls  map[collKey]*collSeries
	steps  map[stepKey]*stepSeries
	devs   map[runtime.Device]deviceLabels
	names  map[string]struct{} // distinct range names seen, up to cfg.maxNames
	groups map[string]struct{} // distinct group names seen, up to cfg.maxGroups
	ops    map[string]struct{} // distinct operation names seen, up to MaxOps
	acct   *profiler.StepAccountant

	deliveries *deliveryCollector

	srvMu  sync.Mutex
	srv    *http.Server
	srvErr chan error
	closed bool
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	hostname        string
	runID           string
	describer       func(runtime.DeviceType) runtime.DeviceDescriber
	detail          bool
	rangeBuckets    []float64
	rangeBucketsSet bool
	stepBuckets     []float64
	durationBuckets []float64
	bandwidthBucket []float64
	nativeFactor    float64
	maxNames        int
	maxGroups       int
	log             *zap.Logger
	readTimeout     time.Duration // of a whole request, body included (Serve)
	stepTrace       func(step int32, stepTime time.Duration) (traceID string, sampled bool)
}

// WithLogger logs what the exporter cannot deliver: scrapes that failed
// to gather a metric (the endpoint answers with what it could). The
// default logs nothing.
func WithLogger(l *zap.Logger) Option { return optionFunc(func(c *config) { c.log = l }) }

// WithHostname sets the Hostname label (default: os.Hostname), which
// should match what the DCGM exporter on the node reports.
func WithHostname(h string) Option { return optionFunc(func(c *config) { c.hostname = h }) }

// WithRunID adds the series trainscope_run_info{run="id"} 1, so queries
// can tell one run's series from another's on the same address.
func WithRunID(id string) Option { return optionFunc(func(c *config) { c.runID = id }) }

// WithDescriber sets how a device's UUID is found: d returns the backend
// that describes devices of a type, or nil where none does. The default
// asks the process-wide runtime registry (runtime.Available) and uses the
// backend when it implements runtime.DeviceDescriber.
func WithDescriber(d func(runtime.DeviceType) runtime.DeviceDescriber) Option {
	return optionFunc(func(c *config) { c.describer = d })
}

// WithDetail exports per-name detail per rank: range histograms and
// record counts labelled with rank, gpu, UUID, kind, stage, chunk and
// phase, collective series with the message size, and bandwidth
// histograms per rank. Off by default, because their series grow with
// ranks × range names × stages × chunks; without it, per-name series are
// summed over the exporter's ranks and each rank has a bounded budget of
// series (docs/metrics.md).
func WithDetail(on bool) Option { return optionFunc(func(c *config) { c.detail = on }) }

// WithRangeBuckets sets classic bucket upper bounds, in seconds, of the
// range host and device duration histograms. By default they have native
// buckets only (a server without native histograms sees their _sum and
// _count), or with WithDetail 1µs·4^k up to about 16.8s (13 buckets). An
// empty list means native buckets only.
func WithRangeBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.rangeBuckets, c.rangeBucketsSet = append([]float64(nil), b...), true })
}

// WithStepBuckets sets the classic bucket upper bounds, in seconds, of the
// step time histogram (default 1ms·2^k up to about 131s, 18 buckets), for
// servers without native histograms.
func WithStepBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.stepBuckets = append([]float64(nil), b...) })
}

// WithDurationBuckets sets the classic bucket upper bounds, in seconds, of
// the collective duration histogram (default 1µs·4^k up to about 16.8s,
// 13 buckets), for servers without native histograms.
func WithDurationBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.durationBuckets = append([]float64(nil), b...) })
}

// WithBandwidthBuckets sets the classic bucket upper bounds, in bytes per
// second, of the algorithm and bus bandwidth histograms (default
// 2^20·4^k up to 2^40: 1 MiB/s to 1 TiB/s, 11 buckets).
func WithBandwidthBuckets(b []float64) Option {
	return optionFunc(func(c *config) { c.bandwidthBucket = append([]float64(nil), b...) })
}

// NativeBucketFactor is the default growth factor of native histogram
// buckets: client_golang picks the schema whose factor is at most this,
// 2^(1/8) ≈ 1.0905 (schema 3), so a quantile read from a native histogram
// is within 9.05% (one bucket) of the true value.
const NativeBucketFactor = 1.1

// WithNativeBucketFactor sets the growth factor of native histogram
// buckets (default NativeBucketFactor); 1 or less turns native buckets
// off, leaving classic ones only.
func WithNativeBucketFactor(f float64) Option {
	return optionFunc(func(c *config) { c.nativeFactor = f })
}

// WithMaxNames bounds the distinct range names that get series of their
// own (default 64), over all the exporter's ranks, so per rank too;
// records of further names are counted under the name "other". It guards
// the series count against names built at run time.
func WithMaxNames(n int) Option { return optionFunc(func(c *config) { c.maxNames = n }) }

// ExemplarTraceID is the label of the exemplars WithStepTraces attaches:
// the trace id in hex, as Grafana's exemplar links to Jaeger and Tempo
// expect it.
const ExemplarTraceID = "trace_id"

// WithStepTraces attaches an exemplar — the step's trace id
// (ExemplarTraceID) — to each step-time and collective-time observation
// of a step whose trace was sampled, so that a panel of step time links
// to that step's trace. f gives a step's trace id and whether it is
// exported (otel.Exporter.StepTrace), from the step and, for a step-time
// observation, the rank's step time (0 for a collective's); an id that
// cannot be an exemplar's label value (not UTF-8, or with the label name
// over the 128 runes OpenMetrics allows) is left out, the observation
// kept. Exemplars are exposed in the
// OpenMetrics format; Prometheus keeps them with
// --enable-feature=exemplar-storage.
func WithStepTraces(f func(step int32, stepTime time.Duration) (traceID string, sampled bool)) Option {
	return optionFunc(func(c *config) { c.stepTrace = f })
}

// WithMaxGroups bounds the distinct process group names that get series of
// their own (default 256); further groups are counted as "other".
func WithMaxGroups(n int) Option { return optionFunc(func(c *config) { c.maxGroups = n }) }

// OtherLabel is the name, group or op value that records beyond
// WithMaxNames, WithMaxGroups or MaxOps are counted under.
const OtherLabel = "other"

// MaxOps bounds the distinct collective operation names (the op label)
// that get series of their own; ccl and NCCL have a dozen, and further
// ones (an imported trace's own names) are counted as "other".
const MaxOps = 32

func newConfig(opts []Option) (config, error) {
	c := config{
		describer:       runtimeDescriber,
		stepBuckets:     prometheus.ExponentialBuckets(1e-3, 2, 18),
		durationBuckets: prometheus.ExponentialBuckets(1e-6, 4, 13),
		bandwidthBucket: prometheus.ExponentialBuckets(1<<20, 4, 11),
		nativeFactor:    NativeBucketFactor,
		maxNames:        64,
		maxGroups:       256,
		readTimeout:     time.Minute,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("prom: hostname: %w (set one with WithHostname)", err)
		}
		c.hostname = h
	}
	switch {
	case !utf8.ValidString(c.hostname):
		return c, fmt.Errorf("prom: hostname %q is not valid UTF-8, which a label value must be (set one with WithHostname)", c.hostname)
	case c.maxNames < 1:
		return c, fmt.Errorf("prom: WithMaxNames(%d): must be at least 1", c.maxNames)
	case c.maxGroups < 1:
		return c, fmt.Errorf("prom: WithMaxGroups(%d): must be at least 1", c.maxGroups)
	case !c.rangeBucketsSet && c.detail:
		c.rangeBuckets = prometheus.ExponentialBuckets(1e-6, 4, 13)
	}
	if c.nativeFactor <= 1 && len(c.rangeBuckets) == 0 {
		c.rangeBuckets = prometheus.ExponentialBuckets(1e-6, 4, 13) // some buckets are needed
	}
	switch {
	case len(c.rangeBuckets) > 0 && !increasing(c.rangeBuckets):
		return c, fmt.Errorf("prom: range buckets %v: want strictly increasing", c.rangeBuckets)
	case !increasing(c.stepBuckets):
		return c, fmt.Errorf("prom: step buckets %v: want at least one, strictly increasing", c.stepBuckets)
	case !increasing(c.durationBuckets):
		return c, fmt.Errorf("prom: duration buckets %v: want at least one, strictly increasing", c.durationBuckets)
	case !increasing(c.bandwidthBucket):
		return c, fmt.Errorf("prom: bandwidth buckets %v: want at least one, strictly increasing", c.bandwidthBucket)
	}
	if c.describer == nil {
		c.describer = func(runtime.DeviceType) runtime.DeviceDescriber { return nil }
	}
	return c, nil
}

func increasing(b []float64) bool {
	if len(b) == 0 {
		return false
	}
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return false
		}
	}
	return true
}

// runtimeDescriber is the default: the process-wide backend, if it
// describes devices.
func runtimeDescriber(t runtime.DeviceType) runtime.DeviceDescriber {
	impl, err := runtime.Available(t)
	if err != nil {
		return nil
	}
	d, _ := impl.(runtime.DeviceDescriber)
	return d
}

var _ profiler.SinkShutdowner = (*Exporter)(nil)

// New returns an exporter with its own registry. With a non-nil p it
// registers itself as p's sink, exports p's Stats at every scrape, and p's
// Close shuts it down (stopping the /metrics server); with nil the caller
// feeds it records through Consume and calls Shutdown.
func New(p *profiler.Profiler, opts ...Option) (*Exporter, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	e := &Exporter{
		cfg:        cfg,
		reg:        prometheus.NewRegistry(),
		ranges:     make(map[rangeKey]*rangeSeries),
		colls:      make(map[collKey]*collSeries),
		steps:      make(map[stepKey]*stepSeries),
		devs:       make(map[runtime.Device]deviceLabels),
		names:      make(map[string]struct{}),
		groups:     make(map[string]struct{}),
		ops:        make(map[string]struct{}),
		deliveries: newDeliveryCollector(),
	}
	e.acct = profiler.NewStepAccountant()
	e.m = newMetrics(cfg)
	// Every series carries the node's Hostname, as DCGM's do.
	r := prometheus.WrapRegistererWith(prometheus.Labels{labelHostname: cfg.hostname}, e.reg)
	cs := e.m.collectors()
	cs = append(cs, e.deliveries)
	if p != nil {
		cs = append(cs, NewStatsCollector(p))
	}
	if cfg.runID != "" {
		info := prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "trainscope_run_info",
			Help:        "Always 1; its run label identifies the training run these series describe, its version label the trainscope that measured it.",
			ConstLabels: prometheus.Labels{"run": cfg.runID, "version": buildinfo.Version()},
		})
		info.Set(1)
		cs = append(cs, info)
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("prom: register: %w", err)
		}
	}
	if p != nil {
		if err := p.AddSink(e); err != nil {
			return nil, fmt.Errorf("prom: %w", err)
		}
	}
	return e, nil
}

// Registry returns the registry holding the exporter's metrics, for tests
// and for serving them from an HTTP server of the caller's own.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Register adds a collector of the caller's (process or Go runtime
// metrics, say) to the exporter's registry, with the Hostname label added
// to its series.
func (e *Exporter) Register(c prometheus.Collector) error {
	r := prometheus.WrapRegistererWith(prometheus.Labels{labelHostname: e.cfg.hostname}, e.reg)
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return fmt.Errorf("prom: collector already registered: %w", err)
		}
		return fmt.Errorf("prom: register: %w", err)
	}
	return nil
}
