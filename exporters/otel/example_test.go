package otel_test

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// A rank records one step holding a device-timed forward range; the
// exporter turns the two records into three spans (the forward range has
// a child for its device interval). In a real run, leave out
// WithSpanExporter and set Config.Endpoint and Protocol, or the standard
// OTEL_EXPORTER_OTLP_* variables.
func Example() {
	ctx := context.Background()
	p, _ := profiler.New()
	defer p.Close(ctx)

	mem := tracetest.NewInMemoryExporter()
	exp, err := otelexp.New(ctx, p, otelexp.Config{Epoch: p.Epoch(), RunID: "example"}, otelexp.WithSpanExporter(mem))
	if err != nil {
		panic(err)
	}

	dev := runtime.Device{Type: runtime.CPU}
	stream, _ := runtime.NewStream(dev)
	defer stream.Destroy()
	rec, _ := p.NewRecorder(0, dev)
	rec.SetStep(0)
	rec.Start("step")
	rec.SetPhase(profiler.Forward)
	rec.StartDevice("forward", stream)
	rec.End()
	rec.End()

	_ = p.Flush(ctx)        // every record reaches the exporter
	_ = exp.ForceFlush(ctx) // every queued span is exported
	defer exp.Shutdown(ctx)
	names := map[[8]byte]string{}
	for _, s := range mem.GetSpans() {
		names[s.SpanContext.SpanID()] = s.Name
	}
	var lines []string
	for _, s := range mem.GetSpans() {
		lines = append(lines, fmt.Sprintf("%-16s parent %q", s.Name, names[s.Parent.SpanID()]))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	st := exp.Stats()
	fmt.Printf("records %d, spans %d, exported %d, undelivered %d\n", st.Records, st.Spans, st.Exported, st.Undelivered())
	// Output:
	// forward          parent "step"
	// forward [device] parent "forward"
	// step             parent ""
	// records 2, spans 3, exported 3, undelivered 0
}
