// Package benchmarks holds the benchmarks that compare trainscope's hot
// paths with their baselines in one run, so each ratio reads from a single
// `go test -bench` invocation: a host range against an OpenTelemetry SDK
// span and a single-mutex append, a device-timed range against the raw
// event records it is made of. The package has no non-test code; it lives
// apart so the core packages' tests need no telemetry library.
//
// Results and the commands that produce them are in docs/benchmarks.md.
package benchmarks
