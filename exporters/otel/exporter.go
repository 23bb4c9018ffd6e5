package otel

import (
	"go.uber.org/zap"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/trainscope/trainscope/profiler"
)

// Exporter is a profiler.Sink that sends records as OTLP spans.
//
// Consume copies records into a bounded queue and returns; it never waits
// for the network. One goroutine builds spans from the queue and sends
// them in requests of at most Config.BatchSize spans, up to
// Config.Concurrency requests at once, each bounded by
// Config.ExportTimeout with the OTLP exporter's own bounded retries. Every
// span is counted exactly once as exported, dropped or failed (Stats).
type Exporter struct {
	cfg      Config
	protocol string // ProtocolGRPC, ProtocolHTTP, or "" for WithSpanExporter
	target   string // where requests go, for messages
	spans    sdktrace.SpanExporter
	build    *builder
	sampler  stepSampler
	tail     *tailPolicy // nil when every step's decision is the sampler's

	mu    sync.Mutex
	queue []profiler.Record // records waiting for the export goroutine
	spare []profiler.Record
	steps []analysisSpan // pipeline analysis and cycle spans waiting
	// For Config.Cycles (numberCycles): each rank's latest cycles, the
	// cycle spans not yet queued, whether a record had a step, and the
	// memory of relabelled batches.
	marks      map[int]*cycleMarks
	cycleSpans []analysisSpan
	stepsSeen  bool
	cycleBuf   []profiler.Record
	held       int  // spans queued or in flight: bounded by cfg.QueueSize
	finished   bool // the export goroutine has taken its last batch
	// gaveUp: Shutdown stopped waiting for requests that did not return
	// once cancelled and counted their spans as failed; what they answer
	// later is not counted again.
	gaveUp bool
	stats  Stats

	wake     chan struct{}
	flushes  chan chan struct{}
	senders  chan struct{}  // one token per request in flight
	inflight sync.WaitGroup // the requests in flight
	stop     chan struct{}
	done     chan struct{}
	// exportCtx is the parent of every export request; cancelled when a
	// Shutdown's context ends with spans still queued.
	exportCtx    context.Context
	cancelExport context.CancelFunc

	// The first Shutdown does the work; later ones only wait for it.
	stopOnce    sync.Once
	shutDone    chan struct{} // closed when the first Shutdown has finished
	shutdownErr error         // the first Shutdown's result, written before shutDone closes

	log         *zap.Logger
	failing     bool // the last request failed (under mu), for logging changes only
	overflowed  bool // the queue has overflowed (under mu); the export goroutine logs it
	droppedOnce sync.Once
	// logs carries what the exporter logs to the one goroutine that
	// writes it (logLoop), in order, so that a log that stops taking
	// writes holds up neither the export nor Shutdown; nil without a
	// logger. A line that finds it full is left out: the counts are in
	// Stats either way.
	logs    chan func()
	logDone chan struct{} // closed when logLoop has returned, or at once without one
}

// logQueue bounds the lines waiting for a slow log. The exporter logs
// changes of state only, a few lines a run.
const logQueue = 16

var _ profiler.SinkShutdowner = (*Exporter)(nil)

// New validates cfg, builds the OTLP exporter it describes (or takes the
// one WithSpanExporter gives) and the per-rank resources, and starts the
// export goroutine. With a non-nil p it registers itself as p's sink, and
// p's Close shuts it down; with nil the caller feeds it records through
// Consume and stops it with Shutdown. Nothing connects here: an endpoint
// that is down shows in Stats, not as an error.
func New(ctx context.Context, p *profiler.Profiler, cfg Config, opts ...Option) (*Exporter, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		cfg.RunID = randomRunID()
	}
	sampler, err := newStepSampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		return nil, err
	}
	tail, err := newTailPolicy(cfg, sampler)
	if err != nil {
		return nil, err
	}
	base, err := baseResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	logged := o.log != nil
	if !logged {
		o.log = zap.NewNop()
	}
	e := &Exporter{
		log:      o.log,
		cfg:      cfg,
		spans:    o.spanExporter,
		build:    newBuilder(cfg.RunID, cfg.Epoch, cfg.MaxLinks, base),
		sampler:  sampler,
		tail:     tail,
		wake:     make(chan struct{}, 1),
		senders:  make(chan struct{}, cfg.Concurrency),
		flushes:  make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		shutDone: make(chan struct{}),
		logDone:  make(chan struct{}),
	}
	if logged {
		e.logs = make(chan func(), logQueue)
	}
	if e.spans == nil {
		ep, err := cfg.resolveEndpoint()
		if err != nil {
			return nil, err
		}
		e.protocol, e.target = ep.protocol, ep.target
		if ep.protocol == ProtocolHTTP {
			if err := probeHTTP(ctx, ep.target, cfg.Headers); err != nil {
				return nil, fmt.Errorf("otel: %w", err)
			}
		}
		if e.spans, err = newOTLP(ctx, cfg, ep); err != nil {
			return nil, fmt.Errorf("otel: OTLP %s exporter for %s: %w", ep.protocol, e.target, err)
		}
	}
	e.exportCtx, e.cancelExport = context.WithCancel(context.WithoutCancel(ctx))
	go e.run()
	if e.logs != nil {
		go e.logLoop()
	} else {
		close(e.logDone)
	}
	if p != nil {
		if err := p.AddSink(e); err != nil {
			_ = e.Shutdown(ctx)
			return nil, fmt.Errorf("otel: %w", err)
		}
	}
	return e, nil
}

func newOTLP(ctx context.Context, cfg Config, ep endpoint) (sdktrace.SpanExporter, error) {
	retry := struct {
		enabled               bool
		initial, max, elapsed time.Duration
	}{cfg.RetryTime > 0, 50 * time.Millisecond, time.Second, cfg.RetryTime}
	switch ep.protocol {
	case ProtocolGRPC:
		o := []otlptracegrpc.Option{
			otlptracegrpc.WithTimeout(cfg.ExportTimeout),
			// BatchSize bounds a request (about 400 bytes a span, at most
			// a few KiB with many links); the exporter's own size check
			// would encode-size every request a second time, a sixth of
			// this exporter's CPU.
			otlptracegrpc.WithMaxRequestSize(0),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: retry.enabled, InitialInterval: retry.initial, MaxInterval: retry.max, MaxElapsedTime: retry.elapsed}),
		}
		switch {
		case ep.url != "":
			o = append(o, otlptracegrpc.WithEndpointURL(ep.url))
		case ep.hostPort != "":
			o = append(o, otlptracegrpc.WithEndpoint(ep.hostPort))
			if ep.insecure {
				o = append(o, otlptracegrpc.WithInsecure())
			}
		}
		if len(cfg.Headers) > 0 {
			o = append(o, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, o...)
	default:
		o := []otlptracehttp.Option{
			otlptracehttp.WithTimeout(cfg.ExportTimeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: retry.enabled, InitialInterval: retry.initial, MaxInterval: retry.max, MaxElapsedTime: retry.elapsed}),
		}
		switch {
		case ep.url != "":
			o = append(o, otlptracehttp.WithEndpointURL(ep.url))
		case ep.hostPort != "":
			o = append(o, otlptracehttp.WithEndpoint(ep.hostPort))
			if ep.insecure {
				o = append(o, otlptracehttp.WithInsecure())
			}
		}
		if len(cfg.Headers) > 0 {
			o = append(o, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, o...)
	}
}

// baseResource is what every rank's resource shares. Later sources win:
// the default service name, host and process, OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME, then the Config.
func baseResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	explicit := append([]attribute.KeyValue{KeyRunID.String(cfg.RunID)}, cfg.ResourceAttributes...)
	if cfg.ServiceName != "" {
		explicit = append(explicit, attribute.String("service.name", cfg.ServiceName))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithFromEnv(),
		resource.WithAttributes(explicit...),
	)
	if err != nil {
		return nil, fmt.Errorf("otel: %w: resource (check OTEL_RESOURCE_ATTRIBUTES): %w", ErrInvalidConfig, err)
	}
	return utf8Resource(res), nil
}

// utf8Resource is res with its keys and string values made valid UTF-8.
// The resource travels with every request, and one bad string fails to
// encode every request: a run id named after a directory (profile-run)
// need not be UTF-8, nor OTEL_RESOURCE_ATTRIBUTES once percent-decoded.
func utf8Resource(res *resource.Resource) *resource.Resource {
	attrs := res.Attributes()
	changed := false
	for i, kv := range attrs {
		k := utf8Text(string(kv.Key))
		if kv.Value.Type() == attribute.STRING {
			if v := kv.Value.AsString(); k != string(kv.Key) || !utf8.ValidString(v) {
				attrs[i], changed = attribute.String(k, utf8Text(v)), true
			}
		} else if k != string(kv.Key) {
			attrs[i], changed = attribute.KeyValue{Key: attribute.Key(k), Value: kv.Value}, true
		}
	}
	if !changed {
		return res
	}
	return resource.NewWithAttributes(res.SchemaURL(), attrs...)
}

func randomRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RunID returns the run id the trace and span ids derive from.
func (e *Exporter) RunID() string { return e.cfg.RunID }

// Protocol returns the OTLP protocol in use, or "" with WithSpanExporter.
func (e *Exporter) Protocol() string { return e.protocol }

// Endpoint returns where spans go, as the run summary should name it: the
// configured endpoint, the one the environment names, or the protocol's
// default; "" with WithSpanExporter.
func (e *Exporter) Endpoint() string { return e.target }

// Consume queues a batch of records (profiler.Sink). It copies them, never
// blocks and never calls back into the profiler; records that do not fit
// in the queue, or that arrive after Shutdown, are dropped and counted.
// Under the tail policy (Config.KeepSlowest) the records of a step the
// ratio sampler leaves out are held until the step has ended on every
// rank, and then queued or left out with the whole step.
func (e *Exporter) Consume(batch []profiler.Record) {
	if len(batch) == 0 {
		return
	}
	if e.cfg.Cycles != nil {
		batch = e.numberCycles(batch)
	}
	if e.tail != nil {
		e.consumeTail(batch)
		return
	}
	all := len(batch)
	unsampled := 0
	if e.sampler.bound != 1<<63 {
		batch, unsampled = e.sample(batch)
	}
	n := 0
	for i := range batch {
		n += spansOf(&batch[i])
	}
	e.mu.Lock()
	e.stats.Records += uint64(all)
	e.stats.Spans += uint64(n + unsampled)
	e.stats.Unsampled += uint64(unsampled)
	wake := e.enqueueLocked(batch)
	e.mu.Unlock()
	if wake {
		e.wakeUp()
	}
}

// enqueueLocked queues the records of kept steps, as many as fit (the
// oldest, in order), counting their spans as sampled and the rest as
// dropped; under e.mu. It reports whether the export goroutine has work:
// records queued, or a first overflow to log (never logged here, on the
// caller's goroutine and under the lock).
func (e *Exporter) enqueueLocked(batch []profiler.Record) bool {
	if len(batch) == 0 {
		return false
	}
	n := 0
	for i := range batch {
		n += spansOf(&batch[i])
	}
	e.stats.Sampled += uint64(n)
	if e.finished {
		e.stats.Dropped += uint64(n)
		return false
	}
	took, spans := len(batch), n
	if room := e.cfg.QueueSize - e.held; spans > room {
		// Keep a prefix that fits: the oldest records, in order.
		took, spans = 0, 0
		for i := range batch {
			k := spansOf(&batch[i])
			if spans+k > room {
				break
			}
			took, spans = i+1, spans+k
		}
	}
	e.queue = append(e.queue, batch[:took]...)
	e.held += spans
	e.stats.Queued += uint64(spans)
	e.stats.Dropped += uint64(n - spans)
	first := spans < n && !e.overflowed
	if spans < n {
		e.overflowed = true
	}
	return took > 0 || first
}

// enqueueStepsLocked queues the analysis spans of a kept step, as many as
// fit; under e.mu. It reports whether it queued any.
func (e *Exporter) enqueueStepsLocked(q []analysisSpan) bool {
	n := len(q)
	if n == 0 {
		return false
	}
	e.stats.Sampled += uint64(n)
	took := n
	if e.finished {
		took = 0
	} else if room := e.cfg.QueueSize - e.held; took > room {
		took = max(room, 0)
	}
	e.steps = append(e.steps, q[:took]...)
	e.held += took
	e.stats.Queued += uint64(took)
	e.stats.Dropped += uint64(n - took)
	return took > 0
}

// wakeUp tells the export goroutine there is work queued.
func (e *Exporter) wakeUp() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// sample returns a copy of the records of batch whose step the sampler
// keeps, and the number of spans it leaves out.
func (e *Exporter) sample(batch []profiler.Record) ([]profiler.Record, int) {
	var kept []profiler.Record
	unsampled := 0
	last, lastKept := int32(0), false
	for i := range batch {
		r := &batch[i]
		if i == 0 || r.Step != last {
			last, lastKept = r.Step, e.sampler.sampled(e.build.ids.traceID(r.Step))
		}
		if !lastKept {
			unsampled += spansOf(r)
		} else if kept = append(kept, *r); cap(kept) == 1 {
			kept = slices.Grow(kept, len(batch)-i-1)
		}
	}
	return kept, unsampled
}

// run is the export goroutine: it builds spans and hands each request to
// one of Config.Concurrency senders.
func (e *Exporter) run() {
	defer close(e.done)
	for {
		select {
		case <-e.wake:
			e.drain(false)
		case ack := <-e.flushes:
			e.drain(true)
			close(ack)
		case <-e.stop:
			e.drain(false)
			e.mu.Lock()
			if e.tail != nil {
				e.advanceTail(true) // decide every step still open
			}
			e.finished = true // from now on Consume drops
			e.mu.Unlock()
			e.drain(true)
			return
		}
	}
}

// drain builds and sends everything queued, in requests of at most
// BatchSize spans, at most Concurrency at once; with wait it returns when
// every request has its outcome. Once the export context is cancelled (a
// Shutdown out of time) what is left is counted as failed unbuilt:
// building a full queue's spans takes long past the deadline, only for
// export to refuse them.
func (e *Exporter) drain(wait bool) {
	e.mu.Lock()
	overflowed := e.overflowed
	e.mu.Unlock()
	if overflowed {
		e.droppedOnce.Do(func() {
			e.logLater(func() {
				e.log.Warn("OTLP span queue full: dropping spans (counted; raise QueueSize or check the endpoint)",
					zap.String("endpoint", e.target), zap.Int("queue_size", e.cfg.QueueSize))
			})
		})
	}
	for {
		e.mu.Lock()
		if len(e.queue) == 0 && len(e.steps) == 0 {
			e.mu.Unlock()
			break
		}
		buf := e.queue
		e.queue, e.spare = e.spare[:0], nil
		steps := e.steps
		e.steps = nil
		e.mu.Unlock()

		for len(steps) > 0 {
			if e.exportCtx.Err() != nil {
				e.abandon(len(steps))
				break
			}
			k := min(len(steps), e.cfg.BatchSize)
			spans := e.build.analysisSpans(steps[:k], make([]sdktrace.ReadOnlySpan, 0, k))
			e.senders <- struct{}{}
			e.inflight.Go(func() {
				defer func() { <-e.senders }()
				e.export(spans)
			})
			steps = steps[k:]
		}

		for recs := buf; len(recs) > 0; {
			if e.exportCtx.Err() != nil {
				n := 0
				for i := range recs {
					n += spansOf(&recs[i])
				}
				e.abandon(n)
				break
			}
			// Split at record boundaries so a record's two spans travel
			// together.
			k, n := 0, 0
			for k < len(recs) && (k == 0 || n+spansOf(&recs[k]) <= e.cfg.BatchSize) {
				n += spansOf(&recs[k])
				k++
			}
			spans := e.build.build(recs[:k], make([]sdktrace.ReadOnlySpan, 0, n))
			e.senders <- struct{}{}
			e.inflight.Go(func() {
				defer func() { <-e.senders }()
				e.export(spans)
			})
			recs = recs[k:]
		}
		clear(buf) // let go of the strings the records hold
		e.mu.Lock()
		e.spare = buf[:0]
		e.mu.Unlock()
	}
	if wait {
		e.inflight.Wait()
	}
}

// stuckGrace is how long Shutdown waits, past its deadline, for requests
// to return once cancelled, and for the span exporter's own Shutdown.
const stuckGrace = 250 * time.Millisecond

// giveUp counts the spans queued or in flight as failed, for good: their
// requests have not returned once cancelled. It returns how many.
func (e *Exporter) giveUp() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := uint64(e.held)
	e.gaveUp = true
	e.held = 0
	e.stats.Failed += n
	e.stats.LastError = errStuck
	return n
}

// errStuck is LastError once Shutdown gave up on requests that did not
// return.
var errStuck = errors.New("spans not sent: the span exporter did not return after its requests were cancelled")

// within runs fn, and waits for it until ctx ends and stuckGrace more;
// then it returns, leaving fn running, with an error saying so.
func within(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(stuckGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("the span exporter's Shutdown did not return within %v of its deadline (%v)", stuckGrace, ctx.Err())
	}
}

// errAbandoned is LastError when spans were abandoned at Shutdown before
// any request had failed.
var errAbandoned = errors.New("spans not sent: the shutdown deadline passed first")

// export sends one request and counts its outcome. Once the export context
// is cancelled (a Shutdown out of time) nothing is sent and the spans
// count as failed.
func (e *Exporter) export(spans []sdktrace.ReadOnlySpan) {
	n := uint64(len(spans))
	var err error
	sent, ok := false, uint64(0)
	if e.exportCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(e.exportCtx, e.cfg.ExportTimeout)
		err = e.spans.ExportSpans(ctx, spans)
		cancel()
		sent, ok = true, n
		if err != nil {
			lost, malformed := rejected(err, n)
			ok = n - min(lost, n)
			switch {
			case malformed:
				// The endpoint answered success with a count no endpoint
				// can mean: the spans count as taken, the answer as an
				// error the user sees.
				err = fmt.Errorf("malformed OTLP partial success (a negative count of rejected spans, counted as none rejected): %w", err)
			case lost == 0:
				// A partial success that rejects nothing is the endpoint's
				// warning (OTLP allows a message alone): every span was
				// taken, and the request did not fail.
				err = nil
			}
		}
	}
	e.mu.Lock()
	if e.gaveUp {
		e.mu.Unlock()
		return
	}
	e.held -= int(n)
	st := &e.stats
	st.Exported += ok
	st.Failed += n - ok
	if sent {
		st.Requests++
	}
	switch {
	case err != nil:
		st.RequestErrors++
		st.LastError = err
	case ok < n && st.LastError == nil:
		st.LastError = errAbandoned
	}
	// Log changes of state, not every request, handed to logLoop under the
	// lock so that the lines keep the order of the changes.
	failing := sent && ok < n
	down, up := failing && !e.failing, sent && !failing && e.failing
	failed := st.Failed
	if sent {
		e.failing = failing
	}
	switch {
	case down:
		e.logLater(func() {
			e.log.Warn("OTLP endpoint is not taking spans; counting them as failed", zap.String("endpoint", e.target), zap.Error(err))
		})
	case up:
		e.logLater(func() {
			e.log.Info("OTLP endpoint is taking spans again", zap.String("endpoint", e.target), zap.Uint64("failed_so_far", failed))
		})
	}
	e.mu.Unlock()
}

// abandon counts n spans that were never sent as failed, as export does
// once the export context is cancelled.
func (e *Exporter) abandon(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gaveUp {
		return
	}
	e.held -= n
	e.stats.Failed += uint64(n)
	if e.stats.LastError == nil {
		e.stats.LastError = errAbandoned
	}
}

// logLater hands a line to logLoop without waiting; when lines are
// already waiting for a slow log as far as logQueue, it is left out.
func (e *Exporter) logLater(line func()) {
	select {
	case e.logs <- line:
	default:
	}
}

// logLoop writes the lines logged, in order; it returns once the export
// goroutine and every request have ended (nothing logs after them) and
// what they logged is written.
func (e *Exporter) logLoop() {
	defer close(e.logDone)
	for {
		select {
		case line := <-e.logs:
			line()
		case <-e.done:
			for {
				select {
				case line := <-e.logs:
					line()
				default:
					return
				}
			}
		}
	}
}

// awaitLogs waits until the lines logged before the call are written, or
// ctx ends.
func (e *Exporter) awaitLogs(ctx context.Context) {
	mark := make(chan struct{})
	select {
	case e.logs <- func() { close(mark) }:
	case <-e.logDone:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-mark:
	case <-e.logDone: // returned before reaching the mark: nothing is left
	case <-ctx.Done():
	}
}

// rejected is how many of n spans an export error stands for. An OTLP
// partial success (the endpoint took the request but rejected some spans)
// reaches us as an error that only says how many were rejected; any other
// error loses the whole request. A partial success counting a negative
// number is malformed: it stands for no span.
func rejected(err error, n uint64) (lost uint64, malformed bool) {
	var leaves []error
	var walk func(error)
	walk = func(err error) {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if inner := u.Unwrap(); inner != nil {
				walk(inner)
				return
			}
			leaves = append(leaves, err)
		default:
			leaves = append(leaves, err)
		}
	}
	walk(err)
	for _, l := range leaves {
		// "OTLP partial success: <message> (<n> spans rejected)"
		msg := l.Error()
		if !strings.HasPrefix(msg, "OTLP partial success: ") || !strings.HasSuffix(msg, " spans rejected)") {
			return n, false
		}
		msg = strings.TrimSuffix(msg, " spans rejected)")
		i := strings.LastIndexByte(msg, '(')
		if i < 0 {
			return n, false
		}
		k, err := strconv.ParseInt(msg[i+1:], 10, 64)
		switch {
		case err != nil:
			return n, false
		case k < 0:
			malformed = true
		default:
			lost += uint64(k)
		}
	}
	return lost, malformed
}

// ForceFlush waits until every span queued before the call has been
// exported or has failed, or ctx ends; then, within ctx, until what the
// exporter logged about them is written.
func (e *Exporter) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case e.flushes <- ack:
	case <-e.done:
		ack = nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", e.op("flush"), ctx.Err())
	}
	if ack != nil {
		select {
		case <-ack:
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", e.op("flush"), ctx.Err())
		}
	}
	e.awaitLogs(ctx)
	return nil
}

// op names an operation in messages, with the endpoint where there is
// one: a run may send to several, and a log line is read far from the
// configuration.
func (e *Exporter) op(name string) string {
	if e.target == "" {
		return "otel: " + name
	}
	return "otel: " + name + " (OTLP " + e.protocol + " to " + e.target + ")"
}

// ErrShutdownDeadline is wrapped by Shutdown's error when its context
// ended before every queued span was exported; those spans count as failed.
var ErrShutdownDeadline = errors.New("spans still queued when the shutdown deadline passed")

// Shutdown exports what is queued, within ctx, then shuts the OTLP
// exporter down. When ctx ends first, the request in flight is cancelled
// and whatever is still queued is counted as failed; Shutdown returns once
// the counts are final. A span exporter that ignores the cancellation (one
// given WithSpanExporter) is waited for stuckGrace (250 ms) more: then
// what it holds counts as failed, and what it answers later is not
// counted. Records consumed afterwards are dropped and counted.
//
// Only the first call does this, and only its ctx can cut the export
// short. A later call, or one made while the first is under way, waits
// for the first and returns its result; when its own ctx ends first, it
// returns that context's error at once and leaves the first to finish.
func (e *Exporter) Shutdown(ctx context.Context) error {
	first := false
	e.stopOnce.Do(func() { first = true })
	if !first {
		return e.awaitShutdown(ctx)
	}
	defer close(e.shutDone)
	e.shutdownErr = e.shutdown(ctx)
	return e.shutdownErr
}

// awaitShutdown is a Shutdown after the first: it waits for the first's
// result until ctx ends, and touches nothing the first is doing.
func (e *Exporter) awaitShutdown(ctx context.Context) error {
	select {
	case <-e.shutDone: // the first's result, even when ctx has ended too
		return e.shutdownErr
	default:
	}
	select {
	case <-e.shutDone:
		return e.shutdownErr
	case <-ctx.Done():
		return fmt.Errorf("%s: the first Shutdown has not finished: %w", e.op("shutdown"), ctx.Err())
	}
}

// shutdown is the first Shutdown's work: it stops the export goroutine,
// waits for it within ctx (cancelling the requests when ctx ends), and
// shuts the span exporter down.
func (e *Exporter) shutdown(ctx context.Context) error {
	failed := e.Stats().Failed
	e.mu.Lock()
	if !e.finished && e.flushCyclesLocked(true) {
		e.wakeUp()
	}
	e.mu.Unlock()
	close(e.stop)
	var err error
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancelExport()
		// Every request watches the cancelled context; a span exporter
		// that does not (one of the caller's, WithSpanExporter) is given
		// up on after stuckGrace.
		t := time.NewTimer(stuckGrace)
		select {
		case <-e.done:
			// Only a deadline that cut spans short is news: an exporter
			// with nothing queued ends as soon as it sees the stop, and a
			// select with both ready picks either.
			if e.Stats().Failed > failed {
				err = fmt.Errorf("%s: %w (%w)", e.op("shutdown"), ErrShutdownDeadline, ctx.Err())
			}
		case <-t.C:
			n := e.giveUp()
			err = fmt.Errorf("%s: %w (%w): the span exporter did not return within %v of its requests' cancellation: the %d spans queued or in flight count as failed", e.op("shutdown"), ErrShutdownDeadline, ctx.Err(), stuckGrace, n)
		}
		t.Stop()
	}
	sctx := ctx
	if ctx.Err() != nil {
		// Still close the connection; the exporter cuts its own waits
		// short with this context.
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 0)
		defer cancel()
	}
	serr := within(sctx, func() error { return e.spans.Shutdown(sctx) })
	if serr != nil && errors.Is(serr, context.DeadlineExceeded) && ctx.Err() != nil {
		serr = nil // already reported above
	}
	if serr != nil {
		serr = fmt.Errorf("%s: %w", e.op("shutdown"), serr)
	}
	e.cancelExport()
	e.awaitLogs(ctx) // within ctx: the counts are final, the log may be stuck
	return errors.Join(err, serr)
}

// Stats counts spans by what became of them. At any time Spans = Sampled +
// Unsampled + Deciding, Sampled = Queued + Dropped and Queued = Exported + Failed +
// Pending, so once Pending is 0
// (after Shutdown) Dropped + Failed is every span that did not reach the
// endpoint. A request whose answer was lost counts as failed even if the
// endpoint kept its spans: Exported is what the endpoint acknowledged.
type Stats struct {
	Records uint64 // records consumed
	Spans   uint64 // spans those records make: one each, two for a device-timed record
	// Sampled are the spans of steps the sampler keeps (Config.Sampler);
	// Unsampled those it leaves out, which are neither queued nor sent.
	Sampled, Unsampled uint64
	// Deciding are the spans held until their step's decision under the
	// tail policy: Spans = Sampled + Unsampled + Deciding.
	Deciding uint64
	// KeptFirst and KeptSlow count the steps the tail policy kept that the
	// ratio sampler left out: among the first steps, or among the slowest.
	// Forced counts steps decided before every rank had ended them: too
	// much was held (Config.QueueSize spans, or 64 steps), or at Shutdown.
	KeptFirst, KeptSlow, Forced uint64
	Queued                      uint64 // spans accepted into the queue
	Dropped                     uint64 // spans refused: the queue was full, or the exporter had shut down
	Exported                    uint64 // spans the endpoint acknowledged
	Failed                      uint64 // spans whose request failed after its retries, or still queued when Shutdown ran out of time
	Pending                     uint64 // spans queued or in flight now

	Requests      uint64 // export requests sent
	RequestErrors uint64 // requests that failed, wholly or partly
	LastError     error  // the most recent request error, nil if none
}

// Undelivered is the number of spans that did not reach the endpoint and
// will not: dropped and failed.
func (s Stats) Undelivered() uint64 { return s.Dropped + s.Failed }

// Stats returns the current counts, consistent with each other; safe from
// any goroutine.
func (e *Exporter) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Pending = uint64(e.held)
	if e.tail != nil {
		s.Deciding = uint64(e.tail.held)
	}
	return s
}
