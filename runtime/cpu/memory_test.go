package cpu_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestCopiesRoundTrip(t *testing.T) {
	s := newStream(t, dev0)
	src := []byte("trainscope moves bytes between host and device")
	n := int64(len(src))
	for _, tc := range []struct {
		name   string
		stream *runtime.Stream
	}{{"sync", nil}, {"stream", s}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := malloc(t, dev0, n), malloc(t, dev0, 2*n)
			if err := runtime.CopyToDevice(a, src, tc.stream); err != nil {
				t.Fatal(err)
			}
			hi, err := b.Slice(n, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := runtime.Memset(b, '-', tc.stream); err != nil {
				t.Fatal(err)
			}
			if err := runtime.Copy(hi, a, tc.stream); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2*n)
			if err := runtime.CopyToHost(got, b, tc.stream); err != nil {
				t.Fatal(err)
			}
			if tc.stream != nil {
				if err := tc.stream.Synchronize(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			want := append(bytes.Repeat([]byte("-"), int(n)), src...)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// Work on a stream happens when the stream reaches it, not when the host
// enqueues it.
func TestCopyIsAsynchronous(t *testing.T) {
	s := newStream(t, dev0)
	buf := malloc(t, dev0, 4)
	release := block(t, s)
	if err := runtime.CopyToDevice(buf, []byte{1, 2, 3, 4}, s); err != nil {
		t.Fatal(err)
	}
	view, err := cpu.Bytes(buf)
	if err != nil {
		t.Fatal(err)
	}
	done := newEvent(t, dev0, runtime.EventDisableTiming)
	if err := done.Record(s); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, done.Query(), runtime.StatusNotReady)
	if !bytes.Equal(view, []byte{0, 0, 0, 0}) { // read while the stream is held: no race
		t.Fatalf("buffer %v before the stream reached the copy, want zeros", view)
	}
	release()
	if err := done.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(view, []byte{1, 2, 3, 4}) {
		t.Fatalf("buffer %v after the copy", view)
	}
}

func TestMemoryStats(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU, Index: 9} // this test's own device
	s := newStream(t, dev)
	base, err := runtime.Memory(dev)
	if err != nil {
		t.Fatal(err)
	}
	if base.Total != 0 || base.Free != 0 {
		t.Fatalf("Total/Free %d/%d without a limit, want 0 (unknown)", base.Total, base.Free)
	}
	check := func(step string, inUse, peak int64) {
		t.Helper()
		st, err := runtime.Memory(dev)
		if err != nil {
			t.Fatal(err)
		}
		if st.InUse != base.InUse+inUse || st.Peak != base.InUse+peak {
			t.Fatalf("%s: InUse %d Peak %d, want %d %d", step, st.InUse-base.InUse, st.Peak-base.InUse, inUse, peak)
		}
	}
	if err := registered(t).ResetPeakMemory(dev.Index); err != nil {
		t.Fatal(err)
	}
	a, err := runtime.Malloc(dev, 1000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.Malloc(dev, 500)
	if err != nil {
		t.Fatal(err)
	}
	check("two allocations", 1500, 1500)
	if err := runtime.Free(a); err != nil {
		t.Fatal(err)
	}
	check("after Free", 500, 1500)
	if err := registered(t).ResetPeakMemory(dev.Index); err != nil {
		t.Fatal(err)
	}
	check("after ResetPeakMemory", 500, 500)

	c, err := runtime.MallocAsync(300, s)
	if err != nil {
		t.Fatal(err)
	}
	check("MallocAsync allocates at once", 800, 800)
	release := block(t, s)
	if err := runtime.FreeAsync(c, s); err != nil {
		t.Fatal(err)
	}
	check("FreeAsync before the stream reaches it", 800, 800)
	wantStatus(t, runtime.Memset(c, 0, nil), runtime.StatusInvalidArgument) // the handle is already gone
	release()
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("FreeAsync after the stream reached it", 500, 800)
	if err := runtime.Free(b); err != nil {
		t.Fatal(err)
	}
	check("all freed", 0, 800)
}

func TestMemoryLimit(t *testing.T) {
	impl := cpu.New(cpu.WithDevices(1), cpu.WithMemoryLimit(1000))
	a, err := impl.Malloc(0, 600)
	if err != nil {
		t.Fatal(err)
	}
	_, err = impl.Malloc(0, 600)
	wantStatus(t, err, runtime.StatusOutOfMemory)
	st, err := impl.MemoryStats(0)
	if err != nil {
		t.Fatal(err)
	}
	if st != (runtime.MemoryStats{InUse: 600, Peak: 600, Total: 1000, Free: 400}) {
		t.Fatalf("stats %+v after a refused allocation", st)
	}
	if err := impl.Free(a); err != nil {
		t.Fatal(err)
	}
	_, err = cpu.New().Malloc(0, 1<<60)
	wantStatus(t, err, runtime.StatusOutOfMemory)
}

// An allocation refused for passing the cap does not count against the
// device while it is being refused: a small allocation made meanwhile on
// an empty device still fits, and the bytes in use never pass the cap.
// (The refused bytes were added to the counter and taken off again, so a
// rank allocating 8 bytes of a free 1000-byte device was told it was out
// of memory whenever another rank's oversized request was in flight.)
func TestRefusedAllocationDoesNotCrowdOut(t *testing.T) {
	const limit, small = 1000, 8
	impl := cpu.New(cpu.WithDevices(1), cpu.WithMemoryLimit(limit))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if h, err := impl.Malloc(0, limit+1); err == nil {
				t.Errorf("%d bytes allocated under a %d-byte cap", limit+1, limit)
				_ = impl.Free(h)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 50000 {
		h, err := impl.Malloc(0, small)
		if err != nil {
			t.Fatalf("allocation %d: %d bytes on a device with nothing else in use: %v", i, small, err)
		}
		st, err := impl.MemoryStats(0)
		if err != nil {
			t.Fatal(err)
		}
		if st.InUse != small || st.Peak > limit {
			t.Fatalf("allocation %d: %+v, want %d bytes in use and a peak within the %d-byte cap", i, st, small, limit)
		}
		if err := impl.Free(h); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFreeErrors(t *testing.T) {
	impl := registered(t)
	other := cpu.New(cpu.WithDevices(1))
	foreign, err := other.Malloc(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := runtime.Malloc(dev0, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Free(freed); err != nil {
		t.Fatal(err)
	}
	s := newStream(t, dev0)
	live := malloc(t, dev0, 8)
	view, err := live.Slice(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"double Free", func() error { return runtime.Free(freed) }},
		{"double FreeAsync", func() error { return runtime.FreeAsync(freed, s) }},
		{"Free of a view", func() error { return runtime.Free(view) }},
		{"Free of a non-handle", func() error { return impl.Free("memory") }},
		{"Free of nil", func() error { return impl.Free(nil) }},
		{"Free of another instance's memory", func() error { return impl.Free(foreign) }},
		{"copy from freed memory", func() error { return runtime.CopyToHost(make([]byte, 8), freed, nil) }},
		{"Malloc negative", func() error { _, err := impl.Malloc(0, -1); return err }},
		{"Malloc bad device", func() error { _, err := impl.Malloc(64, 8); return err }},
		{"copy too much", func() error { return impl.MemcpyHtoD(view, make([]byte, 8), nil) }},
		{"Bytes of freed memory", func() error { _, err := cpu.Bytes(freed); return err }},
		{"Bytes of a zero Buffer", func() error { _, err := cpu.Bytes(runtime.Buffer{}); return err }},
		{"MemoryStats bad device", func() error { _, err := impl.MemoryStats(-1); return err }},
		{"ResetPeakMemory bad device", func() error { return impl.ResetPeakMemory(64) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), runtime.StatusInvalidArgument) })
	}
	if err := other.Free(foreign); err != nil {
		t.Fatal(err)
	}
}

func TestHostViews(t *testing.T) {
	buf := malloc(t, dev0, 64)
	uploadF32(t, buf, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	view, err := buf.Elems(runtime.Float32, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cpu.Float32s(view)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{3, 4, 5, 6, 7}; len(f) != len(want) || f[0] != 3 || f[4] != 7 {
		t.Fatalf("Float32s of elements [3, 8) = %v, want %v", f, want)
	}
	f[0] = 42 // aliases the buffer
	if got := downloadF32(t, buf, 4)[3]; got != 42 {
		t.Fatalf("write through Float32s not seen in the buffer: %v", got)
	}
	b, err := cpu.Bytes(view)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 20 {
		t.Fatalf("Bytes of a 20-byte view has %d bytes", len(b))
	}
	odd, err := buf.Slice(2, 8)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cpu.Float32s(odd)
	wantStatus(t, err, runtime.StatusInvalidArgument)
}
