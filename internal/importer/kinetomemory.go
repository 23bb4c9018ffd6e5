package importer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// memSample is one "[memory]" instant of a trace recorded with
// profile_memory=True: a device allocator's totals after an allocation or
// a free.
type memSample struct {
	at                  int64 // ns on the file's clock
	device              int64 // the device's index
	allocated, reserved int64 // bytes
}

// memoryEvent keeps a device allocator's "[memory]" instant; the host
// allocator's (Device Type 0) and those without totals are read past.
func memoryEvent(ev *kinetoEvent, mems *[]memSample, fail func(error) error) error {
	a := &ev.Args
	if a.DeviceType == nil || a.DeviceType.V == 0 || a.TotalAllocated == nil {
		return nil
	}
	ts, err := microsToNanos(numberText(ev.Ts))
	if err != nil {
		return fail(fmt.Errorf("[memory] event: ts: %w", err))
	}
	if ts > 1<<62 || ts < -(1<<62) {
		return fail(fmt.Errorf("[memory] event: ts %s out of range", ev.Ts))
	}
	s := memSample{at: ts, allocated: max(a.TotalAllocated.V, 0)}
	if a.DeviceID != nil {
		s.device = a.DeviceID.V
	}
	if a.TotalReserved != nil {
		s.reserved = max(a.TotalReserved.V, 0)
	}
	*mems = append(*mems, s)
	return nil
}

// peakMemory gives each top-level range of the trace (the step ranges,
// and any other range no range encloses) the highest total the device
// allocator held while it was open — its PeakMemory, which the report
// gives per rank and per step — and the profile the highest of the whole
// trace. The device is the one the rank's kernels ran on; where none did,
// the one with the most events.
func peakMemory(p *Profile, mems []memSample) {
	if len(mems) == 0 {
		return
	}
	device := int64(-1)
	kernels := map[int]int{}
	for i := range p.Records {
		if r := &p.Records[i]; r.HasDevice && r.Device.Type != runtime.CPU {
			kernels[r.Device.Index]++
		}
	}
	if len(kernels) > 0 {
		best := slices.MaxFunc(slices.Collect(maps.Keys(kernels)), func(a, b int) int {
			return cmp.Or(cmp.Compare(kernels[a], kernels[b]), cmp.Compare(b, a))
		})
		device = int64(best)
	} else {
		events := map[int64]int{}
		for _, m := range mems {
			events[m.device]++
		}
		device = slices.MaxFunc(slices.Collect(maps.Keys(events)), func(a, b int64) int {
			return cmp.Or(cmp.Compare(events[a], events[b]), cmp.Compare(b, a))
		})
	}
	var on []memSample
	for _, m := range mems {
		if m.device == device {
			on = append(on, m)
		}
	}
	if len(on) == 0 {
		p.warnf("%s: %d [memory] events, none of device %d, which the rank's kernels ran on", p.Path, len(mems), device)
		return
	}
	slices.SortFunc(on, func(a, b memSample) int { return cmp.Compare(a.at, b.at) })
	for _, m := range on {
		p.PeakMemory = max(p.PeakMemory, m.allocated)
		p.PeakReserved = max(p.PeakReserved, m.reserved)
	}
	p.MemoryEvents = len(on)
	// The highest of any run of samples in O(log n): a segment tree over
	// them in time order (a trace's ranges may each span many samples).
	n := len(on)
	tree := make([]int64, 2*n)
	for i, m := range on {
		tree[n+i] = m.allocated
	}
	for i := n - 1; i > 0; i-- {
		tree[i] = max(tree[2*i], tree[2*i+1])
	}
	highest := func(lo, hi int) int64 { // samples [lo, hi)
		var v int64
		for lo, hi = lo+n, hi+n; lo < hi; lo, hi = lo/2, hi/2 {
			if lo&1 == 1 {
				v = max(v, tree[lo])
				lo++
			}
			if hi&1 == 1 {
				hi--
				v = max(v, tree[hi])
			}
		}
		return v
	}
	at := func(t time.Duration) int {
		i, _ := slices.BinarySearchFunc(on, int64(t), func(m memSample, t int64) int { return cmp.Compare(m.at, t) })
		return i
	}
	for i := range p.Records {
		r := &p.Records[i]
		if r.Depth != 0 || r.Kind != profiler.KindHost {
			continue
		}
		// Samples at or after the start and at or before the end.
		if lo, hi := at(r.HostStart), at(r.HostEnd+1); lo < hi {
			r.PeakMemory = max(r.PeakMemory, highest(lo, hi))
		}
	}
}
