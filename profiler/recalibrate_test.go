package profiler_test

import (
	"context"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// heldRecordImpl is the cpu backend whose event records block while held,
// until released: CUDA's cudaEventRecord waits so while another thread
// is in a cudaFree that waits for a kernel that does not end, which the
// cpu backend cannot be made to do on demand.
type heldRecordImpl struct {
	*cpu.Impl
	held    atomic.Bool
	release chan struct{}
}

func (h *heldRecordImpl) EventRecord(ev, s any) error {
	if h.held.Load() {
		<-h.release
	}
	return h.Impl.EventRecord(ev, s)
}

// closingSink keeps what it is given and whether it was shut down.
type closingSink struct {
	mu   sync.Mutex
	recs []profiler.Record
	shut bool
}

func (s *closingSink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	s.recs = append(s.recs, batch...)
	s.mu.Unlock()
}

func (s *closingSink) Shutdown(context.Context) error {
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
	return nil
}

// stackHas reports whether some goroutine's stack holds fn.
func stackHas(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:goruntime.Stack(buf, true)]), fn)
}

// TestCloseWhileACalibrationPointIsStuck: a recalibration whose device
// call blocks in the driver does not hold the collector's lock, so Close
// still delivers every range, the last one included, shuts the sinks
// down and returns without waiting out its context (the collector's
// grace, then the clock syncs', 0.5 s each); the blocked call is left
// to finish in the background.
func TestCloseWhileACalibrationPointIsStuck(t *testing.T) {
	impl := &heldRecordImpl{Impl: cpu.New(), release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(impl.release)
		}
	})
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond), profiler.WithRecalibration(time.Millisecond), profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	sink := &closingSink{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	dev := runtime.Device{Type: runtime.CPU, Index: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The device's clock sync records its events through impl; the
	// ranges' own events go through the stream's backend.
	if err := p.Calibrate(ctx, impl, dev); err != nil {
		t.Fatal(err)
	}
	r, err := p.NewRecorder(5, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 5)
	r.StartDevice("before", s)
	r.End()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	impl.held.Store(true)
	for deadline := time.Now().Add(time.Minute); !stackHas("heldRecordImpl).EventRecord"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no recalibration reached its event record within a minute")
		}
	}
	r.StartDevice("after", s)
	r.End()
	r.Start("host")
	r.End()
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}

	const bound = 30 * time.Second
	cctx, ccancel := context.WithTimeout(context.Background(), bound)
	defer ccancel()
	start := time.Now()
	err = p.Close(cctx)
	if took := time.Since(start); took > bound/2 {
		t.Errorf("Close took %v with a %v context: it waited for the blocked call", took, bound)
	}
	if err != nil {
		t.Errorf("Close = %v, want nil: the collector blocked outside its lock holds nothing Close needs", err)
	}
	sink.mu.Lock()
	var names []string
	for _, rec := range sink.recs {
		names = append(names, rec.Name)
	}
	shut := sink.shut
	sink.mu.Unlock()
	slices.Sort(names)
	if strings.Join(names, ",") != "after,before,host" {
		t.Errorf("the sink got %v, want before, after and host", names)
	}
	if !shut {
		t.Error("the sink was not shut down")
	}
	close(impl.release)
	released = true
}
