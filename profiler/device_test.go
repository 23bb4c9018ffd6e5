package profiler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func cpuStream(t *testing.T, index int) *runtime.Stream {
	t.Helper()
	s, err := runtime.NewStream(runtime.Device{Type: runtime.CPU, Index: index})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	return s
}

// A device range around work the stream runs later than the host enqueues
// it: the device time is the work's duration, it starts when the stream
// reaches it (after the host range has ended), and the host never waited.
func TestDeviceRangeMeasuresStreamWork(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: 5}
	r, err := p.NewRecorder(5, dev)
	if err != nil {
		t.Fatal(err)
	}
	s := cpuStream(t, 5)
	gate := make(chan struct{})
	const work = 30 * time.Millisecond
	// The stream is held until the host range below has ended.
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	r.StartDevice("matmul", s)
	if err := cpu.Enqueue(s, func() { time.Sleep(work) }); err != nil {
		t.Fatal(err)
	}
	hostStart := time.Now()
	r.End()
	if waited := time.Since(hostStart); waited > work/2 {
		t.Fatalf("End waited %v for the device", waited)
	}
	if n := len(p.Snapshot()); n != 0 {
		t.Fatalf("unresolved device range reported early: %d records", n)
	}
	if st := p.Stats(); st.Pending != 1 {
		t.Fatalf("pending %d, want 1", st.Pending)
	}
	time.Sleep(5 * time.Millisecond)
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	if !rec.HasDevice || rec.Kind != profiler.KindDevice || rec.Device != dev {
		t.Fatalf("record %+v", rec)
	}
	if d := rec.DeviceDuration(); d < work || d > work+20*time.Millisecond {
		t.Errorf("device duration %v, want about %v", d, work)
	}
	// The stream only reached the range after the gate opened, at least
	// 5ms after the host range ended; calibration error is far below that.
	if rec.DeviceStart < rec.HostEnd+4*time.Millisecond {
		t.Errorf("device start %v not after host end %v + gate", rec.DeviceStart, rec.HostEnd)
	}
	if rec.HostDuration() > work/2 {
		t.Errorf("host duration %v includes device time", rec.HostDuration())
	}
}

func TestCollectiveBandwidthFromDeviceTime(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	dev := runtime.Device{Type: runtime.CPU, Index: 6}
	r, _ := p.NewRecorder(0, dev)
	s := cpuStream(t, 6)
	const bytes = 64 << 20
	r.StartCollective("AllReduce", s, profiler.Collective{Op: "AllReduce", Bytes: bytes, Peer: -1, Root: -1, GroupSize: 4, BusFactor: 1.5})
	_ = cpu.Enqueue(s, func() { time.Sleep(20 * time.Millisecond) })
	r.End()
	r.StartCollective("Send", s, profiler.Collective{Op: "Send", Bytes: 8, Peer: 1, Root: -1, GroupSize: 2, BusFactor: 1})
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	ar, send := recs[0], recs[1]
	if ar.Kind != profiler.KindCollective || send.Kind != profiler.KindP2P {
		t.Errorf("kinds %v %v", ar.Kind, send.Kind)
	}
	sec := ar.DeviceDuration().Seconds()
	if want := bytes / sec; ar.AlgBandwidth < want*0.999 || ar.AlgBandwidth > want*1.001 {
		t.Errorf("algbw %g, want %g", ar.AlgBandwidth, want)
	}
	if ar.BusBandwidth != ar.AlgBandwidth*1.5 {
		t.Errorf("busbw %g, want 1.5 × %g", ar.BusBandwidth, ar.AlgBandwidth)
	}
	// 64 MiB in ≥ 20ms is at most 3.4 GB/s.
	if ar.AlgBandwidth > 64<<20/0.02 {
		t.Errorf("algbw %g exceeds what 20ms allows", ar.AlgBandwidth)
	}
	if send.Collective.Peer != 1 || send.Collective.Op != "Send" {
		t.Errorf("send collective %+v", send.Collective)
	}
}

func TestSyncEachRangeWaitsForDevice(t *testing.T) {
	for name, opt := range map[string]profiler.Option{
		"WithSyncEachRange": profiler.WithSyncEachRange(),
		"WithSeedStyleSync": profiler.WithSeedStyleSync(), // deprecated name, same behaviour
	} {
		t.Run(name, func(t *testing.T) {
			p := newProfiler(t, profiler.WithCollectInterval(0), opt)
			r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 7})
			s := cpuStream(t, 7)
			r.StartDevice("work", s)
			_ = cpu.Enqueue(s, func() { time.Sleep(15 * time.Millisecond) })
			t0 := time.Now()
			r.End()
			if waited := time.Since(t0); waited < 10*time.Millisecond {
				t.Fatalf("End returned after %v, before the device finished", waited)
			}
			recs := p.Snapshot()
			if len(recs) != 1 || recs[0].HostDuration() < 15*time.Millisecond {
				t.Fatalf("host time should include the wait: %+v", recs)
			}
		})
	}
}

func TestEventPoolBound(t *testing.T) {
	// Five ranges back to back on a held stream with a pool of four
	// events, each enqueuing work. Each range records its own start and
	// end: two ranges hold the four events until the stream moves on.
	// Adjacent ranges share an event (the next starts from the previous
	// end): three ranges fit. The others are timed on the host only, and
	// counted.
	for _, c := range []struct {
		adjacent          bool
		withDevice, drops int
	}{{false, 2, 3}, {true, 3, 2}} {
		t.Run(fmt.Sprintf("adjacent=%v", c.adjacent), func(t *testing.T) {
			p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithEventPool(4), profiler.WithAdjacentRanges(c.adjacent))
			r, _ := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 8})
			s := cpuStream(t, 8)
			gate := make(chan struct{})
			_ = cpu.Enqueue(s, func() { <-gate })
			for range 5 {
				r.StartDevice("x", s)
				_ = cpu.Enqueue(s, func() {})
				r.End()
			}
			close(gate)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			recs := p.Snapshot()
			withDevice := 0
			for _, rec := range recs {
				if rec.HasDevice {
					withDevice++
				}
			}
			if len(recs) != 5 || withDevice != c.withDevice {
				t.Fatalf("%d records, %d with device time; want 5 and %d", len(recs), withDevice, c.withDevice)
			}
			if st := p.Stats(); st.EventDrops != uint64(c.drops) {
				t.Errorf("EventDrops = %d, want %d", st.EventDrops, c.drops)
			}
			// Once resolved, the events are back in the pool: with the
			// stream idle, ranges get fresh events again, each time.
			for range 3 {
				r.StartDevice("y", s)
				r.End()
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if recs := p.Snapshot(); !recs[len(recs)-1].HasDevice {
					t.Fatal("events were not returned to the pool")
				}
			}
		})
	}
}

// After Close, the audit's sequence — a device range on a recorder made
// before Close, then Flush, Snapshot and Reset — panicked (index out of
// range in the closed clock calibration). Now NewRecorder and Flush say
// the profiler is closed, Snapshot gathers the device range without a
// device time, and ranges cost no allocation and are dropped and counted
// once the buffer is full.
func TestUseAfterClose(t *testing.T) {
	ctx := context.Background()
	p, err := profiler.New(profiler.WithBufferSize(4), profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	s := cpuStream(t, 0)
	r, err := p.NewRecorder(0, cpu0)
	if err != nil {
		t.Fatal(err)
	}
	r.Start("before")
	r.End()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r2, err := p.NewRecorder(1, cpu0); !errors.Is(err, profiler.ErrClosed) || r2 != nil {
		t.Errorf("NewRecorder after Close = %v, %v; want nil and ErrClosed", r2, err)
	}
	if err := p.Calibrate(ctx, s.Impl(), runtime.Device{Type: runtime.CPU, Index: 1}); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("Calibrate after Close = %v, want ErrClosed", err)
	}
	r.StartDevice("x", s)
	r.End()
	if err := p.Flush(ctx); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	recs := p.Snapshot()
	if len(recs) != 2 || recs[0].Name != "before" || recs[1].Name != "x" || recs[1].HasDevice {
		t.Fatalf("Snapshot after Close = %+v, want before and x, x without a device time", recs)
	}
	if st := p.Stats(); st.Errors != 0 || st.Pending != 0 {
		t.Errorf("after Close: %d errors, %d pending; want none", st.Errors, st.Pending)
	}
	// The buffer holds 4 ranges; nothing drains it any more, so the
	// rest are dropped and counted, without allocating.
	allocs := testing.AllocsPerRun(100, func() {
		r.StartDevice("y", s)
		r.End()
		r.Start("z")
		r.End()
	})
	if allocs != 0 {
		t.Errorf("Start/End after Close allocate %v times, want 0", allocs)
	}
	if st := p.Stats(); st.Dropped < 2*100-4 {
		t.Errorf("Dropped = %d after 202 ranges into a buffer of 4, want at least 198", st.Dropped)
	}
	p.Reset()
	if recs := p.Snapshot(); len(recs) != 0 {
		t.Errorf("Snapshot after Reset = %d records, want 0", len(recs))
	}
	if err := p.Close(ctx); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

// A backend that refuses an event record is counted in Stats.Errors, and
// the first such error is kept to say what went wrong; the range is
// still recorded, on the host clock.
func TestFirstBackendErrorKept(t *testing.T) {
	ctx := context.Background()
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if st := p.Stats(); st.Errors != 0 || st.FirstError != nil {
		t.Fatalf("a new profiler has errors: %d, %v", st.Errors, st.FirstError)
	}
	cpu0 := runtime.Device{Type: runtime.CPU, Index: 0}
	s := cpuStream(t, 0)
	r, err := p.NewRecorder(0, cpu0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.StartDevice("on a destroyed stream", s)
		r.End()
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Errors < 2 || st.FirstError == nil || !strings.Contains(st.FirstError.Error(), "EventRecord") || !strings.Contains(st.FirstError.Error(), "Destroy") {
		t.Errorf("Errors %d, FirstError %v; want at least 2 and the record refused on a destroyed stream", st.Errors, st.FirstError)
	}
	if recs := p.Snapshot(); len(recs) != 2 || recs[0].HasDevice {
		t.Errorf("records %+v; want both ranges, without device times", recs)
	}
}

// Reset discards device ranges still waiting for their events before any
// sink saw them: it counts them in Stats.Discarded (not Dropped, the
// recording side's losses).
func TestResetCountsUnresolvedRanges(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	s := cpuStream(t, 22)
	r, err := p.NewRecorder(0, runtime.Device{Type: runtime.CPU, Index: 22})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.StartDevice("waiting", s)
		r.End()
	}
	p.Reset()
	close(gate)
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Discarded != 3 || st.Dropped != 0 || len(p.Snapshot()) != 0 {
		t.Errorf("Discarded %d, Dropped %d, %d records after Reset; want 3 discarded, none dropped or kept", st.Discarded, st.Dropped, len(p.Snapshot()))
	}
}

// A launch that panics inside Grouped (a backend's panic) ends the
// group's ranges, cut short, before the panic goes on: the ranges after
// it are device-timed as before, at the depth WithDeviceDepth allows.
func TestGroupedLaunchPanics(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(0), profiler.WithDeviceDepth(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	dev := runtime.Device{Type: runtime.CPU, Index: 23}
	s := cpuStream(t, 23)
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	calls := []profiler.GroupedCollective{{Name: "Send", Stream: s, Collective: profiler.Collective{Op: "Send", Peer: 1}}}
	func() {
		defer func() {
			if v := recover(); v != "backend bug" {
				t.Errorf("recovered %v, want the launch's panic", v)
			}
		}()
		_ = r.Grouped(calls, func() error { panic("backend bug") })
	}()
	r.StartDevice("after", s)
	sleepOn(t, s, time.Millisecond)
	r.End()
	recs := deviceRanges(t, p)
	if send := recs["Send"]; !send.CutShort {
		t.Errorf("the panicked group's Send: %+v, want it cut short", send)
	}
	if after := recs["after"]; after.DeviceDuration() < time.Millisecond {
		t.Errorf("the range after the panic: device time %v, want it timed on the device", after.DeviceDuration())
	}
}
