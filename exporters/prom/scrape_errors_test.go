package prom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
)

// failing is a collector whose every collection fails.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("source unreachable"))
}

// A scrape that cannot gather every metric answers with the others, and
// says so in a series of its own: without a logger (the default) nothing
// else told that series were missing from it.
func TestScrapeGatherErrorsCounted(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	e.Consume([]profiler.Record{{ID: 1, Name: "forward", Labels: profiler.NoLabels, HostStart: 0, HostEnd: time.Millisecond}})
	if err := e.Register(failing{prometheus.NewDesc("test_unreachable", "Always fails.", nil, nil)}); err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() map[string]float64 {
		resp, err := http.Get("http://" + addr.String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape: %s; want the metrics that could be gathered", resp.Status)
		}
		dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
		out := map[string]float64{}
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("scrape: %v", err)
			}
			if mf.GetName() != "promhttp_metric_handler_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "cause" {
						out[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	scrape()
	got := scrape()
	// Two scrapes, each missing the failing metric: the second sees the
	// first counted (and its own, counted after its answer was gathered).
	if got["gathering"] < 1 || got["encoding"] != 0 {
		t.Errorf("promhttp_metric_handler_errors_total by cause: %v; want the failed gathering counted", got)
	}
}
