package benchmarks

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	_ "github.com/trainscope/trainscope/ccl/local"
	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// BenchmarkTrainerExporters: profile-run's default training step with
// profiling only, beside the same step with every live exporter on (the
// Prometheus sink and OTel spans — to a no-op span exporter, and to a real
// Jaeger when TRAINSCOPE_OTLP_GRPC is set). pprof and the Perfetto trace
// are written once after training, not per step, and are not in the loop.
func BenchmarkTrainerExporters(b *testing.B) {
	jaeger := os.Getenv("TRAINSCOPE_OTLP_GRPC")
	cases := []struct {
		name  string
		otel  func(p *profiler.Profiler) (*otelexp.Exporter, error)
		prom  bool
		needs string
	}{
		{name: "profiling-only"},
		{name: "all-exporters-otel-noop", prom: true, otel: func(p *profiler.Profiler) (*otelexp.Exporter, error) {
			return otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch()}, otelexp.WithSpanExporter(tracetest.NewNoopExporter()))
		}},
		{name: "all-exporters-otel-jaeger", prom: true, needs: jaeger, otel: func(p *profiler.Profiler) (*otelexp.Exporter, error) {
			return otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch(), Protocol: otelexp.ProtocolGRPC, Endpoint: jaeger,
				ServiceName: fmt.Sprintf("trainscope-bench-%d", time.Now().UnixNano())})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.otel != nil && c.name == "all-exporters-otel-jaeger" && c.needs == "" {
				b.Skip("no Jaeger: set TRAINSCOPE_OTLP_GRPC (scripts/jaeger.sh start)")
			}
			ctx := context.Background()
			p, err := profiler.New()
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			if c.prom {
				if _, err := prom.New(p); err != nil {
					b.Fatal(err)
				}
			}
			var exp *otelexp.Exporter
			if c.otel != nil {
				if exp, err = c.otel(p); err != nil {
					b.Fatal(err)
				}
			}
			cfg := pipeline.DefaultConfig()
			cfg.Profiler = p
			tr, err := pipeline.NewTrainer(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if exp != nil {
				_ = p.Flush(ctx)
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := exp.Shutdown(sctx); err != nil {
					b.Fatal(err)
				}
				if st := exp.Stats(); st.Undelivered() != 0 {
					b.Errorf("%d spans undelivered: %+v", st.Undelivered(), st)
				}
			}
		})
	}
}
