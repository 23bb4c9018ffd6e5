package otel_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local"
	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/internal/jaegerquery"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// jaegerEnv returns the query API and the two OTLP endpoints of a running
// Jaeger (scripts/jaeger.sh start prints them), or skips the test.
func jaegerEnv(tb testing.TB) (query, grpcEndpoint, httpEndpoint string) {
	tb.Helper()
	query, grpcEndpoint, httpEndpoint = os.Getenv("TRAINSCOPE_JAEGER_QUERY"), os.Getenv("TRAINSCOPE_OTLP_GRPC"), os.Getenv("TRAINSCOPE_OTLP_HTTP")
	if query == "" || grpcEndpoint == "" || httpEndpoint == "" {
		tb.Skip("no Jaeger: set TRAINSCOPE_JAEGER_QUERY, TRAINSCOPE_OTLP_GRPC and TRAINSCOPE_OTLP_HTTP " +
			"(eval \"$(scripts/jaeger.sh start)\" sets them) to run this test against a real Jaeger v2")
	}
	return query, grpcEndpoint, httpEndpoint
}

// A Jaeger span as the query API's /api/traces returns it, with its tags
// and its process's indexed.
type jaegerSpan struct {
	jaegerquery.Span
	tags    map[string]any
	process map[string]any
}

func (s *jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// int returns an integer tag, or -1 when absent.
func (s *jaegerSpan) int(key string) int64 {
	v, ok := s.tags[key]
	if !ok {
		return -1
	}
	f, _ := v.(float64) // JSON numbers
	return int64(f)
}

// jaegerSpans returns every span of service that Jaeger holds, with tags
// and process tags indexed.
func jaegerSpans(ctx context.Context, query, service string, since time.Time) ([]jaegerSpan, error) {
	traces, err := jaegerquery.Traces(ctx, query, service, since, 100000)
	if err != nil {
		return nil, err
	}
	var out []jaegerSpan
	for _, t := range traces {
		for _, sp := range t.Spans {
			s := jaegerSpan{Span: sp, tags: map[string]any{}}
			for _, kv := range sp.Tags {
				s.tags[kv.Key] = kv.Value
			}
			p := t.Processes[sp.ProcessID]
			s.process = map[string]any{"service.name": p.ServiceName}
			for _, kv := range p.Tags {
				s.process[kv.Key] = kv.Value
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// awaitSpans polls Jaeger until it holds want spans of service (ingestion
// is asynchronous), more than want, or the deadline passes.
func awaitSpans(t *testing.T, query, service string, since time.Time, want int) []jaegerSpan {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		spans, err := jaegerSpans(ctx, query, service, since)
		if err == nil && len(spans) >= want {
			return spans
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Jaeger holds %d spans of %s after 60s, want %d (last error: %v)", len(spans), service, want, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// trainProfiled runs the built-in trainer with a profiler feeding exp's
// Consume, and returns every record the profiler kept. The profiler is
// closed (shutting exp down, if the test has not) when the test ends: the
// test's own Shutdown is the one it measures.
func trainProfiled(t *testing.T, cfg pipeline.Config, newExporter func(*profiler.Profiler) *otelexp.Exporter) (*otelexp.Exporter, []profiler.Record) {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	exp := newExporter(p) // registers itself with p
	return exp, train(t, p, cfg)
}

// train runs the built-in trainer with p recording, hands every record
// finished so far to p's sinks, and returns every record p holds (also
// those of earlier runs on p).
func train(t *testing.T, p *profiler.Profiler, cfg pipeline.Config) []profiler.Record {
	t.Helper()
	ctx := context.Background()
	cfg.Profiler = p
	if _, err := pipeline.Train(ctx, cfg); err != nil {
		t.Fatalf("training: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if st := p.Stats(); st.Overflow != 0 || st.Dropped != 0 || st.Pending != 0 {
		t.Fatalf("profiler lost records: %+v", st)
	}
	return recs
}

// smallRun is a pipelined, data-parallel run: 4 ranks, AllReduce groups of
// 2, Send/Recv between stages, device-timed ranges on the host backend.
func smallRun(steps int) pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.Stages, cfg.Chunks, cfg.Replicas = 2, 2, 2
	cfg.Microbatches, cfg.MicrobatchSize, cfg.Width, cfg.Layers = 4, 4, 32, 8
	cfg.Steps = steps
	return cfg
}

func expectedSpans(recs []profiler.Record) (total int, byName map[string]int) {
	byName = map[string]int{}
	for i := range recs {
		byName[recs[i].Name]++
		total++
		if recs[i].HasDevice {
			byName[recs[i].Name+otelexp.DeviceSuffix]++
			total++
		}
	}
	return total, byName
}

func TestJaegerEndToEnd(t *testing.T) {
	query, grpcEndpoint, httpEndpoint := jaegerEnv(t)
	for _, c := range []struct{ protocol, endpoint string }{
		{otelexp.ProtocolGRPC, grpcEndpoint},
		{otelexp.ProtocolHTTP, httpEndpoint},
	} {
		t.Run(strings.ReplaceAll(c.protocol, "/", "-"), func(t *testing.T) {
			since := time.Now()
			service := fmt.Sprintf("trainscope-e2e-%s-%d", strings.ReplaceAll(c.protocol, "/", "-"), since.UnixNano())
			var epoch time.Time
			exp, recs := trainProfiled(t, smallRun(3), func(p *profiler.Profiler) *otelexp.Exporter {
				epoch = p.Epoch()
				exp, err := otelexp.New(context.Background(), p, otelexp.Config{
					Epoch: p.Epoch(), Endpoint: c.endpoint, Protocol: c.protocol, Insecure: true,
					ServiceName: service, RunID: service,
				})
				if err != nil {
					t.Fatal(err)
				}
				return exp
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := exp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			want, wantByName := expectedSpans(recs)
			st := exp.Stats()
			if st.Records != uint64(len(recs)) || st.Spans != uint64(want) || st.Exported != uint64(want) || st.Undelivered() != 0 || st.Pending != 0 {
				t.Fatalf("exporter stats %+v; want %d records, %d spans, all exported", st, len(recs), want)
			}
			if exp.Protocol() != c.protocol {
				t.Errorf("protocol %q, want %q", exp.Protocol(), c.protocol)
			}

			spans := awaitSpans(t, query, service, since, want)
			if len(spans) != want {
				t.Fatalf("Jaeger holds %d spans of %s, want %d (%d records, %d device-timed)", len(spans), service, want, len(recs), want-len(recs))
			}
			checkAgainstRecords(t, spans, recs, wantByName, epoch, service)
			t.Logf("%s: %d records → %d spans in Jaeger, %d requests", c.protocol, len(recs), len(spans), st.Requests)
		})
	}
}

func checkAgainstRecords(t *testing.T, spans []jaegerSpan, recs []profiler.Record, wantByName map[string]int, epoch time.Time, service string) {
	t.Helper()
	gotByName := map[string]int{}
	type key struct {
		rank, id int64
		clock    string
	}
	byKey := map[key]*jaegerSpan{}
	byID := map[string]*jaegerSpan{}
	for i := range spans {
		s := &spans[i]
		gotByName[s.OperationName]++
		k := key{s.int("training.rank"), s.int("training.range_id"), fmt.Sprint(s.tags["training.clock"])}
		if byKey[k] != nil {
			t.Fatalf("two spans for rank %d range %d (%s)", k.rank, k.id, k.clock)
		}
		byKey[k], byID[s.SpanID] = s, s
	}
	for name, n := range wantByName {
		if gotByName[name] != n {
			t.Errorf("%d spans named %q, want %d", gotByName[name], name, n)
		}
	}
	if len(gotByName) != len(wantByName) {
		t.Errorf("span names %v, want %v", gotByName, wantByName)
	}

	micros := func(d time.Duration) int64 { return epoch.Add(d).UnixMicro() }
	near := func(a, b int64) bool { return a-b <= 1 && b-a <= 1 }
	traces := map[int32]string{}
	collectives := 0
	for i := range recs {
		r := &recs[i]
		h := byKey[key{int64(r.Rank), int64(r.ID), "host"}]
		if h == nil {
			t.Fatalf("no span for rank %d record %d %s", r.Rank, r.ID, r.Name)
		}
		if h.OperationName != r.Name || h.tags["training.kind"] != r.Kind.String() {
			t.Errorf("record %s (%s) became span %s (%v)", r.Name, r.Kind, h.OperationName, h.tags["training.kind"])
		}
		// The scope names this package and trainscope's version: this
		// test binary is the module's, built from a checkout.
		if h.tags["otel.scope.name"] != "github.com/trainscope/trainscope/exporters/otel" || h.tags["otel.scope.version"] != "(devel)" {
			t.Errorf("%s: scope %v %v, want this package at (devel)", r.Name, h.tags["otel.scope.name"], h.tags["otel.scope.version"])
		}
		// One trace per step, shared by every rank.
		if tr, ok := traces[r.Step]; !ok {
			traces[r.Step] = h.TraceID
		} else if tr != h.TraceID {
			t.Errorf("step %d records in traces %s and %s", r.Step, tr, h.TraceID)
		}
		if !near(h.StartTime, micros(r.HostStart)) || !near(h.Duration, (r.HostEnd-r.HostStart).Microseconds()) {
			t.Errorf("%s: start %dµs duration %dµs, want %d, %d", r.Name, h.StartTime, h.Duration, micros(r.HostStart), (r.HostEnd - r.HostStart).Microseconds())
		}
		labels := []struct {
			key  string
			want int64
		}{{"training.step", int64(r.Step)}, {"training.stage", int64(r.Stage)}, {"training.chunk", int64(r.Chunk)}, {"training.microbatch", int64(r.Microbatch)}}
		for _, l := range labels {
			if got := h.int(l.key); got != l.want { // -1 both when unset: None is left out
				t.Errorf("%s on rank %d: %s = %d, want %d", r.Name, r.Rank, l.key, got, l.want)
			}
		}
		if ph := r.Phase.String(); ph != "" && h.tags["training.phase"] != ph {
			t.Errorf("%s: training.phase %v, want %s", r.Name, h.tags["training.phase"], ph)
		}
		if h.tags["training.device"] != r.Device.String() {
			t.Errorf("%s: training.device %v, want %s", r.Name, h.tags["training.device"], r.Device)
		}
		if h.process["service.name"] != service || h.process["service.instance.id"] != fmt.Sprintf("%s/rank-%d", service, r.Rank) ||
			h.process["host.name"] == nil || h.process["process.pid"] == nil {
			t.Errorf("%s on rank %d: process %v", r.Name, r.Rank, h.process)
		}
		// The tree: the parent span is the parent record's span.
		switch {
		case r.Parent == 0 && h.parent() != "":
			t.Errorf("top-level %s has parent span %s", r.Name, h.parent())
		case r.Parent != 0:
			p := byKey[key{int64(r.Rank), int64(r.Parent), "host"}]
			if p == nil || h.parent() != p.SpanID {
				t.Errorf("rank %d %s (record %d): parent span %s, want the span of record %d", r.Rank, r.Name, r.ID, h.parent(), r.Parent)
			}
		}
		if r.HasDevice {
			d := byKey[key{int64(r.Rank), int64(r.ID), "device"}]
			if d == nil || d.OperationName != r.Name+otelexp.DeviceSuffix || d.parent() != h.SpanID {
				t.Fatalf("rank %d %s: device span %+v, want a child of %s", r.Rank, r.Name, d, h.SpanID)
			}
			if !near(d.StartTime, micros(r.DeviceStart)) || !near(d.Duration, (r.DeviceEnd-r.DeviceStart).Microseconds()) {
				t.Errorf("%s [device]: start %dµs duration %dµs, want %d, %d", r.Name, d.StartTime, d.Duration, micros(r.DeviceStart), (r.DeviceEnd - r.DeviceStart).Microseconds())
			}
		}
		if r.Kind != profiler.KindCollective && r.Kind != profiler.KindP2P {
			continue
		}
		c := &r.Collective
		if h.tags["ccl.op"] != c.Op || h.int("ccl.bytes") != c.Bytes || h.tags["ccl.group"] != c.Group || h.int("ccl.seq") != int64(c.Seq) ||
			h.int("ccl.group_size") != int64(c.GroupSize) || h.int("ccl.group_rank") != int64(c.GroupRank) || h.tags["ccl.dtype"] != c.DType ||
			h.tags["ccl.busbw"] == nil || h.tags["ccl.algbw"] == nil || h.int("ccl.peer") != int64(c.Peer) {
			t.Errorf("%s on rank %d: tags %v, want %+v", r.Name, r.Rank, h.tags, *c)
		}
		if r.Kind != profiler.KindCollective {
			continue
		}
		// Links join this collective to the other ranks' spans of it.
		collectives++
		peers := map[int64]bool{}
		for _, ref := range h.References {
			if ref.RefType != "FOLLOWS_FROM" {
				continue
			}
			o := byID[ref.SpanID]
			if o == nil || o.tags["ccl.group"] != c.Group || o.int("ccl.seq") != int64(c.Seq) || o.int("training.rank") == int64(r.Rank) {
				t.Errorf("%s seq %d on rank %d links to %+v", c.Op, c.Seq, r.Rank, o)
				continue
			}
			peers[o.int("ccl.group_rank")] = true
		}
		if len(peers) != int(c.GroupSize)-1 {
			t.Errorf("%s seq %d on rank %d links to group ranks %v, want the other %d", c.Op, c.Seq, r.Rank, peers, c.GroupSize-1)
		}
	}
	if collectives == 0 {
		t.Errorf("the run had no collectives to check links on")
	}
}
