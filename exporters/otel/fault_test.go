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

// An endpoint that goes away once it has acknowledged a request, while
// training goes on: training runs to the
// end, what it acknowledged counts as exported, the rest as undelivered.
func TestEndpointGoesAwayMidRun(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newCollector()
			serve := serveGRPC
			if protocol == otelexp.ProtocolHTTP {
				serve = serveHTTP
			}
			addr, stop := serve(t, c)
			stopped := make(chan time.Time, 1)
			exp, recs := trainProfiled(t, smallRun(8), func(p *profiler.Profiler) *otelexp.Exporter {
				exp, err := otelexp.New(context.Background(), p, otelexp.Config{
					Epoch: p.Epoch(), Protocol: protocol, Endpoint: "http://" + addr,
					RetryTime: 500 * time.Millisecond, ExportTimeout: 5 * time.Second, // generous: CI runs this under -race beside other packages
				})
				if err != nil {
					t.Fatal(err)
				}
				// The endpoint goes away once it has acknowledged a request.
				go func() {
					for deadline := time.Now().Add(10 * time.Second); exp.Stats().Exported == 0 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
					stop()
					stopped <- time.Now()
				}()
				return exp
			})
			trainedAt := time.Now()
			select {
			case at := <-stopped:
				if !at.Before(trainedAt) {
					t.Fatalf("the endpoint went away after training ended")
				}
			default:
				t.Fatalf("the endpoint acknowledged nothing during training")
			}

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := exp.Shutdown(ctx)
			if d := time.Since(start); d > 5500*time.Millisecond {
				t.Errorf("Shutdown with a 5s deadline took %v", d)
			}
			if err != nil && !errors.Is(err, otelexp.ErrShutdownDeadline) {
				t.Errorf("Shutdown: %v", err)
			}
			want, _ := expectedSpans(recs)
			st := exp.Stats()
			received := uint64(c.spans.Load())
			if st.Spans != uint64(want) || st.Exported+st.Undelivered() != uint64(want) || st.Pending != 0 {
				t.Errorf("stats %+v; want %d spans, each exported or undelivered", st, want)
			}
			if st.Exported == 0 || st.Exported > received || st.Undelivered() == 0 || st.LastError == nil {
				t.Errorf("stats %+v; the endpoint received %d spans before it went away", st, received)
			}
			t.Logf("%d spans: %d exported (endpoint received %d), %d failed, %d dropped; last error: %v",
				want, st.Exported, received, st.Failed, st.Dropped, st.LastError)
		})
	}
}
