package chrometrace_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// nsRounded reads a time as the Perfetto trace processor reads it since
// v51: integral microseconds exactly, any other value rounded to the
// nearest nanosecond (llround(µs × 1000)).
func nsRounded(t *testing.T, n json.Number) int64 {
	t.Helper()
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		t.Fatalf("time %q: %v", n, err)
	}
	if f == math.Trunc(f) {
		return int64(f) * 1000
	}
	return int64(math.Round(f * 1000))
}

// Back-to-back kernels on one stream, a child that ends with its parent
// and a zero-length range: Perfetto, which rounds times, must read every
// event at its record's exact nanoseconds, or it sees the next kernel
// start inside the previous one and drops it as an overlapping event.
func TestTimesReadByRoundingReader(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	type iv struct{ start, end time.Duration }
	host := map[string]iv{
		"step":   {1 * us, 31 * us},
		"fwd":    {1 * us, 11 * us},  // starts with step
		"bwd":    {11 * us, 31 * us}, // starts as fwd ends, ends with step
		"marker": {31 * us, 31 * us}, // zero length, at step's end
	}
	device := map[string]iv{
		"fwd": {40 * us, 50*us + 1},
		"bwd": {50*us + 1, 70*us + 999},
	}
	var recs []profiler.Record
	for i, name := range []string{"step", "fwd", "bwd", "marker"} {
		r := profiler.Record{ID: uint64(i + 1), Name: name, Rank: 0, Device: dev, Labels: profiler.NoLabels,
			HostStart: host[name].start, HostEnd: host[name].end}
		if d, ok := device[name]; ok {
			r.Kind, r.HasDevice, r.DeviceStart, r.DeviceEnd, r.Stream = profiler.KindDevice, true, d.start, d.end, 1
			r.Parent, r.Depth = 1, 1
		}
		recs = append(recs, r)
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		t.Fatal(err)
	}
	p := parse(t, buf.Bytes())
	type span struct {
		start, end int64
		name       string
	}
	tracks := map[[2]int][]span{}
	for _, e := range p.complete {
		track := p.thread[[2]int{*e.Pid, *e.Tid}]
		want, ok := host[e.Name]
		if track != "host" {
			want, ok = device[e.Name]
		}
		if !ok {
			t.Fatalf("unexpected event %s on %s", e.Name, track)
		}
		start := nsRounded(t, e.Ts)
		end := start + nsRounded(t, e.Dur)
		if start != int64(want.start) || end != int64(want.end) {
			t.Errorf("%s on %s read as [%d, %d] ns, recorded [%d, %d]", e.Name, track, start, end, want.start, want.end)
		}
		k := [2]int{*e.Pid, *e.Tid}
		tracks[k] = append(tracks[k], span{start, end, e.Name})
	}
	// In file order, as Perfetto meets them: no event may start inside an
	// open one and end after it.
	for k, spans := range tracks {
		var open []span
		for _, s := range spans {
			// Perfetto's slice tracker closes an open event that ends before
			// this one starts, or as it starts unless both are instants.
			for len(open) > 0 {
				o := open[len(open)-1]
				if o.end > s.start || (o.end == s.start && o.start == o.end && s.start == s.end) {
					break
				}
				open = open[:len(open)-1]
			}
			if len(open) > 0 && s.end > open[len(open)-1].end {
				o := open[len(open)-1]
				t.Errorf("track %s: %s [%d, %d] overlaps %s [%d, %d]", p.thread[k], s.name, s.start, s.end, o.name, o.start, o.end)
			}
			open = append(open, s)
		}
	}
}
