package otel

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// CutShortDescription is the status description of a span whose range
// was cut short (profiler.Record.CutShort); its status code is Error.
const CutShortDescription = "cut short: the range's work failed or was interrupted"

// span is a finished span built from a record, handed to the SDK's span
// exporters as a ReadOnlySpan. The SDK seals ReadOnlySpan with an
// unexported method; embedding the (nil) interface supplies it, and every
// method an exporter calls is defined here. Spans are built in slabs
// (builder.build), so a batch costs one allocation, not one per span.
type span struct {
	sdktrace.ReadOnlySpan // never called: supplies the sealed method

	name         string
	sc, parent   trace.SpanContext
	start, end   time.Time
	attrs        []attribute.KeyValue
	links        []sdktrace.Link
	droppedLinks int
	cutShort     bool // Record.CutShort: status Error
	res          *resource.Resource
	scope        *instrumentation.Scope
}

func (s *span) Name() string                     { return s.name }
func (s *span) SpanContext() trace.SpanContext   { return s.sc }
func (s *span) Parent() trace.SpanContext        { return s.parent }
func (s *span) SpanKind() trace.SpanKind         { return trace.SpanKindInternal }
func (s *span) StartTime() time.Time             { return s.start }
func (s *span) EndTime() time.Time               { return s.end }
func (s *span) Attributes() []attribute.KeyValue { return s.attrs }
func (s *span) Links() []sdktrace.Link           { return s.links }
func (s *span) Events() []sdktrace.Event         { return nil }
func (s *span) Status() sdktrace.Status {
	if s.cutShort {
		return sdktrace.Status{Code: codes.Error, Description: CutShortDescription}
	}
	return sdktrace.Status{}
}
func (s *span) DroppedAttributes() int       { return 0 }
func (s *span) DroppedLinks() int            { return s.droppedLinks }
func (s *span) DroppedEvents() int           { return 0 }
func (s *span) ChildSpanCount() int          { return 0 }
func (s *span) Resource() *resource.Resource { return s.res }
func (s *span) InstrumentationScope() instrumentation.Scope {
	return *s.scope
}

// InstrumentationLibrary is the deprecated name of InstrumentationScope,
// still part of ReadOnlySpan; an exporter built before the rename calls
// it.
//
//lint:ignore SA1019 the interface still requires it
func (s *span) InstrumentationLibrary() instrumentation.Library {
	return *s.scope
}
