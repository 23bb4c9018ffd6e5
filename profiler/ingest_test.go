package profiler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

type collectSink struct {
	mu   sync.Mutex
	recs []profiler.Record
}

func (s *collectSink) Consume(recs []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, recs...)
}

func TestIngest(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	sink := &collectSink{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	// A 256 MiB all-reduce of 4 ranks that took 2 ms on the device:
	// algbw 134.2 GB/s, busbw × 2·3/4.
	ar := profiler.Record{ID: 1, Name: "AllReduce", Kind: profiler.KindCollective, Rank: 3,
		HostStart: time.Millisecond, HostEnd: 2 * time.Millisecond,
		HasDevice: true, DeviceStart: 5 * time.Millisecond, DeviceEnd: 7 * time.Millisecond,
		Collective:   profiler.Collective{Op: "AllReduce", Bytes: 256 << 20, BusFactor: 1.5, GroupSize: 4},
		AlgBandwidth: 1, BusBandwidth: 1, // overwritten
	}
	if err := p.Ingest(context.Background(), []profiler.Record{ar}); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	got := append([]profiler.Record(nil), sink.recs...)
	sink.mu.Unlock()
	if len(got) != 1 || got[0].Rank != 3 || got[0].Name != "AllReduce" {
		t.Fatalf("sink got %+v", got)
	}
	if want := float64(256<<20) / 0.002; got[0].AlgBandwidth != want || got[0].BusBandwidth != 1.5*want {
		t.Errorf("bandwidths %v, %v; want %v, %v", got[0].AlgBandwidth, got[0].BusBandwidth, want, 1.5*want)
	}
	if st := p.Stats(); st.Collected != 1 {
		t.Errorf("Stats.Collected %d, want 1", st.Collected)
	}
	for _, tc := range []struct {
		change func(*profiler.Record)
		want   string
	}{
		{func(r *profiler.Record) { r.Name = "" }, "record 1 has no name"},
		{func(r *profiler.Record) { r.Rank = -1 }, "rank -1"},
		{func(r *profiler.Record) { r.ID = 0 }, "ID 0"},
		{func(r *profiler.Record) { r.HostEnd = 0 }, "ends on the host"},
		{func(r *profiler.Record) { r.DeviceEnd = 0 }, "ends on the device"},
	} {
		bad := ar
		bad.ID = 2
		tc.change(&bad)
		err := p.Ingest(context.Background(), []profiler.Record{ar, bad})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error saying %q", err, tc.want)
		}
	}
	if st := p.Stats(); st.Collected != 1 {
		t.Errorf("a refused batch was ingested in part: Collected %d", st.Collected)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Ingest(context.Background(), []profiler.Record{ar}); !errors.Is(err, profiler.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
