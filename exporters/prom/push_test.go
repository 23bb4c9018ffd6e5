package prom_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
)

func pushExporter(t *testing.T, records int) *prom.Exporter {
	t.Helper()
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	var batch []profiler.Record
	for i := range records {
		batch = append(batch, rec(uint64(i+1), 0, 0, "step", profiler.KindHost, 0, 1, 0, 0))
	}
	e.Consume(batch)
	return e
}

func TestPushDeliversSummary(t *testing.T) {
	var (
		mu      sync.Mutex
		path    string
		records float64
	)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		path = r.Method + " " + r.URL.Path
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err != nil {
				if !errors.Is(err, io.EOF) {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				break
			}
			if mf.GetName() == "trainscope_records_total" {
				for _, m := range mf.GetMetric() {
					records += m.GetCounter().GetValue()
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	if err := pushExporter(t, 42).Push(t.Context(), gw.URL, "profile-run"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "PUT /metrics/job/profile-run/instance/" + host; path != want {
		t.Errorf("pushed to %q, want %q", path, want)
	}
	if records != 42 {
		t.Errorf("pushed trainscope_records_total summing to %v, want 42", records)
	}
}

func TestPushRefusedIsBoundedAndSaysWhat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused

	var hits503, hits400 atomic.Int32
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits503.Add(1)
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits400.Add(1)
		http.Error(w, "inconsistent metrics", http.StatusBadRequest)
	}))
	defer bad.Close()

	e := pushExporter(t, 7)
	for _, c := range []struct {
		name, url string
		hits      *atomic.Int32
		attempts  int32
	}{
		{"refused", refusing, nil, prom.PushAttempts},
		{"503", unavailable.URL, &hits503, prom.PushAttempts},
		{"400", bad.URL, &hits400, 1}, // not worth retrying
	} {
		start := time.Now()
		err := e.Push(context.Background(), c.url, "profile-run")
		took := time.Since(start)
		if err == nil {
			t.Errorf("%s: Push succeeded", c.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "not delivered") || !strings.Contains(msg, "summarising 7 records") {
			t.Errorf("%s: error does not say what was not delivered: %v", c.name, err)
		}
		if c.hits != nil && c.hits.Load() != c.attempts {
			t.Errorf("%s: %d attempts, want %d", c.name, c.hits.Load(), c.attempts)
		}
		if took > 5*time.Second {
			t.Errorf("%s: Push took %v", c.name, took)
		}
	}
}

func TestPushHonoursContext(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := pushExporter(t, 1).Push(ctx, hanging.URL, "profile-run")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Push to a hanging Pushgateway: %v, want a deadline error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Push took %v past a 300ms deadline", took)
	}
}

// With TRAINSCOPE_PUSHGATEWAY_URL set, a real Pushgateway accepts the
// push and serves it back.
func TestPushToRealPushgateway(t *testing.T) {
	url := os.Getenv("TRAINSCOPE_PUSHGATEWAY_URL")
	if url == "" {
		t.Skip("TRAINSCOPE_PUSHGATEWAY_URL is not set (a Pushgateway, e.g. Debian's prometheus-pushgateway on 127.0.0.1:9091)")
	}
	_, e := train(t, trainConfig(2, 2))
	if err := e.Push(t.Context(), url, "trainscope-test"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(strings.TrimSuffix(url, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `trainscope_records_total{Hostname="`+host+`",UUID="",gpu="0",instance="`+host+`",job="trainscope-test"`) {
		t.Errorf("the Pushgateway does not serve the pushed records:\n%.2000s", body)
	}
}

// A collector that fails to gather (one added with Register) kept the
// whole push from being sent: the run's final summary was lost for one
// bad series. The rest is pushed, and the error says what was missing.
func TestPushSendsWhatGathersAndSaysWhatDidNot(t *testing.T) {
	var records atomic.Int64
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err != nil {
				break
			}
			if mf.GetName() == "trainscope_records_total" {
				for _, m := range mf.GetMetric() {
					records.Add(int64(m.GetCounter().GetValue()))
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	e := pushExporter(t, 7)
	if err := e.Register(failing{prometheus.NewDesc("test_unreachable", "Always fails.", nil, nil)}); err != nil {
		t.Fatal(err)
	}
	err := e.Push(t.Context(), gw.URL, "profile-run")
	if !errors.Is(err, prom.ErrIncompletePush) || !strings.Contains(err.Error(), "source unreachable") {
		t.Errorf("Push = %v; want an error saying what was pushed and what could not be gathered", err)
	}
	if n := records.Load(); n != 7 {
		t.Errorf("the Pushgateway got trainscope_records_total summing to %d, want 7", n)
	}
}
