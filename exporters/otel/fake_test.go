package otel_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
)

// collector is a fake OTLP receiver: it counts what it is sent and answers
// with an optional partial success.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	spans, requests atomic.Int64
	rejected        int64  // partial success: spans rejected per request (negative: a malformed answer)
	warning         string // partial success with nothing rejected: a message only

	mu      sync.Mutex
	headers map[string]string // of the last request
	path    string            // HTTP: the last request's path
}

func newCollector() *collector { return &collector{} }

func (c *collector) count(req *coltracepb.ExportTraceServiceRequest, headers map[string]string, path string) *coltracepb.ExportTraceServiceResponse {
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	c.spans.Add(int64(n))
	c.requests.Add(1)
	c.mu.Lock()
	c.headers, c.path = headers, path
	c.mu.Unlock()
	resp := &coltracepb.ExportTraceServiceResponse{}
	if c.rejected != 0 {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: c.rejected, ErrorMessage: "too old"}
	} else if c.warning != "" {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{ErrorMessage: c.warning}
	}
	return resp
}

func (c *collector) header(k string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headers[k]
}

// Export implements the OTLP gRPC trace service.
func (c *collector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for k, v := range md {
		h[k] = v[0]
	}
	return c.count(req, h, ""), nil
}

// ServeHTTP implements OTLP/HTTP with protobuf bodies, on any path.
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) == 0 {
		// An empty export, New's probe of the endpoint: answered as a
		// receiver answers it, and not counted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	h := map[string]string{}
	for k := range r.Header {
		h[http.CanonicalHeaderKey(k)] = r.Header.Get(k)
	}
	out, _ := proto.Marshal(c.count(&req, h, r.URL.Path))
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serveGRPC starts c on a loopback port; stop ends it (idempotent).
// serveProtocol serves c over protocol (otelexp.ProtocolGRPC or
// ProtocolHTTP).
func serveProtocol(t testing.TB, protocol string, c *collector) (addr string, stop func()) {
	if protocol == otelexp.ProtocolHTTP {
		return serveHTTP(t, c)
	}
	return serveGRPC(t, c)
}

func serveGRPC(t testing.TB, c *collector) (addr string, stop func()) {
	t.Helper()
	l := listen(t)
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	go func() { _ = s.Serve(l) }()
	var once sync.Once
	stop = func() { once.Do(s.Stop) }
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// serveHTTP starts c on a loopback port; stop closes the listener and every
// connection (idempotent).
func serveHTTP(t testing.TB, c *collector) (addr string, stop func()) {
	t.Helper()
	l := listen(t)
	s := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.Serve(l) }()
	var once sync.Once
	stop = func() { once.Do(func() { _ = s.Close() }) }
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l := listen(t)
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// stub is an in-process SpanExporter whose requests can be held back or
// made to fail.
type stub struct {
	gate chan struct{} // when set, ExportSpans waits for it to close (or ctx)
	err  error

	mu        sync.Mutex
	spans     []sdktrace.ReadOnlySpan
	batches   []int
	shutdowns int
}

func (s *stub) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.err != nil {
		return s.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, spans...)
	s.batches = append(s.batches, len(spans))
	return nil
}

func (s *stub) Shutdown(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdowns++
	return nil
}

func (s *stub) got() (spans []sdktrace.ReadOnlySpan, batches []int, shutdowns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), s.spans...), append([]int(nil), s.batches...), s.shutdowns
}

// records makes n records of one rank, every third one device-timed; it
// returns them and the number of spans they make.
func records(n int) ([]profiler.Record, int) {
	recs := make([]profiler.Record, n)
	spans := 0
	for i := range recs {
		recs[i] = profiler.Record{ID: uint64(i + 1), Name: "op", Labels: profiler.NoLabels, HostStart: time.Duration(i), HostEnd: time.Duration(i + 1)}
		spans++
		if i%3 == 0 {
			recs[i].Kind, recs[i].HasDevice, recs[i].DeviceStart, recs[i].DeviceEnd = profiler.KindDevice, true, time.Duration(i), time.Duration(i+2)
			spans++
		}
	}
	return recs, spans
}
