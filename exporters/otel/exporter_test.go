package otel_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
)

var epoch = time.Unix(1_700_000_000, 0)

// clearOTLPEnv unsets the variables the exporter and the OTLP exporters
// read, so the machine's environment cannot steer a test.
func clearOTLPEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
		"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		otelexp.EnvKeepFirst, otelexp.EnvKeepSlowest, otelexp.EnvKeepSlowestMin,
	} {
		t.Setenv(k, "")
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		cfg  otelexp.Config
		want string // in the message
	}{
		{name: "no epoch", cfg: otelexp.Config{}, want: "Epoch is zero"},
		{name: "http/json", cfg: otelexp.Config{Epoch: epoch, Protocol: "http/json"}, want: `"http/json" is not supported`},
		{name: "unknown protocol", cfg: otelexp.Config{Epoch: epoch, Protocol: "thrift"}, want: `unknown protocol "thrift"`},
		{name: "env protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grcp"}, cfg: otelexp.Config{Epoch: epoch}, want: `unknown protocol "grcp"`},
		{name: "no port", cfg: otelexp.Config{Epoch: epoch, Endpoint: "localhost"}, want: `"localhost" is neither host:port`},
		{name: "bad scheme", cfg: otelexp.Config{Epoch: epoch, Endpoint: "ftp://h:1"}, want: `scheme "ftp"`},
		{name: "no host", cfg: otelexp.Config{Epoch: epoch, Endpoint: "http://"}, want: "no host"},
		{name: "env endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"}, cfg: otelexp.Config{Epoch: epoch},
			want: `OTEL_EXPORTER_OTLP_ENDPOINT="localhost:4317"`},
		{name: "negative queue", cfg: otelexp.Config{Epoch: epoch, QueueSize: -1}, want: "QueueSize=-1"},
		{name: "negative timeout", cfg: otelexp.Config{Epoch: epoch, ExportTimeout: -time.Second}, want: "ExportTimeout=-1s"},
		{name: "env timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, cfg: otelexp.Config{Epoch: epoch},
			want: `OTEL_EXPORTER_OTLP_TIMEOUT="10s": want a whole number of milliseconds`},
		{name: "env headers", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x-team=ml,authorization"}, cfg: otelexp.Config{Epoch: epoch},
			want: `OTEL_EXPORTER_OTLP_HEADERS: entry "authorization" is not key=value`},
		{name: "env header value", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=m%zz"}, cfg: otelexp.Config{Epoch: epoch},
			want: `OTEL_EXPORTER_OTLP_TRACES_HEADERS: value of "x-team"`},
		{name: "env resource", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "no-equals-sign"}, cfg: otelexp.Config{Epoch: epoch},
			want: "OTEL_RESOURCE_ATTRIBUTES"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearOTLPEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			exp, err := otelexp.New(context.Background(), nil, c.cfg)
			if err == nil {
				_ = exp.Shutdown(context.Background())
				t.Fatalf("New accepted %+v", c.cfg)
			}
			if !errors.Is(err, otelexp.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q: want one wrapping ErrInvalidConfig and saying %q", err, c.want)
			}
		})
	}
}

// send makes an exporter with cfg, exports n records through it and shuts
// it down.
func send(t *testing.T, cfg otelexp.Config, n int) (*otelexp.Exporter, int) {
	t.Helper()
	cfg.Epoch = epoch
	exp, err := otelexp.New(context.Background(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(n)
	exp.Consume(recs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return exp, spans
}

// The standard variables choose the protocol, the endpoint and headers;
// the traces-specific ones win over the general ones, and Config over both.
func TestEnvironment(t *testing.T) {
	t.Run("grpc from OTEL_EXPORTER_OTLP_*", func(t *testing.T) {
		clearOTLPEnv(t)
		c := newCollector()
		addr, _ := serveGRPC(t, c)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
		t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml")
		exp, spans := send(t, otelexp.Config{}, 10)
		if exp.Endpoint() != "http://"+addr {
			t.Errorf("Endpoint() = %q", exp.Endpoint())
		}
		if exp.Protocol() != otelexp.ProtocolGRPC || c.spans.Load() != int64(spans) || c.header("x-team") != "ml" {
			t.Errorf("protocol %q, collector got %d spans (want %d), x-team %q", exp.Protocol(), c.spans.Load(), spans, c.header("x-team"))
		}
	})
	t.Run("http from OTEL_EXPORTER_OTLP_TRACES_*", func(t *testing.T) {
		clearOTLPEnv(t)
		c := newCollector()
		addr, _ := serveHTTP(t, c)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+deadAddr(t))
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+addr+"/custom/traces")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=ml")
		exp, spans := send(t, otelexp.Config{}, 10)
		c.mu.Lock()
		path := c.path
		c.mu.Unlock()
		if exp.Endpoint() != "http://"+addr+"/custom/traces" {
			t.Errorf("Endpoint() = %q", exp.Endpoint())
		}
		if exp.Protocol() != otelexp.ProtocolHTTP || c.spans.Load() != int64(spans) || path != "/custom/traces" || c.header("X-Team") != "ml" {
			t.Errorf("protocol %q, collector got %d spans (want %d) at %q, X-Team %q", exp.Protocol(), c.spans.Load(), spans, path, c.header("X-Team"))
		}
	})
	t.Run("http is the default protocol", func(t *testing.T) {
		clearOTLPEnv(t)
		c := newCollector()
		addr, _ := serveHTTP(t, c)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
		exp, spans := send(t, otelexp.Config{}, 4)
		c.mu.Lock()
		path := c.path
		c.mu.Unlock()
		if exp.Endpoint() != "http://"+addr+"/v1/traces" || otelexp.EnvEndpoint() != "http://"+addr {
			t.Errorf("Endpoint() = %q, EnvEndpoint() = %q", exp.Endpoint(), otelexp.EnvEndpoint())
		}
		if exp.Protocol() != otelexp.ProtocolHTTP || c.spans.Load() != int64(spans) || path != "/v1/traces" {
			t.Errorf("protocol %q, collector got %d spans (want %d) at %q", exp.Protocol(), c.spans.Load(), spans, path)
		}
	})
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run("config endpoint wins/"+protocol, func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			addr, _ := serveProtocol(t, protocol, c)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+deadAddr(t))
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+deadAddr(t))
			// The Config's headers add to the environment's and replace
			// those of the same name.
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml%2Cinfra,x-run=env")
			for _, ep := range []string{addr, "http://" + addr} {
				c.spans.Store(0)
				exp, spans := send(t, otelexp.Config{Protocol: protocol, Endpoint: ep, Insecure: true, Headers: map[string]string{"x-run": "7"}}, 5)
				if st := exp.Stats(); c.spans.Load() != int64(spans) || st.Exported != uint64(spans) {
					t.Errorf("endpoint %s: collector got %d spans, stats %+v; want %d", ep, c.spans.Load(), st, spans)
				}
				wantTarget := ep
				if protocol == otelexp.ProtocolHTTP && strings.HasPrefix(ep, "http://") {
					wantTarget += "/v1/traces"
				}
				if exp.Endpoint() != wantTarget {
					t.Errorf("Endpoint() = %q, want %q", exp.Endpoint(), wantTarget)
				}
				if h := c.header("x-run") + c.header("X-Run"); h != "7" {
					t.Errorf("endpoint %s: header x-run %q, want the Config's 7", ep, h)
				}
				if h := c.header("x-team") + c.header("X-Team"); h != "ml,infra" {
					t.Errorf("endpoint %s: header x-team %q, want the environment's ml,infra", ep, h)
				}
			}
		})
	}
}

// OTEL_EXPORTER_OTLP_TIMEOUT bounds each request when the Config sets no
// timeout: against a collector that accepts the connection and never
// answers, 300 ms, where the default would wait 10 s.
func TestEnvironmentTimeout(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			l := listen(t)
			var held []net.Conn // open, never answered
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					held = append(held, c)
				}
			}()
			defer func() {
				_ = l.Close()
				<-done
				for _, c := range held {
					_ = c.Close()
				}
			}()
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
			start := time.Now()
			exp, spans := send(t, otelexp.Config{Protocol: protocol, Endpoint: l.Addr().String(), Insecure: true, RetryTime: -1}, 3)
			took := time.Since(start)
			if st := exp.Stats(); st.Exported != 0 || st.Undelivered() != uint64(spans) {
				t.Errorf("stats %+v; want all %d spans undelivered", st, spans)
			}
			if took > 5*time.Second {
				t.Errorf("the export gave up after %v; OTEL_EXPORTER_OTLP_TIMEOUT=300 asks for 300 ms (the default is 10 s)", took)
			}
		})
	}
}

// A partial success is counted: the rejected spans failed, the rest were
// exported.
func TestPartialSuccess(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			c.rejected = 2
			addr, _ := serveProtocol(t, protocol, c)
			exp, spans := send(t, otelexp.Config{Protocol: protocol, Endpoint: "http://" + addr}, 30)
			st := exp.Stats()
			reqs := uint64(c.requests.Load())
			if reqs == 0 || st.Failed != 2*reqs || st.Exported != uint64(spans)-2*reqs || st.RequestErrors != reqs || st.LastError == nil {
				t.Errorf("%d requests rejecting 2 spans each; stats %+v", reqs, st)
			}
		})
	}
}

// TestMalformedPartialSuccess: an endpoint whose partial success counts
// -3 rejected spans took every span it was sent; each such answer is a
// request error naming the malformed count, and the log does not say
// the endpoint is not taking spans. Before, every span of those requests
// counted as failed.
func TestMalformedPartialSuccess(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, protocol string) {
		c := newCollector()
		c.rejected = -3
		st, logs := sendSixteen(t, protocol, c)
		reqs := uint64(c.requests.Load())
		if c.spans.Load() != 16 || st.Exported != 16 || st.Failed != 0 || st.Requests != reqs || st.RequestErrors != reqs ||
			st.LastError == nil || !strings.Contains(st.LastError.Error(), "malformed OTLP partial success") {
			t.Errorf("collector took %d of 16 spans in %d requests, each answered with -3 rejected; stats %+v", c.spans.Load(), reqs, st)
		}
		if n := logs.FilterMessageSnippet("not taking spans").Len(); n != 0 {
			t.Errorf("the log says the endpoint is not taking spans: %v", logs.All())
		}
	})
}

// TestPartialSuccessWarning: OTLP lets an endpoint send a message in a
// partial success that rejects nothing (a warning); every span was taken.
// Before, each such request counted as a request error and set LastError,
// and the log said the endpoint was not taking spans.
func TestPartialSuccessWarning(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, protocol string) {
		c := newCollector()
		c.warning = "attribute training.tag is deprecated"
		st, logs := sendSixteen(t, protocol, c)
		if c.spans.Load() != 16 || st.Exported != 16 || st.Failed != 0 || st.Requests < 4 || st.RequestErrors != 0 || st.LastError != nil {
			t.Errorf("collector took %d of 16 spans, warning only; stats %+v", c.spans.Load(), st)
		}
		if n := logs.FilterMessageSnippet("not taking spans").Len(); n != 0 {
			t.Errorf("the log says the endpoint is not taking spans: %v", logs.All())
		}
	})
}

// forEachProtocol runs test as a subtest for gRPC and for HTTP, the
// OTLP environment variables cleared.
func forEachProtocol(t *testing.T, test func(t *testing.T, protocol string)) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			test(t, protocol)
		})
	}
}

// sendSixteen exports 12 records, every third device-timed (16 spans),
// to c over protocol in requests of at most 4 spans, shuts the exporter
// down and returns its stats and what it logged.
func sendSixteen(t *testing.T, protocol string, c *collector) (otelexp.Stats, *observer.ObservedLogs) {
	t.Helper()
	addr, _ := serveProtocol(t, protocol, c)
	core, logs := observer.New(zapcore.InfoLevel)
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Protocol: protocol, Endpoint: "http://" + addr, Epoch: epoch, BatchSize: 4},
		otelexp.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := records(12)
	exp.Consume(recs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return exp.Stats(), logs
}

func TestQueueFullDropsWithoutBlocking(t *testing.T) {
	s := &stub{gate: make(chan struct{})}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, QueueSize: 10}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(30)
	start := time.Now()
	for i := 0; i < len(recs); i += 6 {
		exp.Consume(recs[i : i+6])
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Consume took %v with the exporter blocked", d)
	}
	st := exp.Stats()
	if st.Queued > 10 || st.Queued+st.Dropped != uint64(spans) || st.Dropped == 0 || st.Spans != uint64(spans) || st.Records != 30 {
		t.Errorf("stats %+v with a queue of 10 spans and %d spans offered", st, spans)
	}
	close(s.gate)
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _, shutdowns := s.got()
	end := exp.Stats()
	if end.Exported != st.Queued || uint64(len(got)) != st.Queued || end.Failed != 0 || end.Pending != 0 || end.Dropped != st.Dropped || shutdowns != 1 {
		t.Errorf("after shutdown: stats %+v, %d spans exported, %d shutdowns; before: %+v", end, len(got), shutdowns, st)
	}
}

func TestExportErrorsCounted(t *testing.T) {
	boom := errors.New("boom")
	s := &stub{err: boom}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 8}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(20)
	exp.Consume(recs)
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := exp.Stats()
	if st.Failed != uint64(spans) || st.Exported != 0 || st.Undelivered() != uint64(spans) || !errors.Is(st.LastError, boom) || st.RequestErrors != st.Requests || st.Requests < 4 {
		t.Errorf("stats %+v, want all %d spans failed in batches of at most 8", st, spans)
	}
}

func TestBatchesKeepRecordsWhole(t *testing.T) {
	s := &stub{}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 5}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(40)
	exp.Consume(recs)
	if err := exp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, batches, _ := s.got()
	if len(got) != spans {
		t.Fatalf("ForceFlush returned with %d of %d spans exported", len(got), spans)
	}
	i := 0
	for _, n := range batches {
		if n > 5 {
			t.Errorf("a request of %d spans, BatchSize 5", n)
		}
		// A device span follows its host span in the same request.
		last := got[i+n-1]
		if !strings.HasSuffix(last.Name(), otelexp.DeviceSuffix) && i+n < len(got) && strings.HasSuffix(got[i+n].Name(), otelexp.DeviceSuffix) {
			t.Errorf("a record's two spans split across requests")
		}
		i += n
	}
	_ = exp.Shutdown(context.Background())
}

func TestShutdownDeadline(t *testing.T) {
	s := &stub{gate: make(chan struct{})} // never opens: an endpoint that hangs
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, BatchSize: 4, ExportTimeout: time.Hour}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(20)
	exp.Consume(recs)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = exp.Shutdown(ctx)
	if d := time.Since(start); d > 700*time.Millisecond {
		t.Errorf("Shutdown with a 200ms deadline took %v", d)
	}
	if !errors.Is(err, otelexp.ErrShutdownDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want ErrShutdownDeadline and DeadlineExceeded", err)
	}
	st := exp.Stats()
	if st.Failed != uint64(spans) || st.Pending != 0 || st.Exported != 0 {
		t.Errorf("stats %+v, want all %d spans failed and none pending", st, spans)
	}
	// Idempotent: the same answer at once; later records are dropped.
	start = time.Now()
	if err2 := exp.Shutdown(context.Background()); err2 == nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("second Shutdown: %v after %v", err2, time.Since(start))
	}
	exp.Consume(recs[:3])
	if st2 := exp.Stats(); st2.Dropped != 4 || st2.Records != 23 {
		t.Errorf("Consume after Shutdown: %+v, want 4 spans dropped", st2)
	}
	if _, _, shutdowns := s.got(); shutdowns != 1 {
		t.Errorf("the span exporter was shut down %d times", shutdowns)
	}
}

// Many goroutines consume while another flushes and shuts down: every span
// is counted once, whatever the interleaving.
func TestConcurrentConsumeAndShutdown(t *testing.T) {
	for range 20 {
		s := &stub{}
		exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch, QueueSize: 64, BatchSize: 16}, otelexp.WithSpanExporter(s))
		if err != nil {
			t.Fatal(err)
		}
		recs, spans := records(12)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 50 {
					exp.Consume(recs)
				}
			})
		}
		wg.Go(func() { _ = exp.ForceFlush(context.Background()) })
		wg.Go(func() {
			for range 200 {
				if st := exp.Stats(); st.Spans != st.Queued+st.Dropped || st.Queued != st.Exported+st.Failed+st.Pending {
					t.Errorf("inconsistent stats %+v", st)
					return
				}
			}
		})
		time.Sleep(time.Millisecond)
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		st := exp.Stats()
		got, _, _ := s.got()
		if st.Spans != uint64(4*50*spans) || st.Exported+st.Failed+st.Dropped != st.Spans || st.Exported != uint64(len(got)) || st.Pending != 0 {
			t.Fatalf("stats %+v, %d spans exported, %d offered", st, len(got), 4*50*spans)
		}
	}
}

// TestNamesNotUTF8: a range named in Latin-1 (as an imported log may name
// one) and a group likewise. OTLP's strings must be UTF-8: before, the
// batch holding them failed to encode and none of its spans arrived.
// Now every span arrives, over both protocols, the names made valid.
func TestNamesNotUTF8(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			addr, _ := serveProtocol(t, protocol, c)
			exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Protocol: protocol, Endpoint: "http://" + addr, Epoch: epoch})
			if err != nil {
				t.Fatal(err)
			}
			recs, spans := records(6)
			recs[1].Name = "matmul_b\xe9ckward"
			recs[2].Tag = "\xff"
			for i := range recs {
				if recs[i].Collective.Group != "" {
					recs[i].Collective.Group = "dp\xfe"
				}
			}
			exp.Consume(recs)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := exp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if st := exp.Stats(); c.spans.Load() != int64(spans) || st.Failed != 0 {
				t.Errorf("%d of %d spans arrived; stats %+v", c.spans.Load(), spans, st)
			}
		})
	}
}

// TestRunIDNotUTF8: profile-run names a run after its output directory,
// whose name need not be UTF-8 (here Latin-1). The run id is a resource
// attribute of every span, and OTLP's strings must be UTF-8: before, no
// request could be encoded and every span failed. Now every span
// arrives, over both protocols.
func TestRunIDNotUTF8(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			addr, _ := serveProtocol(t, protocol, c)
			exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Protocol: protocol, Endpoint: "http://" + addr, Epoch: epoch,
				RunID: "r\xe9sum\xe9-run", ServiceName: "svc-\xff"})
			if err != nil {
				t.Fatal(err)
			}
			recs, _ := records(6) // 6 records, 2 device-timed: 8 spans
			exp.Consume(recs)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := exp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if st := exp.Stats(); c.spans.Load() != 8 || st.Exported != 8 || st.Failed != 0 {
				t.Errorf("%d of 8 spans arrived; stats %+v", c.spans.Load(), st)
			}
		})
	}
}

// A Shutdown whose context has already ended reports lost spans only
// when spans were lost: not for an exporter with nothing queued, and not
// on a later call after a first that exported everything (later calls
// return the first's result).
func TestShutdownExpiredContextLosesNothing(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		idle, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch}, otelexp.WithSpanExporter(&stub{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := idle.Shutdown(expired); errors.Is(err, otelexp.ErrShutdownDeadline) {
			t.Fatalf("an idle exporter: Shutdown with an ended context = %v, want no lost spans", err)
		}
	}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch}, otelexp.WithSpanExporter(&stub{}))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(7)
	exp.Consume(recs)
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := exp.Stats(); st.Exported != uint64(spans) {
		t.Fatalf("exported %d of %d", st.Exported, spans)
	}
	for range 100 {
		if err := exp.Shutdown(expired); err != nil {
			t.Fatalf("Shutdown after one that exported everything = %v, want its result (nil)", err)
		}
	}
}
