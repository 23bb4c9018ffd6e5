package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
)

// An endpoint that is down from the start, with the default timeouts and
// retries: training runs to the end, Shutdown keeps to its deadline, and
// every span shows as undelivered.
func TestEndpointDownAtStart(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			dead := deadAddr(t)
			start := time.Now()
			exp, recs := trainProfiled(t, smallRun(3), func(p *profiler.Profiler) *otelexp.Exporter {
				exp, err := otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch(), Protocol: protocol, Endpoint: "http://" + dead})
				if err != nil {
					t.Fatal(err)
				}
				return exp
			})
			trained := time.Since(start)

			const deadline = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start = time.Now()
			err := exp.Shutdown(ctx)
			if d := time.Since(start); d > deadline+500*time.Millisecond {
				t.Errorf("Shutdown with a %v deadline took %v", deadline, d)
			}
			if err != nil && !errors.Is(err, otelexp.ErrShutdownDeadline) {
				t.Errorf("Shutdown: %v", err)
			}
			want, _ := expectedSpans(recs)
			st := exp.Stats()
			if st.Spans != uint64(want) || st.Exported != 0 || st.Undelivered() != uint64(want) || st.Pending != 0 {
				t.Errorf("stats %+v; want all %d spans undelivered", st, want)
			}
			t.Logf("trained in %v; %d spans undelivered (%d failed, %d dropped); last error: %v", trained, st.Undelivered(), st.Failed, st.Dropped, st.LastError)
		})
	}
}

// An endpoint that goes away while training goes on: training runs to the
// end, Shutdown keeps to its deadline, every span the endpoint
// acknowledged counts as exported and every later one as undelivered.
//
// The test decides when the endpoint goes away, so no timing can change
// the outcome: the run trains in two parts on one profiler and exporter.
// After the first part the profiler has handed the exporter every record,
// ForceFlush has waited for every request's answer and the endpoint has
// acknowledged all of them; then the endpoint stops and the second part
// trains. The expected counts come from the profiler's records and from
// what the fake endpoint received, not from the exporter.
func TestEndpointGoesAwayMidRun(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			addr, stop := serveProtocol(t, protocol, c)
			ctx := context.Background()
			p, err := profiler.New()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			exp, err := otelexp.New(ctx, p, otelexp.Config{
				Epoch: p.Epoch(), Protocol: protocol, Endpoint: "http://" + addr,
				// Room for every span of the run, so none is dropped: each
				// one the endpoint did not acknowledge has failed.
				QueueSize: 1 << 16,
				// An answer from the live endpoint never times out, even on
				// a loaded machine; requests to the stopped one are refused
				// at once and retried briefly.
				ExportTimeout: time.Minute, RetryTime: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Shutdown(ctx) // after a failed check; otherwise a no-op

			// First part, endpoint up: every span is acknowledged.
			recs := train(t, p, smallRun(3))
			flushCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := exp.ForceFlush(flushCtx); err != nil {
				t.Fatal(err)
			}
			first, _ := expectedSpans(recs)
			acked, received := uint64(c.requests.Load()), uint64(c.spans.Load())
			st := exp.Stats()
			if received != uint64(first) || acked == 0 {
				t.Fatalf("the endpoint received %d spans in %d requests; want all %d of the first part", received, acked, first)
			}
			if st.Spans != uint64(first) || st.Exported != uint64(first) || st.Undelivered() != 0 || st.Pending != 0 ||
				st.Requests != acked || st.RequestErrors != 0 || st.LastError != nil {
				t.Fatalf("stats %+v with the endpoint up; want %d spans exported in %d requests", st, first, acked)
			}

			// The endpoint goes away; training goes on.
			stop()
			recs = train(t, p, smallRun(3))
			want, _ := expectedSpans(recs)
			if want <= first {
				t.Fatalf("the second part made no spans (%d in all, %d in the first part)", want, first)
			}

			const deadline = 10 * time.Second
			sctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			err = exp.Shutdown(sctx)
			if d := time.Since(start); d > deadline+2*time.Second {
				t.Errorf("Shutdown with a %v deadline took %v", deadline, d)
			}
			if err != nil && !errors.Is(err, otelexp.ErrShutdownDeadline) {
				t.Errorf("Shutdown: %v", err)
			}
			st = exp.Stats()
			if got := uint64(c.spans.Load()); got != received {
				t.Errorf("the endpoint received %d spans, %d of them after it went away", got, got-received)
			}
			if st.Spans != uint64(want) || st.Exported != uint64(first) || st.Failed != uint64(want-first) || st.Dropped != 0 || st.Pending != 0 {
				t.Errorf("stats %+v; want %d spans: the %d acknowledged exported, the other %d failed", st, want, first, want-first)
			}
			// Every request after the first part's failed, and the
			// exporter says why.
			if st.Requests <= acked || st.RequestErrors != st.Requests-acked || st.LastError == nil {
				t.Errorf("stats %+v; want every request after the first %d to have failed, and the last error", st, acked)
			}
			t.Logf("%d spans: %d exported in %d requests, %d failed in %d requests; last error: %v",
				want, st.Exported, acked, st.Failed, st.RequestErrors, st.LastError)
		})
	}
}
