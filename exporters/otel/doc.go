// Package otel sends profiler records to an OpenTelemetry backend (Jaeger,
// Tempo, any OTLP receiver) as spans, over OTLP/gRPC or OTLP/HTTP.
//
// An Exporter is a profiler.Sink: New registers it with the profiler it is
// given, every finished record reaches it once, off the training hot path,
// and the profiler's Close shuts it down (flushing what is queued).
// Consume only copies the records into a bounded queue; one goroutine
// builds the spans and exports them in batches. Nothing is dropped
// silently: every span is counted as exported (acknowledged by the
// endpoint), dropped (the queue was full) or failed (its request failed
// after bounded retries, or Shutdown ran out of time), in Stats.
//
// Spans keep the records' tree: a record's parent range is its span's
// parent (step → microbatch → chunk → op or collective). Every record of
// one training step, on every rank, is in one trace; records without a
// step are in one run-level trace, or, for a job that marks no steps and
// repeats a cycle of collectives (Config.Cycles), in a trace per cycle
// under a "cycle" span per rank. Trace and span ids derive from the run
// id, the rank and the record id, so a child's span can name its parent
// before the parent's record arrives, and a collective's span on one rank
// links to the same collective's spans on the other ranks of its group
// (same group name and sequence number) without any exchange between
// ranks. A device-timed record becomes two spans: its host range and a
// child "<name> [device]" holding the device interval, both on the host
// clock (a traced kernel with no host range, one span at its device
// interval). Each rank is its own resource (service.instance.id).
//
// docs/otel.md lists the attributes and the environment variables the
// exporter honours, and explains these choices.
package otel
