package otel_test

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the tests without the OTel settings of the environment
// they run in (OTEL_*, and the tail sampler's TRAINSCOPE_TRACES_*):
// OTEL_TRACES_SAMPLER=always_off, an OTLP timeout or an
// endpoint there would steer the exporter the tests configure, and tests
// waiting for a span that never comes would hang. Tests that want one
// set it themselves (t.Setenv).
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "TRAINSCOPE_TRACES_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
