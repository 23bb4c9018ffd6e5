package chrometrace_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/internal/synthtrace"
)

// BenchmarkWrite measures records → Chrome trace JSON, the whole of
// Write, on one goroutine.
func BenchmarkWrite(b *testing.B) {
	recs := synthtrace.Trainer(8, 20)
	var out countingWriter
	if _, err := chrometrace.Write(&out, recs); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(out.n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := chrometrace.Write(io.Discard, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkEncodingJSON is the baseline: the same events as maps through
// encoding/json, with no layout and no flows.
func BenchmarkEncodingJSON(b *testing.B) {
	recs := synthtrace.Trainer(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		events := make([]map[string]any, 0, len(recs))
		for i := range recs {
			r := &recs[i]
			events = append(events, map[string]any{
				"ph": "X", "name": r.Name, "cat": r.Kind.String(), "pid": r.Rank + 1, "tid": 1,
				"ts": float64(r.HostStart) / 1e3, "dur": float64(r.HostEnd-r.HostStart) / 1e3,
				"args": map[string]any{"step": r.Step, "stage": r.Stage, "chunk": r.Chunk, "microbatch": r.Microbatch, "phase": r.Phase.String()},
			})
		}
		if err := json.NewEncoder(io.Discard).Encode(map[string]any{"traceEvents": events, "displayTimeUnit": "ns"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
