package jaegerquery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Ref is a span's reference: its parent (RefType "CHILD_OF") or a link
// ("FOLLOWS_FROM").
type Ref struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Tag is an attribute of a span or a process.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"` // JSON numbers are float64
}

// Span is a span as the query API returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []Ref  `json:"references"`
	StartTime     int64  `json:"startTime"` // µs since the Unix epoch
	Duration      int64  `json:"duration"`  // µs
	Tags          []Tag  `json:"tags"`
	ProcessID     string `json:"processID"`
}

// Parent returns the id of the span's parent, "" for a root.
func (s *Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Int returns an integer tag.
func (s *Span) Int(key string) (int64, bool) {
	for _, kv := range s.Tags {
		if kv.Key == key {
			f, ok := kv.Value.(float64)
			return int64(f), ok
		}
	}
	return 0, false
}

// Process is the resource a span came from.
type Process struct {
	ServiceName string `json:"serviceName"`
	Tags        []Tag  `json:"tags"`
}

// Trace is one trace: its spans and the processes they name.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Traces returns up to limit traces of service with spans from since (less
// a minute) to now (plus a minute), as the query API at query (its base
// URL, e.g. http://127.0.0.1:16686) has them.
func Traces(ctx context.Context, query, service string, since time.Time, limit int) ([]Trace, error) {
	q := url.Values{
		"service": {service},
		"limit":   {strconv.Itoa(limit)},
		"start":   {strconv.FormatInt(since.Add(-time.Minute).UnixMicro(), 10)},
		"end":     {strconv.FormatInt(time.Now().Add(time.Minute).UnixMicro(), 10)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(query, "/")+"/api/traces?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var doc struct {
		Data []Trace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	return doc.Data, nil
}
