package otel_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/internal/jaegerquery"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// synth replays the records of a real training run as many times as a
// benchmark needs: copy k shifts steps, record ids, collective sequence
// numbers and times, so every span of every copy is distinct and the
// shape (nesting, device share, collectives) is the trainer's.
type synth struct {
	tmpl   []profiler.Record
	steps  int32
	maxID  uint64
	maxSeq uint64
	span   time.Duration
	spans  int // spans one copy makes
}

var (
	synthOnce sync.Once
	synthRun  *synth
	synthErr  error
)

// trainerRecords is the record stream of a short pipelined, data-parallel
// run of the built-in trainer (4 ranks).
func trainerRecords(b *testing.B) *synth {
	b.Helper()
	synthOnce.Do(func() {
		ctx := context.Background()
		p, err := profiler.New()
		if err != nil {
			synthErr = err
			return
		}
		defer p.Close(ctx)
		cfg := smallRun(2)
		cfg.Profiler = p
		if _, err := pipeline.Train(ctx, cfg); err != nil {
			synthErr = err
			return
		}
		if err := p.Flush(ctx); err != nil {
			synthErr = err
			return
		}
		s := &synth{tmpl: p.Snapshot(), steps: int32(cfg.Steps)}
		for i := range s.tmpl {
			r := &s.tmpl[i]
			s.maxID = max(s.maxID, r.ID)
			s.maxSeq = max(s.maxSeq, r.Collective.Seq)
			s.span = max(s.span, r.HostEnd, r.DeviceEnd)
			s.spans++
			if r.HasDevice {
				s.spans++
			}
		}
		synthRun = s
	})
	if synthErr != nil {
		b.Fatal(synthErr)
	}
	return synthRun
}

// fill writes records i, i+1, … of the endless replay into dst.
func (s *synth) fill(dst []profiler.Record, i int) {
	for j := range dst {
		k, t := (i+j)/len(s.tmpl), (i+j)%len(s.tmpl)
		r := s.tmpl[t]
		off := time.Duration(k) * s.span
		r.ID += uint64(k) * s.maxID
		if r.Parent != 0 {
			r.Parent += uint64(k) * s.maxID
		}
		if r.Step >= 0 {
			r.Step += int32(k) * s.steps
		}
		r.Collective.Seq += uint64(k) * (s.maxSeq + 1)
		r.HostStart, r.HostEnd = r.HostStart+off, r.HostEnd+off
		if r.HasDevice {
			r.DeviceStart, r.DeviceEnd = r.DeviceStart+off, r.DeviceEnd+off
		}
		dst[j] = r
	}
}

// feed consumes n replayed records in batches of 512, the size of a
// collector pass, waiting while the exporter holds more than half its
// queue, so that a sustained rate is measured with nothing dropped.
func feed(exp *otelexp.Exporter, s *synth, n, queue int) {
	buf := make([]profiler.Record, 512)
	for i := 0; i < n; i += len(buf) {
		batch := buf[:min(len(buf), n-i)]
		s.fill(batch, i)
		for exp.Stats().Pending > uint64(queue/2) {
			time.Sleep(50 * time.Microsecond)
		}
		exp.Consume(batch)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConsume: records → spans handed to an exporter that discards
// them, no network; one op is one record of the trainer's mix (about two
// spans). "exporter" is this package (Consume on the caller, span building
// on the export goroutine); "sdk-tracer" builds the same spans through the
// OpenTelemetry SDK's tracer (start and end timestamps, the same
// attributes, a blocking batch processor so nothing is dropped).
func BenchmarkConsume(b *testing.B) {
	s := trainerRecords(b)
	// "exporter" keeps every step; the others sample a tenth of them,
	// with the ratio sampler alone and with the tail policy, which holds
	// the other steps' records until each step has ended on every rank.
	for _, c := range []struct {
		name, sampler string
		tail          int // KeepFirst, KeepSlowest, KeepSlowestMin: -1 off, 0 defaults
	}{{"exporter", "", 0}, {"exporter-ratio-0.1", otelexp.SamplerTraceIDRatio, -1}, {"exporter-ratio-0.1-tail", otelexp.SamplerTraceIDRatio, 0}} {
		b.Run(c.name, func(b *testing.B) {
			const queue = otelexp.DefaultQueueSize
			cfg := otelexp.Config{Epoch: epoch, RunID: "bench", QueueSize: queue,
				Sampler: c.sampler, KeepFirst: c.tail, KeepSlowest: float64(c.tail), KeepSlowestMin: c.tail}
			if c.sampler != "" {
				cfg.SamplerArg = "0.1"
			}
			exp, err := otelexp.New(context.Background(), nil, cfg, otelexp.WithSpanExporter(tracetest.NewNoopExporter()))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			feed(exp, s, b.N, queue)
			if err := exp.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			st := exp.Stats()
			if st.Spans != st.Sampled+st.Unsampled || st.Exported != st.Sampled || st.Undelivered() != 0 {
				b.Fatalf("stats %+v", st)
			}
			b.ReportMetric(float64(st.Spans)/elapsed.Seconds(), "spans/s")
			b.ReportMetric(float64(st.Exported)/float64(st.Spans), "kept")
		})
	}
	b.Run("sdk-tracer", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter(), sdktrace.WithBlocking(), sdktrace.WithMaxExportBatchSize(otelexp.DefaultBatchSize)))
		tracer := tp.Tracer("bench")
		buf := make([]profiler.Record, 512)
		attrs := make([]attribute.KeyValue, 0, 32)
		spans := 0
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i += len(buf) {
			batch := buf[:min(len(buf), b.N-i)]
			s.fill(batch, i)
			for j := range batch {
				r := &batch[j]
				attrs = append(attrs[:0], attribute.Int("training.rank", r.Rank), attribute.Int64("training.range_id", int64(r.ID)),
					attribute.String("training.kind", r.Kind.String()), attribute.Int64("training.step", int64(r.Step)),
					attribute.Int64("training.stage", int64(r.Stage)), attribute.String("training.phase", r.Phase.String()))
				if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
					attrs = append(attrs, attribute.String("ccl.op", r.Collective.Op), attribute.Int64("ccl.bytes", r.Collective.Bytes),
						attribute.String("ccl.group", r.Collective.Group), attribute.Int64("ccl.seq", int64(r.Collective.Seq)),
						attribute.Float64("ccl.busbw", r.BusBandwidth))
				}
				_, sp := tracer.Start(context.Background(), r.Name, trace.WithTimestamp(epoch.Add(r.HostStart)), trace.WithAttributes(attrs...))
				sp.End(trace.WithTimestamp(epoch.Add(r.HostEnd)))
				spans++
				if r.HasDevice {
					_, sp := tracer.Start(context.Background(), r.Name+otelexp.DeviceSuffix, trace.WithTimestamp(epoch.Add(r.DeviceStart)), trace.WithAttributes(attrs...))
					sp.End(trace.WithTimestamp(epoch.Add(r.DeviceEnd)))
					spans++
				}
			}
		}
		if err := tp.ForceFlush(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(spans)/elapsed.Seconds(), "spans/s")
		_ = tp.Shutdown(context.Background())
	})
}

// BenchmarkOTLPLoopback: records → spans → OTLP requests to an in-process
// receiver that decodes and counts them: the exporter side's ceiling
// without a real backend (both ends share the machine's cores).
func BenchmarkOTLPLoopback(b *testing.B) {
	s := trainerRecords(b)
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		b.Run(strings.ReplaceAll(protocol, "/", "-"), func(b *testing.B) {
			c := newCollector()
			var addr string
			if protocol == otelexp.ProtocolGRPC {
				addr, _ = serveGRPC(b, c)
			} else {
				addr, _ = serveHTTP(b, c)
			}
			runDelivery(b, s, otelexp.Config{Protocol: protocol, Endpoint: "http://" + addr}, func(want uint64) {
				if got := uint64(c.spans.Load()); got != want {
					b.Fatalf("receiver got %d spans, want %d", got, want)
				}
			})
		})
	}
}

// BenchmarkJaeger: records → spans delivered to a real Jaeger v2 (see
// scripts/jaeger.sh), sustained, none lost: after the exporter reports
// every span acknowledged, Jaeger's own counters must show every span
// accepted by its OTLP receiver and written by its storage exporter, and
// sampled traces read back through the query API must be complete.
// Reports spans/s and the CPU each side spent per span.
func BenchmarkJaeger(b *testing.B) {
	query, grpcEndpoint, httpEndpoint := jaegerEnv(b)
	metrics := os.Getenv("TRAINSCOPE_JAEGER_METRICS")
	if metrics == "" {
		u, err := url.Parse(query)
		if err != nil {
			b.Fatal(err)
		}
		metrics = "http://" + u.Hostname() + ":8888/metrics"
	}
	s := trainerRecords(b)
	for _, c := range []struct{ protocol, endpoint, transport string }{
		{otelexp.ProtocolGRPC, grpcEndpoint, "grpc"},
		{otelexp.ProtocolHTTP, httpEndpoint, "http"},
	} {
		b.Run(c.transport, func(b *testing.B) {
			service := fmt.Sprintf("trainscope-bench-%s-%d", c.transport, time.Now().UnixNano())
			before, err := jaegerCounters(metrics, c.transport)
			if err != nil {
				b.Fatal(err)
			}
			since := time.Now()
			runDelivery(b, s, otelexp.Config{Protocol: c.protocol, Endpoint: c.endpoint, Insecure: true, ServiceName: service, RunID: service},
				func(want uint64) {
					after, err := awaitJaegerCounters(metrics, c.transport, before, want)
					if err != nil {
						b.Fatal(err)
					}
					d := after.sub(before)
					if d.accepted != float64(want) || d.refused != 0 || d.sendFailed != 0 {
						b.Fatalf("Jaeger: %+v, want %d spans accepted and none refused or failed", d, want)
					}
					if b.N > 0 {
						b.ReportMetric(d.cpu*1e6/float64(want), "jaeger-cpu-µs/span")
					}
					checkSampledTraces(b, query, service, since, s, int(b.N))
				})
		})
	}
}

// runDelivery exports b.N replayed records through an exporter made from
// cfg, waits until every span is acknowledged, reports spans/s and this
// process's CPU per span, then calls check with the span count.
func runDelivery(b *testing.B, s *synth, cfg otelexp.Config, check func(spans uint64)) {
	b.Helper()
	cfg.Epoch = time.Now() // so that Jaeger's search by time finds the spans
	if cfg.RunID == "" {
		cfg.RunID = fmt.Sprintf("bench-%d", time.Now().UnixNano())
	}
	const queue = otelexp.DefaultQueueSize
	cfg.QueueSize = queue
	// TRAINSCOPE_BENCH_CONCURRENCY tries other numbers of senders.
	if v, err := strconv.Atoi(os.Getenv("TRAINSCOPE_BENCH_CONCURRENCY")); err == nil {
		cfg.Concurrency = v
	}
	exp, err := otelexp.New(context.Background(), nil, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	feed(exp, s, b.N, queue)
	if err := exp.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exp.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	st := exp.Stats()
	if st.Exported != st.Spans || st.Undelivered() != 0 || st.Records != uint64(b.N) {
		b.Fatalf("exporter stats %+v, want all %d records' spans exported", st, b.N)
	}
	b.ReportMetric(float64(st.Exported)/elapsed.Seconds(), "spans/s")
	if st.Exported > 0 {
		b.ReportMetric(cpu.Seconds()*1e6/float64(st.Exported), "exporter-cpu-µs/span")
	}
	check(st.Exported)
}

// jaegerCount is a snapshot of Jaeger's own counters for one OTLP
// transport.
type jaegerCount struct {
	accepted, refused, sent, sendFailed, cpu float64
}

func (a jaegerCount) sub(b jaegerCount) jaegerCount {
	return jaegerCount{a.accepted - b.accepted, a.refused - b.refused, a.sent - b.sent, a.sendFailed - b.sendFailed, a.cpu - b.cpu}
}

func jaegerCounters(metricsURL, transport string) (jaegerCount, error) {
	resp, err := http.Get(metricsURL)
	if err != nil {
		return jaegerCount{}, err
	}
	defer resp.Body.Close()
	var c jaegerCount
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		ours := strings.Contains(line, `receiver="otlp"`) && strings.Contains(line, `transport="`+transport+`"`)
		store := strings.Contains(line, `exporter="jaeger_storage_exporter"`)
		switch {
		case strings.HasPrefix(line, "otelcol_receiver_accepted_spans_total{") && ours:
			c.accepted += v
		case strings.HasPrefix(line, "otelcol_receiver_refused_spans_total{") && ours,
			strings.HasPrefix(line, "otelcol_receiver_failed_spans_total{") && ours:
			c.refused += v
		case strings.HasPrefix(line, "otelcol_exporter_sent_spans_total{") && store:
			c.sent += v
		case strings.HasPrefix(line, "otelcol_exporter_send_failed_spans_total{") && store:
			c.sendFailed += v
		case strings.HasPrefix(line, "otelcol_process_cpu_seconds_total"):
			c.cpu = v
		}
	}
	return c, sc.Err()
}

// awaitJaegerCounters waits until Jaeger's storage exporter has written at
// least want more spans than before (its batch processor holds them
// briefly).
func awaitJaegerCounters(metricsURL, transport string, before jaegerCount, want uint64) (jaegerCount, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := jaegerCounters(metricsURL, transport)
		if err != nil {
			return c, err
		}
		if c.sent-before.sent >= float64(want) {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("jaeger stored %.0f of %d spans within 60s: %+v", c.sent-before.sent, want, c.sub(before))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkSampledTraces reads a few of the run's traces back from Jaeger and
// checks each holds exactly the spans its step's records make.
func checkSampledTraces(b *testing.B, query, service string, since time.Time, s *synth, n int) {
	b.Helper()
	perStep := map[int64]int{}
	batch := make([]profiler.Record, 1)
	for i := range n {
		s.fill(batch, i)
		perStep[int64(batch[0].Step)] += 1
		if batch[0].HasDevice {
			perStep[int64(batch[0].Step)]++
		}
	}
	traces, err := jaegerquery.Traces(context.Background(), query, service, since, 5)
	if err != nil {
		b.Fatal(err)
	}
	if len(traces) == 0 {
		b.Fatalf("Jaeger returned no trace of %s", service)
	}
	for _, t := range traces {
		step := int64(-1)
		for _, sp := range t.Spans {
			if v, ok := sp.Int("training.step"); ok {
				step = v
			}
			if step >= 0 {
				break // device spans carry no step; their parents do
			}
		}
		if len(t.Spans) != perStep[step] {
			b.Errorf("trace %s (step %d) has %d spans in Jaeger, want %d", t.TraceID, step, len(t.Spans), perStep[step])
		}
	}
}

// BenchmarkTrainStep: one step of profile-run's default training job
// (ns/op is per step) with the profiler only, with this exporter building
// spans for a discarding exporter, and, when a Jaeger is configured,
// sending them to it over OTLP/gRPC. The exporter's work runs beside
// training on the same cores.
func BenchmarkTrainStep(b *testing.B) {
	grpcEndpoint := os.Getenv("TRAINSCOPE_OTLP_GRPC")
	cases := []struct {
		name string
		sink func(p *profiler.Profiler) (*otelexp.Exporter, error)
	}{
		{name: "profiling-only"},
		{name: "otel-discard", sink: func(p *profiler.Profiler) (*otelexp.Exporter, error) {
			return otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch()}, otelexp.WithSpanExporter(tracetest.NewNoopExporter()))
		}},
		{name: "otel-jaeger-grpc", sink: func(p *profiler.Profiler) (*otelexp.Exporter, error) {
			if grpcEndpoint == "" {
				return nil, nil
			}
			return otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch(), Protocol: otelexp.ProtocolGRPC, Endpoint: grpcEndpoint,
				ServiceName: fmt.Sprintf("trainscope-bench-train-%d", time.Now().UnixNano())})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			p, err := profiler.New()
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			var exp *otelexp.Exporter
			if c.sink != nil {
				if exp, err = c.sink(p); err != nil {
					b.Fatal(err)
				}
				if exp == nil {
					b.Skip("no Jaeger: set TRAINSCOPE_OTLP_GRPC (scripts/jaeger.sh start)")
				}
			}
			cfg := pipeline.DefaultConfig() // profile-run's default job
			cfg.Profiler = p
			tr, err := pipeline.NewTrainer(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if exp == nil {
				return
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := exp.Shutdown(sctx); err != nil {
				b.Fatal(err)
			}
			st := exp.Stats()
			if st.Undelivered() != 0 {
				b.Errorf("%d spans undelivered: %+v", st.Undelivered(), st)
			}
			b.ReportMetric(float64(st.Exported)/float64(b.N), "spans/op")
		})
	}
}
