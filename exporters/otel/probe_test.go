package otel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
)

// newHTTP makes an OTLP/HTTP exporter for url without a profiler.
func newHTTP(ctx context.Context, url string) (*otelexp.Exporter, error) {
	return otelexp.New(ctx, nil, otelexp.Config{Epoch: time.Now(), Endpoint: url, Protocol: otelexp.ProtocolHTTP})
}

// An HTTP endpoint whose answer to an export shows that no OTLP receiver
// is there — a web page (a UI's port: Jaeger's on 16686 answers every
// POST with its page), a redirect (to a login page) — would have every
// span counted delivered and none arrive: New refuses it, saying why.
// An endpoint that is down, refuses the request, or answers as a
// receiver does, is taken as before (the exports count their failures).
func TestNewRefusesAnEndpointThatIsNoOTLPReceiver(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!DOCTYPE html><html><body>Jaeger UI</body></html>"))
	}))
	defer page.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/login", http.StatusFound)
	}))
	defer redirect.Close()
	for name, c := range map[string]struct {
		url  string
		want []string
	}{
		"web page": {page.URL, []string{"not an OTLP/HTTP receiver", page.URL + "/v1/traces", "200 OK", "text/html", "a web page", "4318"}},
		"redirect": {redirect.URL + "/v1/traces", []string{"not an OTLP/HTTP receiver", "302 Found", "/login"}},
	} {
		exp, err := newHTTP(context.Background(), c.url)
		if err == nil {
			_ = exp.Shutdown(context.Background())
			t.Errorf("%s: New accepted %s", name, c.url)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}

	c := newCollector()
	addr, stop := serveHTTP(t, c)
	defer stop()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for name, url := range map[string]string{
		"receiver":  "http://" + addr,
		"not found": notFound.URL,
		"down":      down.URL,
	} {
		exp, err := newHTTP(context.Background(), url)
		if err != nil {
			t.Errorf("%s: New refused %s: %v", name, url, err)
			continue
		}
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := c.requests.Load(); n != 0 {
		t.Errorf("the receiver counted %d requests: the probe sends no span", n)
	}
}

// An endpoint that takes the probe and never answers holds New only
// until its context ends (or 3 s).
func TestProbeOfASilentEndpointEndsWithItsContext(t *testing.T) {
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer silent.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		exp, err := newHTTP(ctx, silent.URL)
		if err == nil {
			err = exp.Shutdown(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("New against a silent endpoint: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New waited on a silent endpoint past its context and the probe's 3 s")
	}
}

// Pointed at a real Jaeger's query port (its UI) by mistake, New refuses
// it; its OTLP/HTTP receiver is taken.
func TestJaegerUIPortIsNoOTLPReceiver(t *testing.T) {
	query, _, httpEndpoint := jaegerEnv(t)
	if _, err := newHTTP(context.Background(), query); err == nil || !strings.Contains(err.Error(), "not an OTLP/HTTP receiver") {
		t.Errorf("New with Jaeger's query port %s: %v, want an error saying it is no OTLP/HTTP receiver", query, err)
	} else {
		t.Logf("jaeger: %v", err)
	}
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: time.Now(), Endpoint: httpEndpoint, Protocol: otelexp.ProtocolHTTP, Insecure: true})
	if err != nil {
		t.Fatalf("New with Jaeger's OTLP/HTTP receiver %s: %v", httpEndpoint, err)
	}
	_ = exp.Shutdown(context.Background())
	var _ profiler.Sink = exp
}
