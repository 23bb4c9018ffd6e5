package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// eventsRecorded runs cfg's steps and returns the events recorded on the
// ranks' compute and communication streams, by every caller: the trainer,
// its process groups and backends, the profiler.
func eventsRecorded(t *testing.T, cfg Config) uint64 {
	t.Helper()
	tr, err := NewTrainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for range cfg.Steps {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var n uint64
	for _, w := range tr.ranks {
		r := w.r
		n += r.compute.Records()
		if r.pp != nil {
			n += r.pp.Stream(r.dev).Records()
		}
		if r.dp != nil {
			n += r.dp.Stream(r.dev).Records()
		}
	}
	return n
}

// On the default job (pp 2 × vpp 2), profiling at device depth 1 adds few
// event records to what the run records anyway: a range that starts where
// the previous one on its stream ended shares its event, and a process
// group makes its communication stream follow the compute stream through
// the event the profiler recorded there last rather than one of its own.
// At most one more event for every two device-timed ranges; it was more
// than one for every two before the process groups waited through other
// callers' events, where each profiled range's end beside a transfer
// recorded one on top of the group's.
func TestProfilerAddsFewEventRecords(t *testing.T) {
	for _, devices := range []int{0, 1} {
		t.Run(fmt.Sprintf("devices=%d", devices), func(t *testing.T) {
			// The default job's schedule, ranges and transfers, on narrow
			// layers: the count depends on the schedule, not on the sizes.
			cfg := DefaultConfig()
			cfg.Width, cfg.MicrobatchSize = 16, 2
			cfg.Steps = 4
			cfg.Devices = devices
			off := eventsRecorded(t, cfg)
			p, err := profiler.New(profiler.WithDeviceDepth(1))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			cfg.Profiler = p
			on := eventsRecorded(t, cfg)
			if err := p.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			timed := 0
			for _, r := range p.Snapshot() {
				if r.HasDevice {
					timed++
				}
			}
			if st := p.Stats(); st.Dropped != 0 || st.EventDrops != 0 {
				t.Fatalf("profiler stats %+v: ranges dropped or timed on the host", st)
			}
			if timed == 0 || on < off {
				t.Fatalf("%d device-timed ranges; %d events recorded profiled, %d not", timed, on, off)
			}
			t.Logf("%d steps, %d ranks: %d events recorded unprofiled, %d profiled at depth 1 (%d device-timed ranges)", cfg.Steps, cfg.Stages*cfg.Replicas, off, on, timed)
			if extra := on - off; 2*extra > uint64(timed) {
				t.Errorf("profiling recorded %d events more than the unprofiled run, for %d device-timed ranges: want at most one for every two", extra, timed)
			}
		})
	}
}
