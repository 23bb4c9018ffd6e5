package jaegerquery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/jaegerquery"
)

// Traces asks for the service and window given and decodes spans,
// references and tags; a status other than 200 is an error naming it.
// (The end-to-end tests read a real Jaeger through it.)
func TestTraces(t *testing.T) {
	since := time.Unix(1_800_000_000, 0)
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.RequestURI()
		if r.URL.Query().Get("service") != "svc" {
			http.Error(w, "no such service", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"traceID":"t1","spans":[{"traceID":"t1","spanID":"b","operationName":"AllReduce",
			"references":[{"refType":"FOLLOWS_FROM","spanID":"x"},{"refType":"CHILD_OF","spanID":"a"}],
			"startTime":5,"duration":7,"tags":[{"key":"training.cycle","type":"int64","value":42}],"processID":"p1"}],
			"processes":{"p1":{"serviceName":"svc"}}}]}`))
	}))
	defer srv.Close()
	traces, err := jaegerquery.Traces(context.Background(), srv.URL+"/", "svc", since, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := "/api/traces?end="
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "limit=3") || !strings.Contains(got, "start=1799999940000000") {
		t.Errorf("asked %s", got)
	}
	if len(traces) != 1 || len(traces[0].Spans) != 1 {
		t.Fatalf("traces %+v", traces)
	}
	s := traces[0].Spans[0]
	if s.Parent() != "a" || s.Duration != 7 || traces[0].Processes[s.ProcessID].ServiceName != "svc" {
		t.Errorf("span %+v", s)
	}
	if v, ok := s.Int("training.cycle"); !ok || v != 42 {
		t.Errorf("training.cycle %d, %v", v, ok)
	}
	if _, ok := s.Int("training.step"); ok {
		t.Error("a tag that is not there")
	}
	if _, err := jaegerquery.Traces(context.Background(), srv.URL, "other", since, 3); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 gave %v", err)
	}
}
