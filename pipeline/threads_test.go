package pipeline

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// osThreads returns the number of OS threads of this process (Linux).
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				t.Fatalf("Threads line %q: %v", line, err)
			}
			return n
		}
	}
	t.Skip("no Threads line in /proc/self/status")
	return 0
}

// On the host backend, whose current device is one for the whole
// process, ranks do not each hold an OS thread: 128 ranks between steps
// need about as many threads as 2 do, not one each.
func TestHostRanksDoNotHoldAThreadEach(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Stages, cfg.Chunks, cfg.Replicas = 4, 1, 32
	cfg.Microbatches, cfg.MicrobatchSize = 4, 2
	cfg.Width, cfg.Layers = 4, 4
	cfg.CommTimeout = 30 * time.Second
	ranks := cfg.Stages * cfg.Replicas
	before := osThreads(t)
	tr, err := NewTrainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for range 2 {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Every rank goroutine is now parked, waiting for the next step.
	added := osThreads(t) - before
	if added >= ranks/2 {
		t.Fatalf("%d ranks between steps hold %d more OS threads than before the trainer; want fewer than %d (the ranks share the scheduler's threads)", ranks, added, ranks/2)
	}
}
