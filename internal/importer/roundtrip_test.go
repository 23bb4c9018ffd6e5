package importer

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

type sink struct {
	mu   sync.Mutex
	recs []profiler.Record
}

func (s *sink) Consume(b []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, b...)
}

// TestIngestBandwidths takes the imported traces through Ingest and checks
// the bandwidths it computes from the trace's own numbers.
func TestIngestBandwidths(t *testing.T) {
	ps := []*Profile{loadFile(t, "testdata/kineto/rank0.json"), loadFile(t, "testdata/kineto/rank1.json")}
	prof, err := profiler.New(profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close(context.Background())
	s := &sink{}
	if err := prof.AddSink(s); err != nil {
		t.Fatal(err)
	}
	if err := prof.Ingest(context.Background(), Combine(ps)); err != nil {
		t.Fatal(err)
	}
	if err := prof.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := 0
	for _, r := range s.recs {
		var bytes, secs, factor float64
		switch {
		case strings.HasPrefix(r.Name, "ncclDevKernel_AllReduce"):
			// 1048576 "Float" elements; 400 µs (rank 0), 410 µs (rank 1);
			// nccl-tests' all-reduce factor 2(n−1)/n for n = 2.
			bytes, secs, factor = 1048576*4, []float64{400e-6, 410e-6}[r.Rank], 2*(2-1)/2.0
		case strings.HasPrefix(r.Name, "ncclDevKernel_AllGather"):
			// 524288 "BFloat16" elements gathered in 100 µs; (n−1)/n.
			bytes, secs, factor = 524288*2, 100e-6, (2-1)/2.0
		default:
			continue
		}
		seen++
		alg := bytes / secs
		if math.Abs(r.AlgBandwidth-alg) > 1e-6*alg || math.Abs(r.BusBandwidth-factor*alg) > 1e-6*alg || float64(r.Collective.Bytes) != bytes {
			t.Errorf("rank %d %s: %d bytes, algbw %g, busbw %g; want %g, %g, %g", r.Rank, r.Name, r.Collective.Bytes, r.AlgBandwidth, r.BusBandwidth, bytes, alg, factor*alg)
		}
	}
	if seen != 4 {
		t.Errorf("%d collectives delivered, want 4", seen)
	}
}

// writeSeedLog writes records as the framework's PrintRecords does: per
// rank, per tag in byte order, columns left-aligned to their widths and
// never cut, durations truncated to whole microseconds, the device as
// Device::ToString spells it.
func writeSeedLog(recs []profiler.Record, stamp func(profiler.Record) time.Time) string {
	pad := func(v any, w int) string { return fmt.Sprintf("%-*v", w, v) }
	byRank := map[int]map[string][]profiler.Record{}
	for _, r := range recs {
		if byRank[r.Rank] == nil {
			byRank[r.Rank] = map[string][]profiler.Record{}
		}
		byRank[r.Rank][r.Tag] = append(byRank[r.Rank][r.Tag], r)
	}
	var b strings.Builder
	for rank := 0; rank < len(byRank); rank++ {
		fmt.Fprintf(&b, "\n=== Kernel Call Log for Rank %d ===\n", rank)
		var tags []string
		for tag := range byRank[rank] {
			tags = append(tags, tag)
		}
		sort.Strings(tags)
		for _, tag := range tags {
			fmt.Fprintf(&b, "\nTag: %s\n", tag)
			b.WriteString(pad("Idx", 8) + pad("Timestamp", 24) + pad("Name", 40) + pad("Device", 10) + pad("Host(us)", 12) + pad("Device(us)", 12) + pad("Peak Mem(MB)", 16) + "\n")
			for i, r := range byRank[rank][tag] {
				dev := "cpu"
				if r.HasDevice {
					dev = fmt.Sprintf("Device(CUDA, %d)", r.Device.Index)
				}
				b.WriteString(pad(i, 8) + pad(stamp(r).Format("2006-01-02 15:04:05"), 24) + pad(r.Name, 40) + pad(dev, 10) +
					pad(int64(r.HostDuration()/time.Microsecond), 12) + pad(int64(r.DeviceDuration()/time.Microsecond), 12) + pad(r.PeakMemory>>20, 16) + "\n")
			}
		}
	}
	return b.String()
}

// TestSeedRoundTrip writes a run's ranges in the framework's call log
// format, imports them, and checks that the report's totals are the ones
// the framework would have printed for the same ranges.
func TestSeedRoundTrip(t *testing.T) {
	start := time.Date(2026, 2, 25, 13, 5, 7, 0, time.UTC)
	var recs []profiler.Record
	names := []string{"matmul", "softmax", "a_name_longer_than_the_forty_byte_column_0123", "to_cpu"}
	at := time.Duration(0)
	for i := range 240 {
		rank := i % 2
		host := time.Duration(137+i*53%9000) * time.Microsecond
		r := profiler.Record{Name: names[i%4], Rank: rank, Tag: []string{"Step_1", "Step_10", "Step_2"}[i/80], HostStart: at, HostEnd: at + host}
		if r.Name != "to_cpu" {
			r.HasDevice, r.DeviceStart, r.DeviceEnd = true, at, at+host*9/10+333
			r.Device.Index = rank
		}
		at += host / 2
		recs = append(recs, r)
	}
	log := writeSeedLog(recs, func(r profiler.Record) time.Time { return start.Add(r.HostEnd) })
	p, err := ParseSeed("log", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != len(recs) {
		t.Fatalf("%d records back, want %d", len(p.Records), len(recs))
	}
	type key struct {
		rank      int
		tag, name string
	}
	type sums struct{ n, host, dev int64 }
	want := map[key]sums{}
	for _, r := range recs {
		k := key{r.Rank, r.Tag, r.Name}
		s := want[k]
		s.n++
		s.host += int64(r.HostDuration() / time.Microsecond)
		s.dev += int64(r.DeviceDuration() / time.Microsecond)
		want[k] = s
	}
	groups := profiler.Summarize(Combine([]*Profile{p}))
	got := 0
	for _, g := range groups {
		for _, n := range g.Names {
			w := want[key{g.Rank, g.Tag, n.Name}]
			if int64(n.Count) != w.n || n.HostTotal != time.Duration(w.host)*time.Microsecond || n.DeviceTotal != time.Duration(w.dev)*time.Microsecond {
				t.Errorf("rank %d %s %s: %d, %v, %v; want %d, %d µs, %d µs", g.Rank, g.Tag, n.Name, n.Count, n.HostTotal, n.DeviceTotal, w.n, w.host, w.dev)
			}
			got++
		}
	}
	if got != len(want) {
		t.Errorf("%d rows, want %d", got, len(want))
	}
}
