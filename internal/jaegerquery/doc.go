// Package jaegerquery reads traces back from Jaeger's query API
// (/api/traces), for the end-to-end tests that check what the OTLP
// exporter sent a real Jaeger. It holds no state and needs no Jaeger to
// build.
package jaegerquery
