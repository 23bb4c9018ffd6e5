package otel

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// OTLP protocols accepted in Config.Protocol and OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is service.name when neither Config.ServiceName nor
// OTEL_SERVICE_NAME (nor service.name in OTEL_RESOURCE_ATTRIBUTES) sets one.
const DefaultServiceName = "profile-run"

// Defaults applied to a zero Config field.
const (
	DefaultQueueSize     = 1 << 16
	DefaultBatchSize     = 2048
	DefaultConcurrency   = 2
	DefaultExportTimeout = 10 * time.Second
	DefaultRetryTime     = 5 * time.Second
	DefaultMaxLinks      = 32

	DefaultKeepFirst      = 5
	DefaultKeepSlowest    = 0.01
	DefaultKeepSlowestMin = 10
)

// ErrInvalidConfig is wrapped by every configuration error New returns.
var ErrInvalidConfig = errors.New("invalid OTLP exporter configuration")

// Config says where spans go and how much the exporter may hold. The zero
// value is usable: OTLP over the protocol and to the endpoint the standard
// OTEL_EXPORTER_OTLP_* variables name (http/protobuf to localhost:4318 when
// none is set), service.name "profile-run", a random run id.
type Config struct {
	// Epoch is the time record times count from: the profiler's Epoch().
	// Required.
	Epoch time.Time

	// Endpoint overrides OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
	// OTEL_EXPORTER_OTLP_ENDPOINT. It is "host:port" (plaintext when
	// Insecure, else TLS) or a URL "http://host:port" or
	// "https://host:port[/path]" whose scheme decides. For HTTP a URL
	// without a path gets /v1/traces; a URL's path is ignored by gRPC.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP. Empty means
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL,
	// then http/protobuf, the OTLP specification's default.
	Protocol string
	// Insecure sends plaintext to a host:port Endpoint.
	Insecure bool
	// Headers are sent with every export request, added to those of
	// OTEL_EXPORTER_OTLP_TRACES_HEADERS (else OTEL_EXPORTER_OTLP_HEADERS)
	// and replacing those of the same name.
	Headers map[string]string

	// ServiceName overrides OTEL_SERVICE_NAME and the default
	// "profile-run".
	ServiceName string
	// RunID names the run: trace and span ids derive from it, and it is the
	// resource attribute training.run_id. Empty means a random one.
	RunID string
	// ResourceAttributes are added to every rank's resource, over those of
	// OTEL_RESOURCE_ATTRIBUTES.
	ResourceAttributes []attribute.KeyValue

	// Sampler chooses the steps whose traces are exported: one of the
	// Sampler* names (always_on, always_off, traceidratio and their
	// parentbased_ forms). Empty means OTEL_TRACES_SAMPLER, then
	// parentbased_always_on. The decision derives from the step's trace
	// id, so every rank of a run takes the same one for the same step.
	Sampler string
	// SamplerArg is the traceidratio sampler's ratio, from 0 to 1. Empty
	// means OTEL_TRACES_SAMPLER_ARG, then 1.
	SamplerArg string

	// KeepFirst, KeepSlowest and KeepSlowestMin are trainscope's tail
	// policy, which applies when a traceidratio sampler leaves steps out:
	// a step is also kept when it is among the first KeepFirst steps, or
	// when its duration (first start to last end of its step ranges over
	// the exporter's ranks) is among the slowest max(KeepSlowestMin,
	// ⌈KeepSlowest·n⌉) of the n steps ended so far. The decision waits
	// until the step has ended on every rank the exporter has seen, so all
	// of them keep or leave out the step together (see docs/otel.md). Zero
	// means TRAINSCOPE_TRACES_KEEP_FIRST, TRAINSCOPE_TRACES_KEEP_SLOWEST
	// and TRAINSCOPE_TRACES_KEEP_SLOWEST_MIN, then DefaultKeepFirst,
	// DefaultKeepSlowest and DefaultKeepSlowestMin; negative turns that
	// part off.
	KeepFirst      int
	KeepSlowest    float64
	KeepSlowestMin int

	// Cycles, for a job that marks no steps (a wrapped command's
	// collectives), numbers the cycles its records fall in: each cycle is
	// then a trace of its own, as a step is, with a span per rank
	// (CycleSpanName) over that rank's records of the cycle, instead of
	// one run-level trace for the whole run. Nil leaves records without a
	// step in the run-level trace; so does a job whose records carry
	// steps (from the first such record on).
	Cycles CycleNumbers

	// QueueSize bounds the spans held between Consume and their export's
	// outcome (default DefaultQueueSize). Consume drops and counts the
	// records that do not fit; it never waits.
	QueueSize int
	// BatchSize is the most spans one export request carries (default
	// DefaultBatchSize).
	BatchSize int
	// Concurrency is the most export requests in flight at once (default
	// DefaultConcurrency): encoding a request takes as long as building
	// its spans, so a second sender keeps a second core busy.
	Concurrency int
	// ExportTimeout bounds one export request, retries included. Zero
	// means OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, then
	// OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds), then
	// DefaultExportTimeout.
	ExportTimeout time.Duration
	// RetryTime bounds the retries of one request after retryable errors
	// (default DefaultRetryTime); negative disables retries.
	RetryTime time.Duration
	// MaxLinks bounds the links from one rank's collective span to the
	// other ranks' spans of that collective (default DefaultMaxLinks; the
	// nearest group ranks first); negative disables links.
	MaxLinks int
}

// Option adds what a Config cannot say.
type Option interface{ apply(*options) }

type options struct {
	spanExporter sdktrace.SpanExporter
	log          *zap.Logger
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithSpanExporter sends spans to e instead of an OTLP exporter built from
// the Config's endpoint and protocol (which are then not used): for tests,
// or for an exporter configured some other way. The Exporter shuts e down.
func WithSpanExporter(e sdktrace.SpanExporter) Option {
	return optionFunc(func(o *options) { o.spanExporter = e })
}

// WithLogger logs what the exporter cannot deliver: when the endpoint
// starts failing (and when it recovers), and the first time the queue
// overflows. Counts stay exact in Stats either way; the default logs
// nothing.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(o *options) { o.log = l })
}

// endpoint is the resolved destination.
type endpoint struct {
	protocol string
	// Exactly one of url and hostPort is set, or neither (use the
	// exporter's own default and environment).
	url      string
	hostPort string
	insecure bool
	// target is where requests go, for messages and the run summary.
	target string
}

// EnvEndpoint returns the traces endpoint the standard variables name
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT),
// or "" when neither is set: a command can turn the exporter on when a
// flag or the environment names an endpoint.
func EnvEndpoint() string {
	return firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
}

// withDefaults returns c with zero fields defaulted, or an error naming
// the first bad value.
func (c Config) withDefaults() (Config, error) {
	if c.Epoch.IsZero() {
		return c, invalid("Epoch is zero: set it to the profiler's Epoch()")
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"QueueSize", &c.QueueSize, DefaultQueueSize},
		{"BatchSize", &c.BatchSize, DefaultBatchSize},
		{"Concurrency", &c.Concurrency, DefaultConcurrency},
	}
	for _, f := range ints {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return c, invalid("%s=%d is negative", f.name, *f.v)
		}
	}
	if c.MaxLinks == 0 {
		c.MaxLinks = DefaultMaxLinks
	}
	if c.ExportTimeout == 0 {
		d, err := envTimeout()
		if err != nil {
			return c, err
		}
		c.ExportTimeout = d
	}
	h, err := c.resolveHeaders()
	if err != nil {
		return c, err
	}
	c.Headers = h
	if c.ExportTimeout < 0 {
		return c, invalid("ExportTimeout=%v is negative", c.ExportTimeout)
	}
	if c.RetryTime == 0 {
		c.RetryTime = DefaultRetryTime
	}
	return c, nil
}

// resolveEndpoint applies the protocol and endpoint precedence: the
// Config, then the traces-specific variable, then the general one.
func (c Config) resolveEndpoint() (endpoint, error) {
	ep := endpoint{protocol: c.Protocol}
	if ep.protocol == "" {
		ep.protocol = firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if ep.protocol == "" {
		ep.protocol = ProtocolHTTP
	}
	switch ep.protocol {
	case ProtocolGRPC, ProtocolHTTP:
	case "http/json":
		return ep, invalid("protocol %q is not supported by the Go OTLP exporter (use %s or %s)", ep.protocol, ProtocolGRPC, ProtocolHTTP)
	default:
		return ep, invalid("unknown protocol %q (use %s or %s)", ep.protocol, ProtocolGRPC, ProtocolHTTP)
	}

	if c.Endpoint == "" {
		// The OTLP exporters read the variables themselves (and ignore a
		// malformed one); check them here so a typo is an error, not
		// spans sent to the default address.
		ep.target = "localhost:4317"
		if ep.protocol == ProtocolHTTP {
			ep.target = "https://localhost:4318/v1/traces"
		}
		for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if v := strings.TrimSpace(os.Getenv(name)); v != "" {
				u, err := parseURL(v)
				if err != nil {
					return ep, invalid("%s=%q: %v", name, v, err)
				}
				if name == "OTEL_EXPORTER_OTLP_ENDPOINT" && ep.protocol == ProtocolHTTP {
					u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
				}
				ep.target = u.String()
				break
			}
		}
		return ep, nil
	}
	if strings.Contains(c.Endpoint, "://") {
		u, err := parseURL(c.Endpoint)
		if err != nil {
			return ep, invalid("endpoint %q: %v", c.Endpoint, err)
		}
		if ep.protocol == ProtocolHTTP && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
		}
		ep.url, ep.target = u.String(), u.String()
		return ep, nil
	}
	host, port, err := net.SplitHostPort(c.Endpoint)
	if err != nil || port == "" {
		return ep, invalid("endpoint %q is neither host:port nor a http(s) URL", c.Endpoint)
	}
	ep.hostPort = net.JoinHostPort(host, port)
	ep.insecure = c.Insecure
	ep.target = ep.hostPort
	return ep, nil
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// envTimeout is the export timeout the OTLP variables give, in whole
// milliseconds as the specification has it, else DefaultExportTimeout. The
// exporters would read them too, but the Config's timeout, which bounds
// trainscope's own wait for each request, would then override them.
func envTimeout() (time.Duration, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > int64(24*time.Hour/time.Millisecond) {
			return 0, invalid("%s=%q: want a whole number of milliseconds, more than 0 (10000 is 10 s)", name, v)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	return DefaultExportTimeout, nil
}

// resolveHeaders gives the headers every request carries: those of
// OTEL_EXPORTER_OTLP_TRACES_HEADERS, else of OTEL_EXPORTER_OTLP_HEADERS
// ("k=v,k2=v2", values percent-encoded), then the Config's over them. The
// exporters read the variables themselves, but their header option
// replaces the variables' headers rather than adding to them, so they are
// merged here; a malformed entry is an error, not a header silently left
// out.
func (c Config) resolveHeaders() (map[string]string, error) {
	out := map[string]string{}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		for entry := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(entry) == "" {
				continue
			}
			k, val, ok := strings.Cut(entry, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" || strings.ContainsAny(k, " \t\"") {
				return nil, invalid("%s: entry %q is not key=value", name, entry)
			}
			dec, err := url.PathUnescape(strings.TrimSpace(val))
			if err != nil {
				return nil, invalid("%s: value of %q: %v", name, k, err)
			}
			out[k] = dec
		}
		break // the traces-specific variable, where set, replaces the general one
	}
	maps.Copy(out, c.Headers)
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("otel: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
