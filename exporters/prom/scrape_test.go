package prom_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrapeFormat is what a scraper asks for, as Prometheus does.
type scrapeFormat struct {
	name, accept string
	native       bool // the server keeps native histograms as one series each
}

var (
	// classicScrape is a server without native histograms: the text format.
	classicScrape = scrapeFormat{"text (classic)", "text/plain;version=0.0.4", false}
	// nativeScrape is a server with native histograms on: it asks for the
	// protobuf format and stores a histogram with native buckets as one
	// series.
	nativeScrape = scrapeFormat{"protobuf (native)", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", true}
)

// scrapeResult is one scrape, parsed with expfmt.
type scrapeResult struct {
	families []*dto.MetricFamily
	bytes    int
}

// scrapeAs fetches url as format asks and parses the exposition.
func scrapeAs(t testing.TB, url string, f scrapeFormat) scrapeResult {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", f.accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	body := &countingReader{r: resp.Body}
	dec := expfmt.NewDecoder(body, expfmt.ResponseFormat(resp.Header))
	var out scrapeResult
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s scrape of %s: %v", f.name, url, err)
		}
		out.families = append(out.families, mf)
	}
	out.bytes = body.n
	return out
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// isNative says whether a histogram carries native buckets, as
// Prometheus's protobuf parser decides.
func isNative(h *dto.Histogram) bool {
	return h.GetSchema() != 0 || h.GetZeroThreshold() > 0 || h.GetZeroCount() > 0 ||
		len(h.GetPositiveSpan()) > 0 || len(h.GetNegativeSpan()) > 0
}

// seriesOf is the number of series one metric becomes in a server that
// scrapes it in format f.
func seriesOf(mf *dto.MetricFamily, m *dto.Metric, f scrapeFormat) int {
	switch mf.GetType() {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		if f.native && isNative(h) {
			return 1
		}
		n := len(h.GetBucket()) + 2 // _sum and _count
		if !hasInf(h) {
			n++ // the +Inf bucket, implicit in the protobuf format
		}
		return n
	case dto.MetricType_SUMMARY:
		return len(m.GetSummary().GetQuantile()) + 2
	default:
		return 1
	}
}

func hasInf(h *dto.Histogram) bool {
	b := h.GetBucket()
	return len(b) > 0 && b[len(b)-1].GetUpperBound() > 1e308
}

// seriesCount is a scrape's series, split by the rank label.
type seriesCount struct {
	total   int            // the exporter's own (trainscope_) series
	other   int            // the rest: promhttp's scrape error counter
	perRank map[string]int // rank label value → series carrying it
	shared  int            // series with no rank label
	byName  map[string]int // metric family → series
}

func countSeries(s scrapeResult, f scrapeFormat) seriesCount {
	c := seriesCount{perRank: map[string]int{}, byName: map[string]int{}}
	for _, mf := range s.families {
		if !strings.HasPrefix(mf.GetName(), "trainscope_") {
			for _, m := range mf.GetMetric() {
				c.other += seriesOf(mf, m, f)
			}
			continue
		}
		for _, m := range mf.GetMetric() {
			n := seriesOf(mf, m, f)
			c.total += n
			c.byName[mf.GetName()] += n
			rank := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "rank" {
					rank = l.GetValue()
				}
			}
			if rank == "" {
				c.shared += n
			} else {
				c.perRank[rank] += n
			}
		}
	}
	return c
}

// rankRange returns the fewest and most series any rank has.
func (c seriesCount) rankRange() (lo, hi int) {
	first := true
	for _, n := range c.perRank {
		if first || n < lo {
			lo = n
		}
		if first || n > hi {
			hi = n
		}
		first = false
	}
	return lo, hi
}

func (c seriesCount) String() string {
	lo, hi := c.rankRange()
	return fmt.Sprintf("%d series: %d ranks with %d–%d each, %d without a rank", c.total, len(c.perRank), lo, hi, c.shared)
}
