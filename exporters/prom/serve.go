package prom

import (
	"strings"

	"go.uber.org/zap"

	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultAddr is where Serve listens when given no address: loopback,
// the port OpenTelemetry's Prometheus exporter uses by convention.
const DefaultAddr = "127.0.0.1:9464"

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("prom: exporter closed")

// Serve starts serving /metrics on addr (DefaultAddr when empty) in the
// background and returns the address it listens on (useful with port 0).
// An address without a host (":9464") listens on loopback only; to listen
// on other interfaces, name one ("0.0.0.0:9464"). Listening errors — a
// port already in use, say — are returned here, at start, and leave the
// exporter usable: the caller decides whether to carry on without the
// endpoint. One exporter serves at most one address at a time.
func (e *Exporter) Serve(addr string) (net.Addr, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("prom: metrics address %q: want HOST:PORT: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	addr = net.JoinHostPort(host, port)

	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	switch {
	case e.closed:
		return nil, ErrClosed
	case e.srv != nil:
		return nil, fmt.Errorf("prom: already serving /metrics; Shutdown first")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("prom: cannot serve /metrics on %s: the port is already in use (another profile-run or exporter?); choose another address: %w", addr, err)
		}
		return nil, fmt.Errorf("prom: cannot serve /metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      scrapeLog{e.cfg.log},
		// A scrape that could not gather every metric still answers, with
		// what it could; promhttp_metric_handler_errors_total counts those
		// scrapes, so that series missing from one show without a logger.
		Registry:            prometheus.WrapRegistererWith(prometheus.Labels{labelHostname: e.cfg.hostname}, e.reg),
		Timeout:             10 * time.Second,
		MaxRequestsInFlight: 4,
		// OpenMetrics when the scraper asks for it: the only text format
		// that carries exemplars.
		EnableOpenMetrics: true,
		// Prometheus asks for gzip on every scrape; on a training node
		// the cores are scarcer than the network.
		DisableCompression: true,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "trainscope: metrics at /metrics")
	})
	// WriteTimeout: a scraper that stops reading must not hold a
	// connection, and a page, for ever (Prometheus's own scrape timeout
	// defaults to 10 s). ReadTimeout likewise for a client that sends a
	// request body and stops: net/http reads what is left of it after the
	// handler and before answering, with no deadline but this one. It must outlast the
	// handler's Timeout, as it also cancels the request's context.
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: e.cfg.readTimeout,
		WriteTimeout: time.Minute, IdleTimeout: time.Minute}
	e.srvErr = make(chan error, 1)
	go func(srv *http.Server, errc chan<- error) {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}(e.srv, e.srvErr)
	return ln.Addr(), nil
}

// Shutdown stops the /metrics endpoint, waiting until ctx ends for
// scrapes in progress, then closing what is left. It is idempotent; the
// metrics stay readable through Registry and Push. The profiler the
// exporter was made with calls it from its Close.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	e.closed = true
	srv, errc := e.srv, e.srvErr
	e.srv = nil
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("prom: shutdown: %w", err)
	}
	return errors.Join(err, <-errc)
}

// scrapeLog passes promhttp's scrape errors to the exporter's logger.
type scrapeLog struct{ l *zap.Logger }

func (s scrapeLog) Println(v ...any) {
	if s.l != nil {
		s.l.Warn("metrics scrape: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}
