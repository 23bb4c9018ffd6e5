package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/jaegerquery"
)

// A wrapped job that marks no steps, sent to a real Jaeger over OTLP:
// once its cycle is found, each step is a trace of its own, holding both
// ranks' three all-reduces under a "cycle" span per rank, and the
// driver's stalled steps are the cycles that last 350 ms; the steps before
// the cycle was found are in the run-level trace.
func TestWrapCycleTracesInJaeger(t *testing.T) {
	query, otlp := os.Getenv("TRAINSCOPE_JAEGER_QUERY"), os.Getenv("TRAINSCOPE_OTLP_HTTP")
	if query == "" || otlp == "" {
		t.Skip("no Jaeger: set TRAINSCOPE_JAEGER_QUERY and TRAINSCOPE_OTLP_HTTP (scripts/jaeger.sh start prints them)")
	}
	dir, lib := buildPlugin(t)
	t.Setenv("TRAINSCOPE_NCCL_PLUGIN_PATH", lib)
	t.Setenv("TEST_PLUGIN_STALL_EVERY", "20")
	t.Setenv("TEST_PLUGIN_STALL_MS", "300")
	const steps = 140
	script := fmt.Sprintf(`for r in 0 1; do RANK=$r %q --drive-steps %q %d $r 2 & done; wait`, filepath.Join(dir, "test_plugin"), lib, steps)
	service := fmt.Sprintf("cycles-%d", time.Now().UnixNano())
	since := time.Now()
	code, stdout, stderr := runWrap(t, "-out", t.TempDir(), "-metrics-addr", "off", "-trace", "off", "-pprof", "off",
		"-otlp-endpoint", otlp, "-otlp-protocol", "http/protobuf", "-service-name", service, "--", "bash", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// Ingestion is asynchronous: wait until the count holds still.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var traces []jaegerquery.Trace
	for last := -1; ; {
		tr, err := jaegerquery.Traces(ctx, query, service, since, 100000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, x := range tr {
			n += len(x.Spans)
		}
		if n > 0 && n == last {
			traces = tr
			break
		}
		last = n
		select {
		case <-ctx.Done():
			t.Fatalf("Jaeger's spans of %s did not settle: %d", service, n)
		case <-time.After(time.Second):
		}
	}
	var cycles []int64
	var stalls, runLevel int
	whole := map[int64]bool{}
	// Each rank numbers its cycles from the first it finds, and the
	// ranks find theirs apart (each on its own count of operations): a
	// rank's first numbered cycle holds only what it recorded after
	// finding it.
	firstOf := map[int64]int64{}
	for _, tr := range traces {
		var roots, reduces int
		rootIDs := map[string]bool{}
		k := int64(-1)
		for _, s := range tr.Spans {
			if s.OperationName != "cycle" {
				continue
			}
			roots++
			rootIDs[s.SpanID] = true
			if len(s.References) != 0 {
				t.Errorf("a cycle span with a parent: %+v", s.References)
			}
			if v, ok := s.Int("training.cycle"); ok {
				k = v
				if r, ok := s.Int("training.rank"); ok {
					if f, seen := firstOf[r]; !seen || v < f {
						firstOf[r] = v
					}
				}
			}
			if s.Duration >= 349_000 {
				stalls++
			}
		}
		for _, s := range tr.Spans {
			if s.OperationName != "AllReduce" {
				continue
			}
			reduces++
			if roots > 0 && !rootIDs[s.Parent()] { // and links to the peers' spans
				t.Errorf("cycle %d: an all-reduce not under its rank's cycle span: %+v", k, s.References)
			}
		}
		if roots == 0 {
			runLevel++
			continue
		}
		cycles = append(cycles, k)
		whole[k] = roots == 2 && reduces == 6
	}
	slices.Sort(cycles)
	// Every cycle holds both ranks' step, but each rank's first numbered,
	// whose operations that came before the numbering are in the
	// run-level trace.
	if len(firstOf) != 2 {
		t.Fatalf("cycle spans of ranks %v, want both ranks'", firstOf)
	}
	lastFirst := max(firstOf[0], firstOf[1])
	if d := lastFirst - min(firstOf[0], firstOf[1]); d > 3 {
		t.Errorf("the ranks' first numbered cycles %v lie %d apart", firstOf, d)
	}
	for _, k := range cycles {
		if k > lastFirst && !whole[k] {
			t.Errorf("cycle %d's trace does not hold 2 cycle spans and 6 all-reduces (both ranks' step)", k)
		}
	}
	if runLevel != 1 {
		t.Errorf("%d traces without a cycle span, want one: the run-level trace", runLevel)
	}
	// The cycle is found a few seconds in (at 50 ms a step), then every
	// step is a trace, numbered one after another.
	if len(cycles) < steps-60 {
		t.Fatalf("%d cycle traces of %d steps", len(cycles), steps)
	}
	for i := 1; i < len(cycles); i++ {
		if cycles[i] != cycles[i-1]+1 {
			t.Errorf("cycles %d and %d follow each other", cycles[i-1], cycles[i])
		}
	}
	// Steps 20, 40, … 120 stall 300 ms (TEST_PLUGIN_STALL_EVERY): on both
	// ranks, those the traces hold.
	if first := int(cycles[len(cycles)-1]) - len(cycles) + 2; stalls < 2*(120/20-(first-1)/20) {
		t.Errorf("%d cycle spans of 350 ms or more, want both ranks' for each stalled step from about step %d", stalls, first)
	}
	t.Logf("%d cycle traces, cycles %d to %d (the ranks numbered from %v); %d stalled cycle spans", len(cycles), cycles[0], cycles[len(cycles)-1], firstOf, stalls)
}
