package ncclplugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// clockOp is one all-reduce of one channel as its process's plugin sends
// it: enqueued at host (CLOCK_MONOTONIC ns), the channel running from
// 10 µs to 30 µs after that on a GPU whose %globaltimer reads ahead ns
// more than CLOCK_MONOTONIC, the proxy reporting its start and stop 1 µs
// late. The device start lies 11 µs after the enqueue on the host clock
// (10 µs, plus the 1 µs delay the estimate cannot see).
type clockOp struct {
	task, hash uint64
	rank       int32
	host       uint64
	ahead      int64
	early      uint64 // how long before its enqueue the channel's timer reads (0: a sound timer)
}

func (o clockOp) frames() [][]byte {
	gpu := func(h uint64) uint64 { return uint64(int64(h) + o.ahead) }
	start := gpu(o.host+10_000) - o.early
	return [][]byte{
		wireRec{kind: 2, hash: o.hash, task: o.task, seq: o.task, t0: o.host, t1: o.host + 5_000, a0: 256, a1: 1024, rank: o.rank, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: o.hash, task: o.task, seq: o.task, rank: o.rank, nranks: 2, fn: 1, parent: 2, channel: 0,
			t0: start, t1: gpu(o.host + 30_000), a0: o.host + 11_000, a1: o.host + 31_000}.frame(),
	}
}

func opStream(pid uint32, head [][]byte, ops []clockOp) []byte {
	parts := append([][]byte{helloFrame(wireVersion, pid, "n0")}, head...)
	for _, o := range ops {
		parts = append(parts, o.frames()...)
	}
	return stream(parts...)
}

// bySeq orders records by their operation's sequence number, which the
// tests here number as the tasks.
func bySeq(recs []profiler.Record) []profiler.Record {
	slices.SortFunc(recs, func(a, b profiler.Record) int { return cmp.Compare(a.Collective.Seq, b.Collective.Seq) })
	return recs
}

// TestCollectorClockPerDevice: a process driving two GPUs whose
// %globaltimers differ by 3 ms, as ranks 0 and 1 of one communicator
// (ncclCommInitAll: the same commHash for both) or as ranks of two
// communicators. Each GPU's times go through its own offset: every
// operation starts on its device 11 µs after its enqueue, carries its
// rank's device, and no timer is taken for stale, nor the clocks for in
// conflict.
func TestCollectorClockPerDevice(t *testing.T) {
	const host = 10_000_000_000
	const ahead0, ahead1 = 5_000_000_000, 5_003_000_000
	for _, tc := range []struct {
		name         string
		hash0, hash1 uint64
	}{
		{"one communicator", 0x51, 0x51},
		{"two communicators", 0x51, 0x52},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, sink, _ := newTestCollector(t)
			head := [][]byte{
				wireRec{kind: 1, hash: tc.hash0, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
				wireRec{kind: 1, hash: tc.hash1, rank: 1, nranks: 2, nnodes: 1, peer: 1}.frame(),
			}
			var ops []clockOp
			for i := range uint64(6) {
				// Device 1 first: its offset is the smaller one, which a
				// single estimate would take for device 0's too.
				ops = append(ops,
					clockOp{task: 2*i + 1, hash: tc.hash1, rank: 1, host: host + i*1_000_000, ahead: ahead1},
					clockOp{task: 2*i + 2, hash: tc.hash0, rank: 0, host: host + i*1_000_000 + 500_000, ahead: ahead0})
			}
			send(t, c, opStream(400, head, ops), false)
			recs := bySeq(sink.wait(t, len(ops)))
			for _, r := range recs {
				wantDev := int(r.Collective.Seq >> 4 % 2) // odd tasks on rank 1, device 1
				if r.Rank != wantDev || r.Device.Index != wantDev {
					t.Errorf("op %d: rank %d on device %d, want rank and device %d", r.Collective.Seq>>4, r.Rank, r.Device.Index, wantDev)
				}
				if got := r.DeviceStart - r.HostStart; !r.HasDevice || got != 11*time.Microsecond || r.DeviceDuration() != 20*time.Microsecond {
					t.Errorf("op %d (rank %d): device %v, start %v after its enqueue, lasting %v; want 11µs and 20µs",
						r.Collective.Seq>>4, r.Rank, r.HasDevice, got, r.DeviceDuration())
				}
			}
			if st := c.Stats(); st.ClockConflicts != 0 || st.StaleComms != 0 || st.StaleChannels != 0 || st.HostOnly != 0 {
				t.Errorf("stats: %d clock conflicts (%q), %d stale communicators, %d stale channels, %d host-only; want none",
					st.ClockConflicts, st.ClockConflict, st.StaleComms, st.StaleChannels, st.HostOnly)
			}
		})
	}
}

// TestCollectorClockConflictNamesTheDevice: of a process's two GPUs,
// device 1's bounds cross by 500 µs; device 0's are sound and its times
// stay right. The conflict is counted once and names device 1.
func TestCollectorClockConflictNamesTheDevice(t *testing.T) {
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	c, sink, _ := newTestCollector(t)
	head := [][]byte{
		wireRec{kind: 1, hash: 0x61, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 1, hash: 0x62, rank: 1, nranks: 2, nnodes: 1, peer: 1}.frame(),
	}
	ops := []clockOp{
		{task: 1, hash: 0x61, rank: 0, host: host, ahead: ahead},
		{task: 2, hash: 0x62, rank: 1, host: host + 100_000, ahead: ahead},
		{task: 3, hash: 0x62, rank: 1, host: host + 1_000_000, ahead: ahead, early: 510_000},
		{task: 4, hash: 0x61, rank: 0, host: host + 2_000_000, ahead: ahead},
	}
	send(t, c, opStream(401, head, ops), false)
	recs := bySeq(sink.wait(t, len(ops)))
	for _, i := range []int{0, 3} {
		if r := recs[i]; !r.HasDevice || r.DeviceStart-r.HostStart != 11*time.Microsecond {
			t.Errorf("device 0's op %d: device %v, start %v after its enqueue; want 11µs", i+1, r.HasDevice, r.DeviceStart-r.HostStart)
		}
	}
	st := c.Stats()
	if st.ClockConflicts != 1 || !strings.Contains(st.ClockConflict, "rank 1's AllReduce") || !strings.Contains(st.ClockConflict, "CUDA device 1") {
		t.Errorf("%d clock conflicts, first %q; want 1, naming rank 1's all-reduce and CUDA device 1", st.ClockConflicts, st.ClockConflict)
	}
}

// TestCollectorClockEstimatesBounded: a stream naming thousands of CUDA
// devices keeps a bounded number of clock estimates, and its operations
// are still timed.
func TestCollectorClockEstimatesBounded(t *testing.T) {
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	c, sink, _ := newTestCollector(t)
	const n = 5000
	var head [][]byte
	var ops []clockOp
	for i := range uint64(n) {
		head = append(head, wireRec{kind: 1, hash: 0x1000 + i, rank: 0, nranks: 2, nnodes: 1, peer: int32(i)}.frame())
		ops = append(ops, clockOp{task: i + 1, hash: 0x1000 + i, rank: 0, host: host + i*100_000, ahead: ahead})
	}
	send(t, c, opStream(402, head, ops), false)
	recs := sink.wait(t, n)
	for _, r := range recs {
		if !r.HasDevice {
			t.Fatalf("op %d host-only", r.Collective.Seq>>4)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pr := range c.procs {
		if len(pr.clocks) > maxClocks+1 {
			t.Errorf("%d clock estimates kept for one process; want at most %d", len(pr.clocks), maxClocks+1)
		}
	}
}

// TestCollectorClockStep: mid-run the GPU's %globaltimer steps by 5 ms
// against CLOCK_MONOTONIC, forward or back, and stays there. The
// estimate follows it: every operation after the first few past the
// step starts on the device 11 µs after its enqueue, as before it, no
// communicator is distrusted, no conflict is left, and the step is
// counted.
func TestCollectorClockStep(t *testing.T) {
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	for _, step := range []int64{5_000_000, -5_000_000} {
		t.Run(fmt.Sprint(time.Duration(step)), func(t *testing.T) {
			c, sink, _ := newTestCollector(t)
			head := [][]byte{
				wireRec{kind: 1, hash: 0x71, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
				wireRec{kind: 1, hash: 0x72, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
			}
			var ops []clockOp
			const before, after = 8, 16
			for i := range uint64(before + after) {
				a := int64(ahead)
				if i >= before {
					a += step
				}
				ops = append(ops, clockOp{task: i + 1, hash: 0x71 + i%2, rank: 0, host: host + i*1_000_000, ahead: a})
			}
			send(t, c, opStream(403, head, ops), false)
			recs := bySeq(sink.wait(t, len(ops)))
			for i, r := range recs {
				if i >= before && i < before+2 {
					continue // the step is not known yet
				}
				if got := r.DeviceStart - r.HostStart; !r.HasDevice || got != 11*time.Microsecond || r.DeviceDuration() != 20*time.Microsecond {
					t.Errorf("op %d: device %v, start %v after its enqueue, lasting %v; want 11µs and 20µs", i+1, r.HasDevice, got, r.DeviceDuration())
				}
			}
			st := c.Stats()
			if st.ClockConflicts != 0 || st.StaleComms != 0 || st.ClockSteps != 1 {
				t.Errorf("stats: %d clock conflicts (%q), %d stale communicators, %d clock steps; want 0, 0, 1",
					st.ClockConflicts, st.ClockConflict, st.StaleComms, st.ClockSteps)
			}
		})
	}
}

// TestCollectorStaleTimersAreNoStep: every channel of one communicator
// reads a time 36 ms to 3 s before its operation (another kernel's
// timer), by a different amount each time. That is no step of the
// clock: the communicator is distrusted, no step is taken, and another
// communicator's operations keep their times.
func TestCollectorStaleTimersAreNoStep(t *testing.T) {
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	c, sink, _ := newTestCollector(t)
	head := [][]byte{
		wireRec{kind: 1, hash: 0x81, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 1, hash: 0x82, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
	}
	ops := []clockOp{{task: 1, hash: 0x82, rank: 0, host: host, ahead: ahead}}
	for i, early := range []uint64{36_000_000, 900_000_000, 3_000_000_000, 41_000_000, 250_000_000, 1_500_000_000} {
		ops = append(ops, clockOp{task: uint64(i) + 2, hash: 0x81, rank: 0, host: host + 4_000_000_000 + uint64(i)*10_000_000, ahead: ahead, early: early})
	}
	ops = append(ops, clockOp{task: 8, hash: 0x82, rank: 0, host: host + 5_000_000_000, ahead: ahead})
	send(t, c, opStream(404, head, ops), false)
	recs := bySeq(sink.wait(t, len(ops)))
	for _, i := range []int{0, 7} {
		if r := recs[i]; !r.HasDevice || r.DeviceStart-r.HostStart != 11*time.Microsecond {
			t.Errorf("op %d over the sound communicator: device %v, start %v after its enqueue; want 11µs", i+1, r.HasDevice, r.DeviceStart-r.HostStart)
		}
	}
	for _, r := range recs[2:7] {
		if r.HasDevice {
			t.Errorf("op %d with a stale timer has device time %v", r.Collective.Seq>>4, r.DeviceStart-r.HostStart)
		}
	}
	if st := c.Stats(); st.StaleComms != 1 || st.ClockSteps != 0 || st.ClockConflicts != 0 {
		t.Errorf("stats: %d stale communicators, %d clock steps, %d clock conflicts; want 1, 0, 0", st.StaleComms, st.ClockSteps, st.ClockConflicts)
	}
}

// TestCollectorStaleTimersOfOneGPU: one process drives two GPUs as ranks
// 0 and 1 of one communicator (ncclCommInitAll: one commHash). Rank 0's
// channels read stale timers; what is distrusted is that communicator on
// rank 0's GPU, and rank 1's operations on the other GPU keep their
// times.
func TestCollectorStaleTimersOfOneGPU(t *testing.T) {
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	c, sink, _ := newTestCollector(t)
	head := [][]byte{
		wireRec{kind: 1, hash: 0x91, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 1, hash: 0x91, rank: 1, nranks: 2, nnodes: 1, peer: 1}.frame(),
	}
	ops := []clockOp{
		{task: 1, hash: 0x91, rank: 0, host: host, ahead: ahead},
		{task: 2, hash: 0x91, rank: 1, host: host + 100_000, ahead: ahead},
	}
	task := uint64(3)
	for i, early := range []uint64{36_000_000, 900_000_000, 3_000_000_000, 41_000_000, 250_000_000, 1_500_000_000} {
		at := host + 4_000_000_000 + uint64(i)*10_000_000
		ops = append(ops,
			clockOp{task: task, hash: 0x91, rank: 0, host: at, ahead: ahead, early: early},
			clockOp{task: task + 1, hash: 0x91, rank: 1, host: at + 500_000, ahead: ahead})
		task += 2
	}
	send(t, c, opStream(405, head, ops), false)
	recs := bySeq(sink.wait(t, len(ops)))
	stale := 0
	for _, r := range recs {
		switch {
		case r.Rank == 1 && (!r.HasDevice || r.DeviceStart-r.HostStart != 11*time.Microsecond):
			t.Errorf("rank 1's op %d on the sound GPU: device %v, start %v after its enqueue; want 11µs", r.Collective.Seq>>4, r.HasDevice, r.DeviceStart-r.HostStart)
		case r.Rank == 0 && r.Collective.Seq>>4 > 1 && r.HasDevice:
			t.Errorf("rank 0's op %d with a stale timer has device time %v", r.Collective.Seq>>4, r.DeviceStart-r.HostStart)
		case r.Rank == 0 && r.Collective.Seq>>4 > 1:
			stale++
		}
	}
	if stale != 6 {
		t.Errorf("%d of rank 0's 6 stale operations without device time", stale)
	}
	if st := c.Stats(); st.StaleComms != 1 || st.ClockSteps != 0 {
		t.Errorf("stats: %d stale communicators, %d clock steps; want 1 and 0", st.StaleComms, st.ClockSteps)
	}
}

// TestCollectorCountsProxyOrphans: proxy-operation records that find no
// operation to go to are lost and counted as orphans: a stop whose start
// the plugin's ring dropped let its p2p go before the other proxy
// operation stopped, whose stop then came too late; and a start and stop
// of a p2p whose own record was lost.
func TestCollectorCountsProxyOrphans(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	const hash = 0x91
	proxy := func(task uint64, channel uint8, start, stop uint64) []byte {
		return wireRec{kind: 7, hash: hash, task: task, rank: 0, nranks: 2, peer: 1, fn: 6, parent: 3, channel: channel,
			t0: start, t1: stop, a0: 1}.frame()
	}
	send(t, c, stream(
		helloFrame(wireVersion, 405, "n0"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 2, peer: 0}.frame(),
		wireRec{kind: 3, hash: hash, task: 1, t0: host, t1: host + 2_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: 1,
			fn: 6, dtype: 8, nch: 1}.frame(),
		proxy(1, 0, host+3_000, 0), // channel 1's start was dropped
		wireRec{kind: 4, hash: hash, task: 1, rank: 0, nranks: 2, peer: 1, fn: 6, parent: 3, channel: 0,
			t0: host + ahead + 10_000, t1: host + ahead + 50_000, a0: host + 11_000, a1: host + 51_000}.frame(),
		proxy(1, 1, host+3_000, host+200_000),
		proxy(1, 0, host+3_000, host+400_000), // after its p2p went
		proxy(7, 0, host+5_000, 0),            // p2p 7's own record was dropped
		proxy(7, 0, host+5_000, host+90_000),
		wireRec{kind: 5, a0: 3}.frame(),
	), false)
	recs := sink.wait(t, 1)
	if r := recs[0]; r.Name != "Send" || r.Collective.TransferEnd-r.HostStart != 200*time.Microsecond {
		t.Errorf("%s: transfer ends %v after its enqueue, want 200µs (the stop that came in time)", r.Name, r.Collective.TransferEnd-r.HostStart)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Orphans != 3 || st.PluginRingFull != 3 || st.Records != 1 {
		t.Errorf("stats: %d orphans, %d ring full, %d records; want 3 proxy records orphaned, 3, 1", st.Orphans, st.PluginRingFull, st.Records)
	}
}

// TestCollectorQueuedGPUOfAnotherRank: one process holds ranks 0 and 1
// of a communicator (ncclCommInitAll), each on its own GPU. Rank 0's GPU
// finishes an operation enqueued after one of rank 1's that rank 1's
// busier GPU has not yet run: that one still waits for its channels, and
// is timed when they come.
func TestCollectorQueuedGPUOfAnotherRank(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithLinger(20*time.Millisecond))
	const host = 10_000_000_000
	const ahead = 5_000_000_000
	const hash = 0xa1
	late := clockOp{task: 1, hash: hash, rank: 1, host: host, ahead: ahead}.frames()
	conn := send(t, c, stream(
		helloFrame(wireVersion, 406, "n0"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 1, hash: hash, rank: 1, nranks: 2, nnodes: 1, peer: 1}.frame(),
		late[0],
		opStream(406, nil, []clockOp{{task: 2, hash: hash, rank: 0, host: host + 100_000, ahead: ahead}})[RecordSize:],
	), true)
	defer conn.Close()
	sink.wait(t, 1)
	// Many lingers pass: rank 1's operation must not be given up.
	time.Sleep(200 * time.Millisecond)
	if recs := sink.records(); len(recs) != 1 {
		t.Fatalf("%d operations delivered, want only rank 0's while rank 1's GPU may still run its own", len(recs))
	}
	if _, err := conn.Write(late[1]); err != nil {
		t.Fatal(err)
	}
	recs := bySeq(sink.wait(t, 2))
	if r := recs[0]; r.Rank != 1 || !r.HasDevice || r.DeviceStart-r.HostStart != 11*time.Microsecond {
		t.Errorf("rank %d's operation: device %v, start %v after its enqueue; want rank 1's, 11µs", r.Rank, r.HasDevice, r.DeviceStart-r.HostStart)
	}
}
