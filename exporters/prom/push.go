package prom

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
)

// ErrIncompletePush (errors.Is) marks Push's error when the push was
// delivered without the series some collector failed to gather.
var ErrIncompletePush = errors.New("pushed without some series")

// Push retry policy: a refusing Pushgateway costs at most PushAttempts
// attempts of at most pushAttemptTimeout each, with a pause between them.
const (
	PushAttempts       = 3
	pushAttemptTimeout = 5 * time.Second
	pushBackoff        = 250 * time.Millisecond
)

// Push sends the exporter's current values to the Pushgateway at url
// ("host:port" or a URL without the /metrics/job/... part) as job, grouped
// by instance = the exporter's Hostname, replacing what an earlier push of
// the same job and host left there: a final summary for runs too short to
// be scraped. Connection errors, timeouts and 5xx or 429 answers are
// retried, up to PushAttempts in all; other answers are not. Push returns
// within ctx and never hangs; its error says what was not delivered.
// Series a collector failed to gather are left out of the push, which
// goes ahead with the rest, and the error says so.
func (e *Exporter) Push(ctx context.Context, url, job string) error {
	if url == "" || job == "" {
		return fmt.Errorf("prom: push: want a Pushgateway URL and a job name")
	}
	// One snapshot for every attempt, so what is described as not
	// delivered is what was tried.
	// A collector that failed (one added with Register) leaves out its
	// series; the rest is pushed all the same, and the error says so.
	mfs, gatherErr := e.reg.Gather()
	if gatherErr != nil && len(mfs) == 0 {
		return fmt.Errorf("prom: push: gathering metrics: %w", gatherErr)
	}
	what := describe(mfs)
	var (
		last    error
		attempt int
	)
	for attempt = 1; attempt <= PushAttempts; attempt++ {
		doer := &statusDoer{c: &http.Client{Timeout: pushAttemptTimeout}}
		actx, cancel := context.WithTimeout(ctx, pushAttemptTimeout)
		last = push.New(url, job).
			Grouping("instance", e.cfg.hostname).
			Gatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil })).
			Client(doer).
			PushContext(actx)
		cancel()
		if last == nil {
			if gatherErr != nil {
				return fmt.Errorf("prom: push to %s (job %q): pushed %s, but some metrics could not be gathered and are not in it: %w: %w", url, job, what, ErrIncompletePush, gatherErr)
			}
			return nil
		}
		if !doer.retryable() || attempt == PushAttempts || ctx.Err() != nil {
			break
		}
		pause := pushBackoff << (attempt - 1)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	attempt = min(attempt, PushAttempts)
	return fmt.Errorf("prom: push to %s (job %q) failed after %d attempt(s); not delivered: %s: %w",
		url, job, attempt, what, errors.Join(last, ctx.Err()))
}

// describe summarises metric families for an error message.
func describe(mfs []*dto.MetricFamily) string {
	series := 0
	var records float64
	for _, mf := range mfs {
		series += len(mf.GetMetric())
		if mf.GetName() == "trainscope_records_total" {
			for _, m := range mf.GetMetric() {
				records += m.GetCounter().GetValue()
			}
		}
	}
	return fmt.Sprintf("%d metric families, %d series, summarising %.0f records", len(mfs), series, records)
}

// statusDoer remembers how the last request ended, to decide on a retry.
type statusDoer struct {
	c      *http.Client
	status int
	err    error
}

func (d *statusDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	d.err = err
	if resp != nil {
		d.status = resp.StatusCode
	}
	return resp, err
}

func (d *statusDoer) retryable() bool {
	switch {
	case d.err != nil:
		return true // refused, reset, timed out
	case d.status == 0:
		return false // failed before sending: a bad URL or a label clash
	case d.status == http.StatusTooManyRequests || d.status >= 500:
		return true
	}
	return false
}
