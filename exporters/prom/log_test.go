package prom_test

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/trainscope/trainscope/exporters/prom"
)

// broken is a collector whose Collect always fails.
type broken struct{ desc *prometheus.Desc }

func (b broken) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }
func (b broken) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(b.desc, errors.New("sensor unreadable"))
}

// A scrape that cannot gather a metric still answers, and the logger hears
// why.
func TestScrapeErrorsReachTheLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	e, err := prom.New(nil, prom.WithHostname(host), prom.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(broken{prometheus.NewDesc("test_broken", "always fails", nil, nil)}); err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(t.Context())
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := logs.FilterMessageSnippet("sensor unreadable").Len(); n != 1 {
		t.Errorf("%d log entries naming the failure, want 1: %v", n, logs.All())
	}
}
