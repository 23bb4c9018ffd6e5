package ncclplugin

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"net"
	"reflect"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trainscope/trainscope/internal/testmem"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// capture is a profiler sink keeping every record.
type capture struct {
	mu   sync.Mutex
	recs []profiler.Record
}

func (c *capture) Consume(b []profiler.Record) {
	c.mu.Lock()
	c.recs = append(c.recs, b...)
	c.mu.Unlock()
}

func (c *capture) records() []profiler.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]profiler.Record(nil), c.recs...)
}

func (c *capture) wait(t *testing.T, n int) []profiler.Record {
	t.Helper()
	// A deadline only for a failure: the records come in milliseconds,
	// but 65,537 of them under the race detector on a loaded machine
	// have taken over 5 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		have := len(c.recs)
		c.mu.Unlock()
		if have >= n || time.Now().After(deadline) {
			c.mu.Lock()
			got := append([]profiler.Record(nil), c.recs...)
			c.mu.Unlock()
			if len(got) != n {
				t.Fatalf("%d records, want %d: %+v", len(got), n, got)
			}
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTestCollector(t *testing.T, opts ...Option) (*Collector, *capture, *profiler.Profiler) {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	sink := &capture{}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	c, err := NewCollector(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close(context.Background())
		p.Close(context.Background())
	})
	return c, sink, p
}

func send(t *testing.T, c *Collector, data []byte, keepOpen bool) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", c.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	if !keepOpen {
		conn.Close()
		return nil
	}
	return conn
}

func byOp(recs []profiler.Record) map[string]profiler.Record {
	m := map[string]profiler.Record{}
	for _, r := range recs {
		m[r.Name] = r
	}
	return m
}

func TestCollectorMatchesKernelChannels(t *testing.T) {
	c, sink, p := newTestCollector(t)
	mono, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	sinceEpoch := time.Since(p.Epoch())
	host := uint64(mono)
	// The GPU's clock reads gpuAhead ns more than CLOCK_MONOTONIC; the
	// proxy reports channel 0's start 2 µs late and everything else later.
	const gpuAhead = 1_700_000_000_000_000_000 - 1_000_000_000
	gpu := func(hostNs uint64) uint64 { return hostNs + gpuAhead }
	const hash = 0x1234
	data := stream(
		helloFrame(wireVersion, 100, "n0"),
		wireRec{kind: 1, hash: hash, rank: 1, nranks: 4, nnodes: 1, peer: 3, name: "dp"}.frame(),
		// The second channel's report arrives before its collective's record.
		wireRec{kind: 4, hash: hash, task: 1, seq: 9, rank: 1, nranks: 4, fn: 1, parent: 2, channel: 1,
			t0: gpu(host + 30_000), t1: gpu(host + 90_000), a0: host + 40_000, a1: host + 95_000}.frame(),
		wireRec{kind: 2, hash: hash, task: 1, seq: 9, t0: host, t1: host + 15_000, a0: 1 << 20, a1: 4 << 20, rank: 1, nranks: 4, peer: -1,
			fn: 1, dtype: 8, algo: 2, proto: 3, nch: 2, name: "dp"}.frame(),
		wireRec{kind: 4, hash: hash, task: 1, seq: 9, rank: 1, nranks: 4, fn: 1, parent: 2, channel: 0,
			t0: gpu(host + 20_000), t1: gpu(host + 80_000), a0: host + 22_000, a1: host + 84_000}.frame(),
		// AllGather of 1000 float16 per rank over 4 ranks: S is 8000 bytes.
		wireRec{kind: 2, hash: hash, task: 2, seq: 0, t0: host + 100_000, t1: host + 110_000, a0: 1000, a1: 2000, rank: 1, nranks: 4, peer: -1,
			fn: 4, dtype: 7, nch: 1, name: "dp"}.frame(),
		wireRec{kind: 4, hash: hash, task: 2, rank: 1, nranks: 4, fn: 4, parent: 2, channel: 0,
			t0: gpu(host + 120_000), t1: gpu(host + 170_000), a0: host + 125_000, a1: host + 175_000}.frame(),
		// A send with no kernel channel: host-only when the stream ends.
		wireRec{kind: 3, hash: hash, task: 3, seq: 5, t0: host + 200_000, t1: host + 201_000, a0: 10, a1: 40, rank: 1, nranks: 4, peer: 2,
			fn: 6, dtype: 3, nch: 1, name: "dp"}.frame(),
		wireRec{kind: 5, a0: 3, a1: 1, a2: 7}.frame(),
	)
	send(t, c, data, false)
	recs := byOp(sink.wait(t, 3))

	ar := recs["AllReduce"]
	if ar.Kind != profiler.KindCollective || ar.Rank != 1 || ar.Device.Index != 3 {
		t.Errorf("allreduce kind %v rank %d device %v", ar.Kind, ar.Rank, ar.Device)
	}
	if ar.Step != -1 || ar.Stage != -1 || ar.Chunk != -1 || ar.Microbatch != -1 {
		t.Errorf("allreduce labels %+v: NCCL knows no step, stage, chunk or microbatch", ar.Labels)
	}
	col := ar.Collective
	// The group is the communicator's name, told apart from others of the
	// name by NCCL's commHash.
	if col.Bytes != 4<<20 || col.Count != 1<<20 || col.DType != "float32" || col.Group != "dp" || col.GroupID != hash || col.GroupSize != 4 ||
		col.GroupRank != 1 || col.Seq != 9<<4|1 || col.Root != -1 || col.Peer != -1 { // NCCL's AllReduce #9
		t.Errorf("allreduce collective %+v", col)
	}
	if col.BusFactor != 1.5 { // 2(n−1)/n, n = 4
		t.Errorf("allreduce bus factor %v, want 1.5", col.BusFactor)
	}
	// Host times: CLOCK_MONOTONIC placed on the profiler's clock.
	if d := ar.HostStart - sinceEpoch; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("host start %v, read %v since epoch at the same moment", ar.HostStart, sinceEpoch)
	}
	if ar.HostDuration() != 15*time.Microsecond {
		t.Errorf("host duration %v, want 15µs", ar.HostDuration())
	}
	// Device: first channel start to last channel stop; the offset is the
	// smallest report delay seen (2 µs, channel 0's start).
	if !ar.HasDevice || ar.DeviceDuration() != 70*time.Microsecond {
		t.Fatalf("allreduce device %v %v", ar.HasDevice, ar.DeviceDuration())
	}
	if got, want := ar.DeviceStart-ar.HostStart, 22*time.Microsecond; got != want {
		t.Errorf("device start − host start %v, want %v (20 µs + 2 µs report delay)", got, want)
	}
	wantBus := float64(4<<20) / 70e-6 * 1.5
	if math.Abs(ar.BusBandwidth-wantBus) > wantBus*1e-9 {
		t.Errorf("bus bandwidth %v, want %v", ar.BusBandwidth, wantBus)
	}

	ag := recs["AllGather"]
	if ag.Collective.Bytes != 8000 || ag.Collective.BusFactor != 0.75 || ag.DeviceDuration() != 50*time.Microsecond {
		t.Errorf("allgather bytes %d factor %v device %v", ag.Collective.Bytes, ag.Collective.BusFactor, ag.DeviceDuration())
	}

	s := recs["Send"]
	if s.Kind != profiler.KindP2P || s.HasDevice || s.Collective.Peer != 2 || s.Collective.Root != -1 || s.Collective.Bytes != 40 ||
		s.Collective.BusFactor != 1 || s.Collective.Seq != 5 {
		t.Errorf("send %+v", s)
	}

	st := c.Stats()
	if st.Records != 3 || st.HostOnly != 1 || st.KernelChannels != 3 || st.Processes != 1 || st.Connections != 1 ||
		st.PluginRingFull != 3 || st.PluginRefused != 1 || st.PluginUnsent != 7 || st.PluginDrops() != 11 || st.DecodeErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A grouped Send and Recv over a network transport: the kernel's channels
// stop after 40 µs (they only handed the data over), the proxy finishes
// the send 500 µs after the kernel started and the receive earlier. Each
// p2p waits for its proxy operations before it is delivered, and carries
// the latest proxy stop as its transfer end; the device interval stays
// the channels'. A stop whose start was lost still counts.
func TestCollectorProxyOperations(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	mono, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	host := uint64(mono)
	const gpuAhead = 1_000_000
	gpu := func(hostNs uint64) uint64 { return hostNs + gpuAhead }
	const hash = 0x77
	p2p := func(task uint64, fn uint8) []byte {
		return wireRec{kind: 3, hash: hash, task: task, seq: 0, t0: host, t1: host + 2_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: 1,
			fn: fn, dtype: 8, nch: 1, name: "pp"}.frame()
	}
	proxy := func(task uint64, fn uint8, start, stop uint64, isSend uint64) []byte {
		return wireRec{kind: 7, hash: hash, task: task, seq: 0, rank: 0, nranks: 2, peer: 1, fn: fn, parent: 3, channel: 0,
			t0: start, t1: stop, a0: isSend}.frame()
	}
	channel := func(task uint64, fn uint8) []byte {
		return wireRec{kind: 4, hash: hash, task: task, seq: 0, rank: 0, nranks: 2, peer: 1, fn: fn, parent: 3, channel: 0,
			t0: gpu(host + 10_000), t1: gpu(host + 50_000), a0: host + 11_000, a1: host + 51_000}.frame()
	}
	conn := send(t, c, stream(
		helloFrame(wireVersion, 300, "n0"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 2, peer: 0, name: "pp"}.frame(),
		p2p(1, 6), p2p(2, 7),
		// The proxy starts both when the host posts them, before the GPU
		// runs the kernel.
		proxy(1, 6, host+3_000, 0, 1), proxy(2, 7, host+3_000, 0, 0),
		channel(1, 6), channel(2, 7),
		proxy(2, 7, host+3_000, host+300_000, 0),
	), true)
	recv := sink.wait(t, 1)
	if len(recv) != 1 || recv[0].Name != "Recv" {
		t.Fatalf("delivered %d records (%v); want only the Recv while the Send's proxy operation runs", len(recv), recv)
	}
	if _, err := conn.Write(stream(proxy(1, 6, host+3_000, host+510_000, 1), proxy(3, 6, host+3_000, host+9_000, 1))); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	recs := byOp(sink.wait(t, 2))
	// The kernel's start is placed on the host clock at its report (1 µs
	// after it, the smallest delay seen): 11 µs after host.
	for op, want := range map[string]time.Duration{"Send": (510 - 11) * time.Microsecond, "Recv": (300 - 11) * time.Microsecond} {
		r := recs[op]
		if !r.HasDevice || r.DeviceDuration() != 40*time.Microsecond {
			t.Errorf("%s: device %v %v, want the channels' 40µs", op, r.HasDevice, r.DeviceDuration())
			continue
		}
		if got := r.Collective.TransferEnd - r.DeviceStart; got != want {
			t.Errorf("%s: transfer ends %v after the kernel started, want %v", op, got, want)
		}
	}
	if st := c.Stats(); st.ProxyTimed != 2 || st.Records != 2 {
		t.Errorf("stats %+v: want 2 records, both proxy-timed", st)
	}
}

func TestCollectorManyProcesses(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	var wg sync.WaitGroup
	const procs, ops = 8, 50
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts := [][]byte{helloFrame(wireVersion, uint32(1000+i), "n")}
			for k := range ops {
				task := uint64(k + 1)
				parts = append(parts,
					wireRec{kind: 2, hash: 7, task: task, seq: uint64(k), t0: 1000, t1: 2000, a0: 4, a1: 16, rank: int32(i), nranks: procs,
						peer: -1, fn: 5, dtype: 8, nch: 1}.frame(),
					wireRec{kind: 4, hash: 7, task: task, parent: 2, channel: 0, t0: 50, t1: 60, a0: 1500, a1: 1600}.frame())
			}
			send(t, c, stream(parts...), false)
		}()
	}
	wg.Wait()
	recs := sink.wait(t, procs*ops)
	seen := map[[2]int]bool{}
	for _, r := range recs {
		if r.Name != "ReduceScatter" || !r.HasDevice || r.DeviceDuration() != 10 || r.Collective.Bytes != 16*procs {
			t.Fatalf("record %+v", r)
		}
		seen[[2]int{r.Rank, int(r.Collective.Seq)}] = true
	}
	if len(seen) != procs*ops {
		t.Errorf("%d distinct (rank, seq), want %d", len(seen), procs*ops)
	}
	if st := c.Stats(); st.Processes != procs || st.Connections != procs || st.Records != procs*ops || st.HostOnly != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCollectorLingerAndClose(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithLinger(100*time.Millisecond))
	// One operation waits for a second channel that never comes; the
	// connection stays open, so only the linger delivers it.
	conn := send(t, c, stream(helloFrame(wireVersion, 5, "n"),
		wireRec{kind: 2, task: 1, t0: 10, t1: 20, rank: 0, nranks: 2, peer: 0, fn: 2, nch: 2, name: "g"}.frame(),
		wireRec{kind: 4, task: 1, parent: 2, channel: 0, t0: 100, t1: 130, a0: 30, a1: 40}.frame(),
		wireRec{kind: 4, task: 99, parent: 2, channel: 0, t0: 100, t1: 130, a0: 30, a1: 40}.frame(),
	), true)
	defer conn.Close()
	recs := sink.wait(t, 1)
	if recs[0].Name != "Broadcast" || recs[0].DeviceDuration() != 30 || recs[0].Collective.Root != 0 {
		t.Errorf("record %+v", recs[0])
	}
	// A second operation with no channel at all, then Close with the
	// connection still open: Close gives up at its deadline, closes it,
	// and delivers the operation host-only.
	if _, err := conn.Write(wireRec{kind: 3, task: 2, t0: 50, t1: 60, rank: 0, nranks: 2, peer: 1, fn: 7, nch: 1, name: "g"}.frame()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 plugin connection(s) still open") {
		t.Errorf("Close: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("Close took %v", time.Since(start))
	}
	recs = sink.wait(t, 2)
	if recs[1].Name != "Recv" || recs[1].HasDevice || recs[1].Collective.Peer != 1 {
		t.Errorf("record %+v", recs[1])
	}
	st := c.Stats()
	if st.Orphans != 1 || st.HostOnly != 1 || st.Records != 2 || st.Cut != 1 {
		t.Errorf("stats %+v; want 1 orphan, delivered host-only, of 2 records, and 1 connection cut", st)
	}
	if again := c.Close(context.Background()); again == nil || again.Error() != err.Error() {
		t.Errorf("second Close: %v", again)
	}
	if _, err := net.Dial("unix", c.SocketPath()); err == nil {
		t.Error("socket still accepting after Close")
	}
}

// Close under a context already done (a second signal to profile-run
// cancels it before the command's last records are collected) is no error
// when no connection is open: there was nothing to cut short.
func TestCollectorCloseWithNothingOpen(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	// Close chooses between the readers' end and ctx's: both are ready,
	// so one Close proves little. Many do.
	for i := range 50 {
		c, _, _ := newTestCollector(t)
		if err := c.Close(done); err != nil {
			t.Fatalf("Close #%d with no connection open: %v", i, err)
		}
	}
}

func TestCollectorCountsDecodeErrors(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	send(t, c, stream(helloFrame(wireVersion, 1, "n"),
		wireRec{kind: 2, task: 1, t0: 1, t1: 2, nranks: 1, peer: -1, fn: 1, nch: 1}.frame(),
		[]byte("garbage")), false)
	send(t, c, helloFrame(wireVersion+1, 2, "n"), false)
	deadline := time.Now().Add(5 * time.Second)
	for st := c.Stats(); (st.DecodeErrors < 1 || st.CutShort < 1) && time.Now().Before(deadline); st = c.Stats() {
		time.Sleep(5 * time.Millisecond)
	}
	// The stream ending in 7 bytes of a record is cut short, not
	// malformed; the other's version is what the error names.
	st := c.Stats()
	if st.DecodeErrors != 1 || st.CutShort != 1 || !strings.Contains(st.LastError, "version 4") {
		t.Errorf("stats %+v, want one stream cut short and one of version 4", st)
	}
	// The complete record before the garbage is delivered, host-only.
	recs := sink.wait(t, 1)
	if recs[0].Name != "AllReduce" || recs[0].HasDevice {
		t.Errorf("record %+v", recs[0])
	}
}

// TestCollectorRankFromLauncher checks that a process whose launcher set
// its rank is that rank on every communicator, its rank in each kept as
// the group rank; without one, the communicator's rank stands.
func TestCollectorRankFromLauncher(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	mono, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	host := uint64(mono)
	withRank := helloFrame(wireVersion, 200, "n1")
	binary.LittleEndian.PutUint32(withRank[96:], 6+1) // RANK=6
	coll := func(hash uint64, task uint64, rank int32, name string) []byte {
		return wireRec{kind: 2, hash: hash, task: task, seq: task, t0: host, t1: host + 1000, a0: 4, a1: 16, rank: rank, nranks: 2, peer: -1,
			fn: 1, dtype: 7, nch: 1, name: name}.frame()
	}
	send(t, c, stream(withRank, coll(1, 1, 1, "pp"), coll(2, 2, 0, "dp")), false)
	send(t, c, stream(helloFrame(wireVersion, 201, "n1"), coll(1, 1, 1, "pp")), false)
	got := map[string][]int{}
	for _, r := range sink.wait(t, 3) {
		key := fmt.Sprintf("%s rank %d", r.Collective.Group, r.Rank)
		got[key] = append(got[key], int(r.Collective.GroupRank))
	}
	want := map[string][]int{"pp rank 6": {1}, "dp rank 6": {0}, "pp rank 1": {1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("group, rank → group ranks: %v, want %v", got, want)
	}
}

// TestCollectorWaitsForAQueuedGPU checks that an operation with no kernel
// channel yet waits past the linger while the GPU may still be behind,
// and is delivered host-only once a later operation of its communicator
// has finished on the GPU.
func TestCollectorWaitsForAQueuedGPU(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithLinger(20*time.Millisecond))
	coll := func(hash, task, t0 uint64) []byte {
		return wireRec{kind: 2, hash: hash, task: task, seq: task, t0: t0, t1: t0 + 5, a0: 1, a1: 4, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 7, nch: 1, name: "g"}.frame()
	}
	conn := send(t, c, stream(helloFrame(wireVersion, 7, "n"),
		coll(1, 1, 100), // comm 1: queued; the GPU will pass it
		coll(2, 2, 100), // comm 2: queued; nothing passes it
	), true)
	defer conn.Close()
	// Many lingers pass with neither delivered: the GPU may be behind.
	time.Sleep(200 * time.Millisecond)
	if n := len(sink.records()); n != 0 {
		t.Fatalf("%d operations delivered while the GPU could still run them", n)
	}
	// A later operation of comm 1 runs on the GPU: task 1 will never get
	// its channels, and goes host-only after the linger.
	if _, err := conn.Write(stream(coll(1, 3, 200),
		wireRec{kind: 4, hash: 1, task: 3, parent: 2, channel: 0, t0: 1000, t1: 1010, a0: 300, a1: 310}.frame())); err != nil {
		t.Fatal(err)
	}
	recs := sink.wait(t, 2)
	got := map[uint64]bool{}
	for _, r := range recs {
		got[r.Collective.Seq>>4] = r.HasDevice // NCCL's number
	}
	if len(got) != 2 || got[1] || !got[3] {
		t.Errorf("seq → has device %v, want 1 host-only and 3 timed (2 still waiting)", got)
	}
	conn.Close()
	if recs := sink.wait(t, 3); recs[2].Collective.Seq>>4 != 2 || recs[2].HasDevice {
		t.Errorf("at the process's end, %+v", recs[2])
	}
}

// TestCollectorStepsFromRanges: the application's NVTX ranges become host
// ranges of its rank, its "step" ranges become steps, and its NCCL
// operations carry the step they were enqueued in. The process names no
// launcher rank, so its rank is its rank in its first communicator, which
// it makes after its first ranges (those wait for it). Its last step is
// still open when it ends: cut short at the latest time it reported.
func TestCollectorStepsFromRanges(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 1_000_000_000
	const hash = 0x99
	us := func(n uint64) uint64 { return host + n*1000 }
	coll := func(task uint64, at uint64) []byte {
		return wireRec{kind: 2, hash: hash, task: task, seq: task, t0: at, t1: at + 1000, a0: 8, a1: 32, rank: 1, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1, name: "dp"}.frame()
	}
	channel := func(task uint64, at uint64) []byte {
		return wireRec{kind: 4, hash: hash, task: task, seq: task, rank: 1, nranks: 2, fn: 1, parent: 2, channel: 0,
			t0: at + 5000, t1: at + 9000, a0: at + 5500, a1: at + 9500}.frame()
	}
	send(t, c, stream(helloFrame(wireVersion, 400, "n"),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step"),
		rangeFrame(10, 0, 2, 0, us(10), us(20), 1, "forward"),
		wireRec{kind: 1, hash: hash, rank: 1, nranks: 2, nnodes: 1, peer: 0, name: "dp"}.frame(),
		coll(1, us(30)), channel(1, us(30)),
		rangeFrame(10, 0, 1, 0, us(0), us(100), 0, "step"),
		coll(2, us(150)), channel(2, us(150)),
		rangeFrame(10, 1, 3, 0, us(200), 0, 0, "step 7"),
		rangeFrame(10, 0, 3, 2, us(200), us(300), 0, "step 7"),
		rangeFrame(10, 0, 4, 2, us(320), us(330), 0, "stepper"),
		rangeFrame(10, 1, 5, 2, us(400), 0, 0, "step"),
		rangeFrame(10, 0, 6, 2, us(410), us(450), 1, "optimizer"),
	), false)
	recs := sink.wait(t, 8)
	type got struct {
		name       string
		step       int32
		depth      int
		start, dur time.Duration
		cut        bool
	}
	var steps, others []got
	var base time.Duration
	for _, r := range recs {
		if r.Name == profiler.StepName && r.Step == 0 {
			base = r.HostStart
		}
	}
	for _, r := range recs {
		if r.Rank != 1 {
			t.Errorf("%s: rank %d, want 1 (its rank in communicator dp)", r.Name, r.Rank)
		}
		g := got{r.Name, r.Step, r.Depth, r.HostStart - base, r.HostDuration(), r.CutShort}
		if r.Name == profiler.StepName {
			steps = append(steps, g)
		} else {
			others = append(others, g)
		}
	}
	sortGot := func(v []got) {
		slices.SortFunc(v, func(a, b got) int { return cmp.Compare(a.start, b.start) })
	}
	sortGot(steps)
	sortGot(others)
	us2 := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	wantSteps := []got{
		{"step", 0, 0, 0, us2(100), false},
		{"step", 7, 0, us2(200), us2(100), false},
		// Numbered after the last: 8. Cut short at the optimizer's end.
		{"step", 8, 0, us2(400), us2(50), true},
	}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("steps\n got %+v\nwant %+v", steps, wantSteps)
	}
	wantOthers := []got{
		{"forward", 0, 1, us2(10), us2(10), false},
		{"AllReduce", 0, 0, us2(30), us2(1), false},
		{"AllReduce", -1, 0, us2(150), us2(1), false}, // between steps
		{"stepper", -1, 0, us2(320), us2(10), false},  // not a step range, and outside one
		{"optimizer", 8, 1, us2(410), us2(40), false},
	}
	if !slices.Equal(others, wantOthers) {
		t.Errorf("other ranges\n got %+v\nwant %+v", others, wantOthers)
	}
	if st := c.Stats(); st.Ranges != 6 || st.Steps != 3 || st.RangesLost != 2 || st.Records != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestCollectorHoldsStepsForTheirOperations: the host ends a step while
// the GPU has yet to run the all-reduce it enqueued; the step range is
// delivered only after the all-reduce, so that what accounts steps once
// later step ranges arrive has the step's operations by then.
func TestCollectorHoldsStepsForTheirOperations(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 2_000_000_000
	const hash = 0x42
	us := func(n uint64) uint64 { return host + n*1000 }
	conn := send(t, c, stream(helloFrame(wireVersion, 500, "n"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0, name: "dp"}.frame(),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step"),
		wireRec{kind: 2, hash: hash, task: 1, seq: 0, t0: us(10), t1: us(11), a0: 8, a1: 32, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1, name: "dp"}.frame(),
		rangeFrame(10, 0, 1, 0, us(0), us(20), 0, "step"),
		rangeFrame(10, 1, 2, 0, us(30), 0, 0, "step"),
		rangeFrame(10, 0, 2, 0, us(30), us(40), 0, "step"),
	), true)
	defer conn.Close()
	// Step 1 enqueued nothing: it may not overtake step 0, held for the
	// all-reduce. Nothing arrives until the GPU has run it.
	time.Sleep(50 * time.Millisecond)
	if got := sink.records(); len(got) != 0 {
		t.Fatalf("%d records before the all-reduce ran: %+v", len(got), got)
	}
	if _, err := conn.Write(wireRec{kind: 4, hash: hash, task: 1, seq: 0, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
		t0: us(500), t1: us(900), a0: us(501), a1: us(901)}.frame()); err != nil {
		t.Fatal(err)
	}
	recs := sink.wait(t, 3)
	var order []string
	for _, r := range recs {
		order = append(order, fmt.Sprintf("%s/%d", r.Name, r.Step))
	}
	if want := []string{"AllReduce/0", "step/0", "step/1"}; !slices.Equal(order, want) {
		t.Errorf("delivered %v, want %v", order, want)
	}
}

// TestCollectorLocalSize: the launcher's number of processes on the host,
// from the hello (local size + 1 at byte 100), reaches WithLocalSize each
// time it grows.
func TestCollectorLocalSize(t *testing.T) {
	var mu sync.Mutex
	var got []int
	c, _, _ := newTestCollector(t, WithLocalSize(func(n int) { mu.Lock(); got = append(got, n); mu.Unlock() }))
	hello := func(pid uint32, size1 uint32) []byte {
		b := helloFrame(wireVersion, pid, "n")
		binary.LittleEndian.PutUint32(b[100:], size1)
		return b
	}
	reported := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	// One at a time: each hello's process is registered, and a growth
	// reported, before the next connects.
	for i, size1 := range []uint32{0, 5, 3, 9} { // not set, 4, 2, 8
		want := []int{0, 1, 1, 2}[i]
		send(t, c, hello(uint32(700+i), size1), false)
		deadline := time.Now().Add(5 * time.Second)
		for (c.Stats().Processes < i+1 || reported() < want) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []int{4, 8}) {
		t.Errorf("world sizes reported %v, want [4 8]", got)
	}
}

// TestCollectorStepEdgeCases: a range pushed with an empty name (kept,
// named "(unnamed)", its batch not refused); step names that restart at 0
// each epoch (numbers keep increasing); a step whose end record was lost
// (cut short where the thread's next step starts); and step ranges on the
// device of the process's communicator, as its operations are, so that
// the step accountants find them together.
func TestCollectorStepEdgeCases(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 3_000_000_000
	const hash = 0x51
	us := func(n uint64) uint64 { return host + n*1000 }
	step := func(ord uint64, from, to uint64, name string) []byte {
		return stream(rangeFrame(10, 1, ord, 0, us(from), 0, 0, name), rangeFrame(10, 0, ord, 0, us(from), us(to), 0, name))
	}
	send(t, c, stream(helloFrame(wireVersion, 600, "n"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 5, name: "dp"}.frame(),
		step(1, 0, 10, "step 0"), step(2, 20, 30, "step 1"),
		rangeFrame(10, 0, 3, 0, us(32), us(33), 0, ""),
		step(4, 40, 50, "step 0"),                       // a new epoch
		rangeFrame(10, 1, 5, 0, us(60), 0, 0, "step 1"), // its end record lost
		step(6, 80, 90, "step 2"),
	), false)
	recs := sink.wait(t, 6)
	type got struct {
		name  string
		step  int32
		start time.Duration
		cut   bool
	}
	var all []got
	base := recs[0].HostStart
	for _, r := range recs {
		base = min(base, r.HostStart)
	}
	for _, r := range recs {
		if r.Device.Type != runtime.CUDA || r.Device.Index != 5 {
			t.Errorf("%s: device %v, want cuda:5 (its communicator's)", r.Name, r.Device)
		}
		all = append(all, got{r.Name, r.Step, (r.HostStart - base) / time.Microsecond, r.CutShort})
	}
	slices.SortFunc(all, func(a, b got) int { return cmp.Compare(a.start, b.start) })
	want := []got{
		{"step", 0, 0, false}, {"step", 1, 20, false},
		{"(unnamed)", -1, 32, false},
		{"step", 2, 40, false}, // "step 0" again: after 1, 2
		{"step", 3, 60, true},  // cut short at the next step's start
		{"step", 4, 80, false},
	}
	if len(all) != 6 || !slices.Equal(all, want) {
		t.Errorf("records\n got %+v\nwant %+v", all, want)
	}
	for _, r := range recs {
		if r.Step == 3 && r.HostEnd-r.HostStart != 20*time.Microsecond {
			t.Errorf("the step whose end was lost lasts %v, want 20µs (to the next step's start)", r.HostDuration())
		}
	}
	if st := c.Stats(); st.IngestErrors != 0 || st.Steps != 5 {
		t.Errorf("stats %+v; want no ingest error, 5 steps", st)
	}
}

// TestCollectorNotTheStepRange: with -step-range naming another range, a
// top-level range the job named "step" is not taken for a step range.
func TestCollectorNotTheStepRange(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithStepRange("iteration"))
	send(t, c, stream(helloFrame(wireVersion, 601, "n"),
		wireRec{kind: 1, hash: 1, rank: 0, nranks: 1, nnodes: 1, peer: 0, name: "g"}.frame(),
		rangeFrame(10, 0, 1, 0, 100, 200, 0, "step"),
		rangeFrame(10, 0, 2, 0, 300, 400, 0, "iteration 4"),
	), false)
	recs := sink.wait(t, 2)
	names := map[string]int32{}
	for _, r := range recs {
		names[r.Name] = r.Step
	}
	if s, ok := names["step (nvtx)"]; !ok || s != -1 {
		t.Errorf("the job's own \"step\" range: %v; want it renamed \"step (nvtx)\", no step", names)
	}
	if s, ok := names[profiler.StepName]; !ok || s != 4 {
		t.Errorf("the step range \"iteration 4\": %v; want step 4", names)
	}
}

// TestCollectorPendingStaysShort: a run that marks no steps delivers
// thousands of operations; the collector's list of operations in flight
// (what held step ranges wait for) forgets each as it is delivered.
func TestCollectorPendingStaysShort(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	parts := [][]byte{helloFrame(wireVersion, 602, "n"),
		wireRec{kind: 1, hash: 7, rank: 0, nranks: 1, nnodes: 1, peer: 0, name: "g"}.frame()}
	const n = 3000
	for i := uint64(1); i <= n; i++ {
		parts = append(parts,
			wireRec{kind: 2, hash: 7, task: i, seq: i, t0: 1000 * i, t1: 1000*i + 10, a0: 1, a1: 4, rank: 0, nranks: 1, peer: -1, fn: 1, dtype: 8, nch: 1, name: "g"}.frame(),
			wireRec{kind: 4, hash: 7, task: i, seq: i, rank: 0, nranks: 1, fn: 1, parent: 2, channel: 0, t0: 1000*i + 20, t1: 1000*i + 30, a0: 1000*i + 25, a1: 1000*i + 35}.frame())
	}
	conn := send(t, c, stream(parts...), true)
	defer conn.Close()
	sink.wait(t, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pr := range c.procs {
		listed := 0
		for _, q := range pr.pending {
			listed += len(q)
		}
		if listed > 1 {
			t.Errorf("%d operations listed in flight after all %d were delivered", listed, n)
		}
	}
}

// TestCollectorHeldStepsAcrossThreads: two threads enqueue operations;
// the rings are drained one after another, so thread 30's operation
// (enqueued at 100 µs, after step 0) arrives before thread 10's (at 50,
// inside step 0). Step 0 ends at 80 while thread 10's is in flight: the
// step stays held until it is delivered.
func TestCollectorHeldStepsAcrossThreads(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 2_000_000_000
	const hash = 0x43
	us := func(n uint64) uint64 { return host + n*1000 }
	coll := func(tid uint32, task, at uint64) []byte {
		return wireRec{kind: 2, tid: tid, hash: hash, task: task, seq: task, t0: at, t1: at + 1000, a0: 8, a1: 32, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1, name: "dp"}.frame()
	}
	conn := send(t, c, stream(helloFrame(wireVersion, 510, "n"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0, name: "dp"}.frame(),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step"),
		coll(30, 2, us(100)),
		coll(10, 1, us(50)),
		rangeFrame(10, 0, 1, 0, us(0), us(80), 0, "step"),
	), true)
	defer conn.Close()
	time.Sleep(50 * time.Millisecond)
	if got := sink.records(); len(got) != 0 {
		t.Fatalf("%d records delivered while the step's all-reduce (thread 10) is in flight: %+v", len(got), got)
	}
	if _, err := conn.Write(wireRec{kind: 4, tid: 40, hash: hash, task: 1, seq: 1, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
		t0: us(200), t1: us(300), a0: us(201), a1: us(301)}.frame()); err != nil {
		t.Fatal(err)
	}
	recs := sink.wait(t, 2)
	if recs[0].Name != "AllReduce" || recs[0].Step != 0 || recs[1].Name != profiler.StepName || recs[1].Step != 0 {
		t.Errorf("delivered %s/%d then %s/%d; want the step's all-reduce, then the step", recs[0].Name, recs[0].Step, recs[1].Name, recs[1].Step)
	}
}

// TestCollectorLabelsBetweenSteps: an all-reduce another thread enqueued
// at 90 µs, between step 0 (0–80) and the next, arrives while step 0 is
// still open; by its delivery step 0's end has come: it carries no step.
func TestCollectorLabelsBetweenSteps(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 2_000_000_000
	const hash = 0x44
	us := func(n uint64) uint64 { return host + n*1000 }
	send(t, c, stream(helloFrame(wireVersion, 511, "n"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0, name: "dp"}.frame(),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step"),
		wireRec{kind: 2, tid: 30, hash: hash, task: 1, seq: 1, t0: us(90), t1: us(91), a0: 8, a1: 32, rank: 0, nranks: 2, peer: -1, fn: 1, dtype: 8, nch: 1, name: "dp"}.frame(),
		rangeFrame(10, 0, 1, 0, us(0), us(80), 0, "step"),
		wireRec{kind: 4, hash: hash, task: 1, seq: 1, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0, t0: us(95), t1: us(99), a0: us(96), a1: us(99)}.frame(),
	), false)
	for _, r := range sink.wait(t, 2) {
		if r.Name == "AllReduce" && r.Step != profiler.None {
			t.Errorf("all-reduce enqueued at 90 µs, after step 0 ended at 80: step %d, want none", r.Step)
		}
	}
}

// TestCollectorEarlyRangesGetTheDevice: a process with no launcher rank
// pushes a range before its first communicator (device 3) exists; the
// range waits for the rank and leaves with the device.
func TestCollectorEarlyRangesGetTheDevice(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	send(t, c, stream(helloFrame(wireVersion, 512, "n"),
		rangeFrame(10, 0, 1, 0, 100, 200, 0, "setup"),
		wireRec{kind: 1, hash: 9, rank: 1, nranks: 2, nnodes: 1, peer: 3, name: "dp"}.frame(),
	), false)
	r := sink.wait(t, 1)[0]
	if r.Name != "setup" || r.Rank != 1 || r.Device.Type != runtime.CUDA || r.Device.Index != 3 {
		t.Errorf("%s: rank %d device %v; want rank 1 (its communicator's) on cuda:3", r.Name, r.Rank, r.Device)
	}
}

// TestCollectorLabelsWaitForTheStepThread: the drainer sends each
// thread's ring in turn, so an AllReduce that DDP's autograd thread
// enqueued just after the main thread began step 1 can arrive, with its
// kernel channel, before that thread's end of step 0 and start of step 1.
// It must be put in step 1, not in step 0 that looked open when it came
// (seen on the GPU: all-reduces per step 6, 2, 6, 2 where DDP made 4, 4).
func TestCollectorLabelsWaitForTheStepThread(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 4_000_000_000
	us := func(n uint64) uint64 { return host + n*1000 }
	h := helloFrame(wireVersion, 610, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	op := func(task uint64, at uint64) []byte {
		return stream(
			wireRec{kind: 2, tid: 20, hash: 7, task: task, seq: task, t0: us(at), t1: us(at) + 100, a0: 10, a1: 40,
				rank: 0, nranks: 1, peer: -1, fn: 1, dtype: 8, nch: 1, name: "dp"}.frame(),
			wireRec{kind: 4, tid: 30, hash: 7, task: task, seq: task, t0: 5_000, t1: 6_000, a0: us(at + 2), a1: us(at + 3),
				rank: 0, nranks: 1, peer: -1, fn: 1, dtype: 8, parent: 2, name: "dp"}.frame())
	}
	send(t, c, stream(h,
		wireRec{kind: 1, hash: 7, rank: 0, nranks: 1, nnodes: 1, peer: 0, name: "dp"}.frame(),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step 0"),
		op(1, 5),  // in step 0
		op(2, 25), // in step 1, before the main thread's records say so
		rangeFrame(10, 0, 1, 0, us(0), us(20), 0, "step 0"),
		rangeFrame(10, 1, 2, 0, us(21), 0, 0, "step 1"),
		rangeFrame(10, 0, 2, 0, us(21), us(40), 0, "step 1"),
	), false)
	recs := sink.wait(t, 4)
	steps := map[string][]int32{}
	for _, r := range recs {
		steps[r.Name] = append(steps[r.Name], r.Step)
	}
	slices.Sort(steps["AllReduce"])
	if !slices.Equal(steps["AllReduce"], []int32{0, 1}) || len(steps["step"]) != 2 {
		t.Errorf("steps by name %v; want the all-reduces in steps 0 and 1", steps)
	}
}

// TestCollectorKernels: a process's CUPTI activity — its tracing record,
// a kernel name in two pieces, kernels, a copy, a memset — becomes kernel
// and device records on the process's device, each in the step its device
// start fell in, with the name demangled; the step is held until a
// kernel that ended after it has come, and counts as computed.
func TestCollectorKernels(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 5_000_000_000
	us := func(n uint64) uint64 { return host + n*1000 }
	h := helloFrame(wireVersion, 620, "n")
	binary.LittleEndian.PutUint32(h[96:], 3) // RANK=2
	// The GEMM's name is 141 bytes: two pieces.
	long := "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
	mangled := "_ZN7cutlass7Kernel2INS_100" + strings.Repeat("a", 100) + "EEEvNT_6ParamsE"
	parts := [][]byte{h, activityFrame(0, us(0), 0, 0, 0, 0, 0, 0, "libcupti.so.13")}
	parts = append(parts, nameFrames(1, long)...)
	parts = append(parts, nameFrames(2, mangled)...)
	parts = append(parts,
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step 0"),
		rangeFrame(10, 0, 1, 0, us(0), us(100), 0, "step 0"),
		activityFrame(1, us(10), us(30), 3, 7, 1, 0, 0, ""),
		activityFrame(1, us(40), us(90), 3, 7, 2, 0, 0, ""),
		activityFrame(2, us(91), us(95), 3, 8, 0, 4096, 2, ""),
		activityFrame(3, us(96), us(97), 3, 8, 0, 1024, 0, ""),
	)
	conn := send(t, c, stream(parts...), true)
	t.Cleanup(func() { conn.Close() }) // before the collector's Close, which waits for it
	// Only kernels and copies so far: the step waits for a kernel that
	// ended after it.
	recs := sink.wait(t, 4)
	for _, r := range recs {
		if r.Name == "step" {
			t.Fatalf("the step came before the process's kernels had passed its end: %+v", r)
		}
	}
	// A kernel that ran after the step, by more than the least lag kept
	// for records CUPTI hands over out of order, and the next step's
	// start: the step thread has gone past the kernel, so its step (none)
	// is known.
	after := 100 + kernelLag/1000
	if _, err := conn.Write(stream(rangeFrame(10, 1, 2, 0, us(after+25), 0, 0, "step 1"),
		activityFrame(1, us(after+20), us(after+30), 3, 7, 1, 0, 0, ""))); err != nil {
		t.Fatal(err)
	}
	recs = sink.wait(t, 6)
	conn.Close()
	byName := map[string][]profiler.Record{}
	for _, r := range recs {
		byName[r.Name] = append(byName[r.Name], r)
		if r.Rank != 2 || r.Device.Type != runtime.CUDA || r.Device.Index != 3 {
			t.Errorf("%s: rank %d device %v, want rank 2 on cuda:3", r.Name, r.Rank, r.Device)
		}
	}
	fill := byName["at::native::vectorized_elementwise_kernel"]
	gemm := byName["cutlass::Kernel2"]
	if len(fill) != 2 || len(gemm) != 1 || len(byName["Memcpy DtoH"]) != 1 || len(byName["Memset"]) != 1 || len(byName["step"]) != 1 {
		t.Fatalf("records by name %v", slices.Sorted(maps.Keys(byName)))
	}
	g := gemm[0]
	if g.Kind != profiler.KindKernel || !g.HasDevice || g.DeviceDuration() != 50*time.Microsecond || g.Stream != 7 || g.Step != 0 || g.HostDuration() != 0 {
		t.Errorf("gemm %+v", g)
	}
	if g.Activity() != profiler.ActivityCompute {
		t.Errorf("a traced kernel is %v in busy time, want compute", g.Activity())
	}
	for _, f := range fill {
		want := int32(0)
		if f.DeviceStart > byName["step"][0].HostEnd {
			want = profiler.None // ran after the step's range
		}
		if f.Step != want {
			t.Errorf("kernel at %v in step %d, want %d", f.DeviceStart, f.Step, want)
		}
	}
	cp := byName["Memcpy DtoH"][0]
	if cp.Kind != profiler.KindDevice || cp.Activity() != profiler.ActivityNone || cp.DeviceDuration() != 4*time.Microsecond {
		t.Errorf("copy %+v", cp)
	}
	st := c.Stats()
	if st.Kernels != 3 || st.Copies != 2 || st.Traced != 1 || st.Untraced != 0 {
		t.Errorf("stats %+v", st)
	}
	// The step accountant finds the step's kernels: busy is measured.
	acc := profiler.NewStepAccountant()
	for i := range recs {
		acc.Add(&recs[i])
	}
	var done []profiler.StepTime
	acc.Finish(func(s profiler.StepTime) { done = append(done, s) }, nil)
	if len(done) != 1 || !done[0].Computed || done[0].Busy != 70*time.Microsecond {
		t.Errorf("accounted %+v; want one step, computed, busy 70µs (20 + 50)", done)
	}
}

// TestCollectorKernelsOutOfOrder: CUPTI hands a busy stream's buffer over
// only when it is full, so the kernels of other streams can pass a step's
// end while the busy stream's kernels of that step are still to come
// (wrapped FSDP2 on an H200: kernels came after those of the steps 5
// later, and the step analysis had gone on without them). A step waits
// until the records are kernelLag past its end; once records have come
// further out of order than that, as far as they came.
func TestCollectorKernelsOutOfOrder(t *testing.T) {
	// Held steps are looked at as records come and at each sweep, every
	// quarter linger: a sweep every 10 ms.
	c, sink, _ := newTestCollector(t, WithLinger(40*time.Millisecond))
	const host = 5_000_000_000
	lag := float64(kernelLag) / 1e6 // ms
	ms := func(n float64) uint64 { return host + uint64(n*1e6) }
	h := helloFrame(wireVersion, 620, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	// Step 0 is [0, 10 ms], step 1 [10 ms, 10 ms + 4 lags], step 2 the
	// next 10 lags, and the step thread has started step 3: every
	// kernel's step is settled.
	end1 := 10 + 4*lag
	conn := send(t, c, stream(h, activityFrame(0, ms(0), 0, 0, 0, 0, 0, 0, "libcupti.so.13"),
		rangeFrame(10, 1, 1, 0, ms(0), 0, 0, "step 0"),
		rangeFrame(10, 0, 1, 0, ms(0), ms(10), 0, "step 0"),
		rangeFrame(10, 1, 2, 0, ms(10), 0, 0, "step 1"),
		rangeFrame(10, 0, 2, 0, ms(10), ms(end1), 0, "step 1"),
		rangeFrame(10, 1, 3, 0, ms(end1), 0, 0, "step 2"),
		rangeFrame(10, 0, 3, 0, ms(end1), ms(end1+10*lag), 0, "step 2"),
		rangeFrame(10, 1, 4, 0, ms(end1+10*lag), 0, 0, "step 3"),
		// Stream 8's buffer first: a kernel of step 1, past step 0's end
		// by less than the least lag.
		activityFrame(1, ms(10+lag/2), ms(10+lag/2+1), 0, 8, 0, 0, 0, ""),
	), true)
	t.Cleanup(func() { conn.Close() })
	steps := func() (n int) {
		for _, r := range sink.records() {
			if r.Name == "step" {
				n++
			}
		}
		return n
	}
	write := func(frames ...[]byte) {
		t.Helper()
		if _, err := conn.Write(stream(frames...)); err != nil {
			t.Fatal(err)
		}
	}
	sink.wait(t, 1)
	time.Sleep(100 * time.Millisecond)
	if n := steps(); n != 0 {
		t.Fatalf("step 0 went out when another stream's kernels had passed its end by %v ms, less than the least lag (%v ms)", lag/2+1, lag)
	}
	// Stream 7's buffer: step 0's kernel, then one a lag past step 0's
	// end. Step 0 goes out after its kernel.
	write(activityFrame(1, ms(5), ms(9.9), 0, 7, 0, 0, 0, ""),
		activityFrame(1, ms(10+lag+1), ms(10+lag+2), 0, 7, 0, 0, 0, ""))
	recs := sink.wait(t, 4)
	if recs[3].Name != "step" || recs[3].Step != 0 || recs[1].Step != 0 || recs[1].Stream != 7 {
		t.Fatalf("delivered %v; want stream 8's kernel, step 0's kernel on stream 7 and the later one, then step 0", names(recs))
	}
	// Stream 8 runs 3 lags ahead: a kernel past step 1's end by half a lag,
	// then stream 7's kernel of step 1 that started 2.5 lags before it
	// ended: records come up to 3 lags out of order now.
	write(activityFrame(1, ms(end1+lag/2), ms(end1+lag/2+1), 0, 8, 0, 0, 0, ""),
		activityFrame(1, ms(end1-2.5*lag), ms(end1-2.5*lag+1), 0, 7, 0, 0, 0, ""))
	sink.wait(t, 6)
	// Two lags past step 1's end is not far enough any more; three is.
	write(activityFrame(1, ms(end1+2*lag), ms(end1+2*lag+1), 0, 8, 0, 0, 0, ""))
	sink.wait(t, 7)
	time.Sleep(100 * time.Millisecond)
	if n := steps(); n != 1 {
		t.Fatalf("%d steps out; step 1 must wait for records 3 lags past its end, as far out of order as they have come", n)
	}
	write(activityFrame(1, ms(end1+3.5*lag), ms(end1+3.5*lag+1), 0, 8, 0, 0, 0, ""))
	sink.wait(t, 9)
	if n := steps(); n != 2 {
		t.Fatalf("%d steps out, want step 1 too", n)
	}
}

func names(recs []profiler.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s(step %d, stream %d)", r.Name, r.Step, r.Stream))
	}
	return out
}

// TestCollectorKernelsUntraced: a plugin that could not trace says why,
// and its process counts as untraced.
func TestCollectorKernelsUntraced(t *testing.T) {
	c, _, _ := newTestCollector(t)
	send(t, c, stream(helloFrame(wireVersion, 630, "n"),
		activityFrame(4, 100, 0, 0, 0, 0, 0, 0, "no libcupti found; set TRAINSCOPE_CUPTI_PATH")), false)
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Untraced == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := c.Stats(); st.Untraced != 1 || st.Traced != 0 || !strings.Contains(st.UntracedWhy, "TRAINSCOPE_CUPTI_PATH") {
		t.Errorf("stats %+v", st)
	}
}

// TestCollectorSeqPerFunction: NCCL numbers each function's collectives
// apart, so a communicator's Broadcast #2 and AllReduce #2 must not share
// a sequence number (they did, and the analysis matched one rank's
// AllReduce with another's Broadcast).
func TestCollectorSeqPerFunction(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	send(t, c, stream(helloFrame(wireVersion, 640, "n"),
		wireRec{kind: 2, task: 1, seq: 2, t0: 1, t1: 2, nranks: 2, peer: 0, fn: 2, name: "g"}.frame(),  // Broadcast #2
		wireRec{kind: 2, task: 2, seq: 2, t0: 3, t1: 4, nranks: 2, peer: -1, fn: 1, name: "g"}.frame(), // AllReduce #2
	), false)
	recs := sink.wait(t, 2)
	if recs[0].Collective.Seq == recs[1].Collective.Seq {
		t.Errorf("%s and %s share sequence number %d", recs[0].Name, recs[1].Name, recs[0].Collective.Seq)
	}
}

// TestKernelNameNeverPanics: names come from the wrapped processes; one
// that made a version of the demangler panic ("_ZNW5_upee") is kept as it
// is, and profile-run goes on.
func TestKernelNameNeverPanics(t *testing.T) {
	for _, n := range []string{"_ZNW5_upee", "_Z", "_ZN", "_ZZ", "", "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"} {
		if got := KernelName(n); got == "" {
			t.Errorf("KernelName(%q) is empty", n)
		}
	}
	if got := KernelName("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"); got != "at::native::vectorized_elementwise_kernel" {
		t.Errorf("demangled %q", got)
	}
}

// TestCollectorRankGuessOnlyAlone: a process that no launcher numbered
// and that sends more kernels than are kept before its rank is known is
// rank 0 only when it is the collector's only process (python train.py
// on one GPU); beside others (mp.spawn, RANK unset, the communicator
// made late) its rank waits for its communicator, and what does not fit
// is dropped and counted.
func TestCollectorRankGuessOnlyAlone(t *testing.T) {
	kernels := func(n int) []byte {
		b := make([]byte, 0, n*128)
		for i := range n {
			b = append(b, activityFrame(1, uint64(1000+2*i), uint64(1001+2*i), 0, 7, 0, 0, 0, "")...)
		}
		return b
	}
	t.Run("alone", func(t *testing.T) {
		c, sink, _ := newTestCollector(t)
		conn := send(t, c, stream(helloFrame(wireVersion, 650, "n"), kernels(maxEarlyActivity+1)), true)
		t.Cleanup(func() { conn.Close() })
		recs := sink.wait(t, maxEarlyActivity+1)
		if recs[0].Rank != 0 {
			t.Errorf("rank %d, want 0", recs[0].Rank)
		}
	})
	t.Run("beside another", func(t *testing.T) {
		c, sink, _ := newTestCollector(t)
		other := send(t, c, helloFrame(wireVersion, 651, "n"), true)
		t.Cleanup(func() { other.Close() })
		deadline := time.Now().Add(5 * time.Second)
		for c.Stats().Processes < 1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		conn := send(t, c, stream(helloFrame(wireVersion, 652, "n"), kernels(maxEarlyActivity+5),
			wireRec{kind: 1, hash: 9, rank: 3, nranks: 4, nnodes: 1, peer: 0, name: "g"}.frame(),
			activityFrame(1, 900_000, 900_001, 0, 7, 0, 0, 0, "")), false)
		_ = conn
		recs := sink.wait(t, maxEarlyActivity+1)
		for _, r := range recs {
			if r.Rank != 3 {
				t.Fatalf("a kernel of rank %d, want 3 (its communicator's)", r.Rank)
			}
		}
		if st := c.Stats(); st.ActivityDropped != 5 {
			t.Errorf("%d dropped, want 5", st.ActivityDropped)
		}
	})
}

// TestCollectorLoneProcessAfterAWhile: a process on its own, with no
// launcher rank and no communicator (python train.py on one GPU), is
// rank 0 once it has been alone for loneAfter, and its kernels flow while
// it runs rather than at its end.
func TestCollectorLoneProcessAfterAWhile(t *testing.T) {
	old := loneAfter
	loneAfter = 200 * time.Millisecond
	t.Cleanup(func() { loneAfter = old })
	c, sink, _ := newTestCollector(t, WithLinger(100*time.Millisecond))
	conn := send(t, c, stream(helloFrame(wireVersion, 660, "n"),
		activityFrame(1, 1000, 2000, 0, 7, 0, 0, 0, ""), activityFrame(1, 3000, 4000, 0, 7, 0, 0, 0, "")), true)
	t.Cleanup(func() { conn.Close() })
	recs := sink.wait(t, 2) // with the connection still open
	for _, r := range recs {
		if r.Rank != 0 || r.Kind != profiler.KindKernel {
			t.Errorf("%s: rank %d kind %v", r.Name, r.Rank, r.Kind)
		}
	}
}

// TestCollectorPipelineStage: a process's rank in its pipeline
// communicator is its stage, on every record delivered after it was made
// — the step, its kernels; a data-parallel communicator made first gives
// none, and a range delivered before carries none.
func TestCollectorPipelineStage(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    []Option
		comm    string // the communicator that should stage the process
		ignored string // one named like a pipeline's, not chosen
		pair    bool   // a send's two-rank communicator of the same name comes first
	}{
		{name: "by name", comm: "PIPELINE_MODEL_PARALLEL_GROUP"},
		{name: "named by the user", opts: []Option{WithPipelineGroup("stages")}, comm: "stages", ignored: "pp"},
		{name: "named by the user, with its group name", opts: []Option{WithPipelineGroup("stages")}, comm: "stages:7", ignored: "stagesX"},
		{name: "after a pair's communicator", comm: "PIPELINE_MODEL_PARALLEL_GROUP", pair: true},
	} {
		after := 100 + kernelLag/1000
		t.Run(c.name, func(t *testing.T) {
			col, sink, _ := newTestCollector(t, c.opts...)
			const host = 5_000_000_000
			us := func(n uint64) uint64 { return host + n*1000 }
			h := helloFrame(wireVersion, 621, "n")
			binary.LittleEndian.PutUint32(h[96:], 6) // RANK=5
			parts := [][]byte{h,
				rangeFrame(10, 0, 1, 0, us(0), us(1), 0, "setup"), // before any communicator
				wireRec{kind: 1, hash: 1, rank: 0, nranks: 2, nnodes: 1, peer: 3, name: "DATA_PARALLEL_GROUP"}.frame(),
			}
			if c.ignored != "" {
				parts = append(parts, wireRec{kind: 1, hash: 2, rank: 3, nranks: 4, nnodes: 1, peer: 3, name: c.ignored}.frame())
			}
			if c.pair {
				// PyTorch's communicator for an unbatched send to the
				// next stage: rank 0 of 2, not the stage.
				parts = append(parts, wireRec{kind: 1, hash: 4, rank: 0, nranks: 2, nnodes: 1, peer: 3, name: c.comm}.frame())
			}
			parts = append(parts,
				wireRec{kind: 1, hash: 3, rank: 1, nranks: 4, nnodes: 1, peer: 3, name: c.comm}.frame(),
				activityFrame(0, us(0), 0, 0, 0, 0, 0, 0, "libcupti.so.13"))
			parts = append(parts, nameFrames(1, "gemm")...)
			parts = append(parts,
				rangeFrame(10, 1, 2, 0, us(10), 0, 0, "step 0"),
				rangeFrame(10, 0, 2, 0, us(10), us(100), 0, "step 0"),
				activityFrame(1, us(20), us(60), 3, 7, 1, 0, 0, ""),
				// Past the least lag kept for kernels: step 0 goes out.
				rangeFrame(10, 1, 3, 0, us(after+25), 0, 0, "step 1"),
				activityFrame(1, us(after+20), us(after+30), 3, 7, 1, 0, 0, ""),
			)
			conn := send(t, col, stream(parts...), true)
			t.Cleanup(func() { conn.Close() })
			recs := sink.wait(t, 4)
			conn.Close()
			names := map[string]int{}
			for _, r := range recs {
				names[r.Name]++
				want := int16(1)
				if r.Name == "setup" {
					// Delivered at once (its rank known from the
					// launcher), before the pipeline communicator came.
					want = profiler.None
				}
				if r.Rank != 5 || r.Stage != want {
					t.Errorf("%s: rank %d stage %d, want rank 5 at stage %d", r.Name, r.Rank, r.Stage, want)
				}
			}
			if names["setup"] != 1 || names["step"] != 1 || names["gemm"] != 2 {
				t.Errorf("records by name %v", names)
			}
			if st := col.Stats(); st.PipelineGroup != c.comm || st.Stages != 4 || st.Staged != 1 {
				t.Errorf("stats: pipeline group %q of %d stages, %d staged; want %q, 4, 1", st.PipelineGroup, st.Stages, st.Staged, c.comm)
			}
		})
	}
}

// TestCollectorStageBySends: where no communicator's name says which is
// the pipeline's (PyTorch passes NCCL none), the processes that sends and
// receives join are staged: by their rank in the largest communicator
// they send over where it has 3 ranks or more (a stage group), else by
// their place in the set by launcher rank (PyTorch's communicators of two
// neighbours, rank 0 the lower) — not over one named for another
// dimension, not with -pipeline-group none, and not without launcher
// ranks where more than two are joined; a name that says pipeline
// overrules the sends. The stages are checked on records the processes
// deliver after every one of them has sent.
func TestCollectorStageBySends(t *testing.T) {
	type comm struct {
		hash         uint64
		rank, nranks int32
		name         string
		sends, later bool    // sends over it; its init comes after the others' sends (a name)
		peers        []int32 // whom it sends to (default: one peer)
	}
	type proc struct {
		rank  int // launcher rank, -1 none
		comms []comm
		stage int16
	}
	pair := func(hash uint64, rank int32) comm { return comm{hash: hash, rank: rank, nranks: 2, sends: true} }
	for _, c := range []struct {
		name                      string
		opts                      []Option
		procs                     []proc
		bySends, unstaged, stages int
		provisional, namedPairs   int
		pipelineGroup             string
		laterSends                bool // each sends once more after the later inits
	}{
		{name: "a stage group, not in launcher order", procs: []proc{
			{rank: 10, comms: []comm{{hash: 3, rank: 1, nranks: 4, sends: true}}, stage: 1},
			{rank: 11, comms: []comm{{hash: 3, rank: 0, nranks: 4, sends: true}}, stage: 0},
			{rank: 12, comms: []comm{{hash: 3, rank: 3, nranks: 4, sends: true}}, stage: 3},
			{rank: 13, comms: []comm{{hash: 3, rank: 2, nranks: 4, sends: true}}, stage: 2},
		}, bySends: 4, stages: 4},
		{name: "pairs, pp 4", procs: []proc{
			{rank: 3, comms: []comm{pair(12, 1)}, stage: 3},
			{rank: 0, comms: []comm{pair(10, 0)}, stage: 0},
			{rank: 2, comms: []comm{pair(11, 1), pair(12, 0)}, stage: 2},
			{rank: 1, comms: []comm{pair(10, 1), pair(11, 0)}, stage: 1},
		}, bySends: 4, stages: 4},
		{name: "pairs, pp 4, VPP's pair from the last stage to the first", procs: []proc{
			{rank: 0, comms: []comm{pair(10, 0), pair(13, 0)}, stage: 0},
			{rank: 1, comms: []comm{pair(10, 1), pair(11, 0)}, stage: 1},
			{rank: 2, comms: []comm{pair(11, 1), pair(12, 0)}, stage: 2},
			{rank: 3, comms: []comm{pair(12, 1), pair(13, 1)}, stage: 3},
		}, bySends: 4, stages: 4},
		{name: "pairs, pp 2 × dp 2, a data-parallel communicator beside", procs: []proc{
			{rank: 0, comms: []comm{pair(10, 0), {hash: 20, rank: 0, nranks: 2}}, stage: 0},
			{rank: 1, comms: []comm{pair(10, 1), {hash: 21, rank: 0, nranks: 2}}, stage: 1},
			{rank: 2, comms: []comm{pair(11, 0), {hash: 20, rank: 1, nranks: 2}}, stage: 0},
			{rank: 3, comms: []comm{pair(11, 1), {hash: 21, rank: 1, nranks: 2}}, stage: 1},
		}, bySends: 4, stages: 2},
		// Its peer has not sent yet: its rank in the pair bounds its place.
		{name: "one side of a pair", procs: []proc{
			{rank: 5, comms: []comm{pair(10, 1)}, stage: 1},
		}, bySends: 1, stages: 2, provisional: 1},
		// A simple pipeline sending over the default group: pp 2 × dp
		// 2 over the world's communicator of 4; its place, not its rank.
		{name: "sends over the world's communicator", procs: []proc{
			{rank: 0, comms: []comm{{hash: 1, rank: 0, nranks: 4, sends: true, peers: []int32{1}}}, stage: 0},
			{rank: 1, comms: []comm{{hash: 1, rank: 1, nranks: 4, sends: true, peers: []int32{0}}}, stage: 1},
			{rank: 2, comms: []comm{{hash: 1, rank: 2, nranks: 4, sends: true, peers: []int32{3}}}, stage: 0},
			{rank: 3, comms: []comm{{hash: 1, rank: 3, nranks: 4, sends: true, peers: []int32{2}}}, stage: 1},
		}, bySends: 4, stages: 2},
		// Stages 2 and 3 of 4 on this host, over pairs; stages 0 and 1
		// elsewhere: their places are lower bounds, and counted so.
		{name: "half a pipeline of pairs", procs: []proc{
			{rank: 2, comms: []comm{{hash: 11, rank: 1, nranks: 2, sends: true, peers: []int32{0}}, pair(12, 0)}, stage: 1},
			{rank: 3, comms: []comm{pair(12, 1)}, stage: 1},
		}, bySends: 2, stages: 2, provisional: 2},
		// A stage group whose other ranks are elsewhere: its rank.
		{name: "half a stage group", procs: []proc{
			{rank: 2, comms: []comm{{hash: 3, rank: 2, nranks: 4, sends: true, peers: []int32{1, 3}}}, stage: 2},
			{rank: 3, comms: []comm{{hash: 3, rank: 3, nranks: 4, sends: true, peers: []int32{2}}}, stage: 3},
		}, bySends: 2, stages: 4, provisional: 2},
		// PyTorch's all-to-all (an expert-parallel group's) is sends
		// and receives to every peer: its communicator stages nobody,
		// though it is the largest.
		{name: "pairs, pp 2, and an all-to-all over 4", procs: []proc{
			{rank: 0, comms: []comm{pair(10, 0), {hash: 30, rank: 0, nranks: 4, sends: true, peers: []int32{1, 2, 3}}}, stage: 0},
			{rank: 1, comms: []comm{pair(10, 1), {hash: 30, rank: 1, nranks: 4, sends: true, peers: []int32{0, 2, 3}}}, stage: 1},
			{rank: 2, comms: []comm{pair(11, 0), {hash: 30, rank: 2, nranks: 4, sends: true, peers: []int32{0, 1, 3}}}, stage: 0},
			{rank: 3, comms: []comm{pair(11, 1), {hash: 30, rank: 3, nranks: 4, sends: true, peers: []int32{0, 1, 2}}}, stage: 1},
		}, bySends: 4, stages: 2},
		{name: "only an all-to-all", procs: []proc{
			{rank: 0, comms: []comm{{hash: 30, rank: 0, nranks: 3, sends: true, peers: []int32{1, 2}}}, stage: profiler.None},
			{rank: 1, comms: []comm{{hash: 30, rank: 1, nranks: 3, sends: true, peers: []int32{0, 2}}}, stage: profiler.None},
			{rank: 2, comms: []comm{{hash: 30, rank: 2, nranks: 3, sends: true, peers: []int32{0, 1, 2}}}, stage: profiler.None},
		}},
		// An all-to-all over two, each sending to itself too.
		{name: "pairs, pp 2, and an all-to-all over 2", procs: []proc{
			{rank: 0, comms: []comm{pair(10, 0), {hash: 31, rank: 0, nranks: 2, sends: true, peers: []int32{0, 1}}}, stage: 0},
			{rank: 1, comms: []comm{pair(10, 1), {hash: 32, rank: 0, nranks: 2, sends: true, peers: []int32{0, 1}}}, stage: 1},
			{rank: 2, comms: []comm{pair(11, 0), {hash: 31, rank: 1, nranks: 2, sends: true, peers: []int32{0, 1}}}, stage: 0},
			{rank: 3, comms: []comm{pair(11, 1), {hash: 32, rank: 1, nranks: 2, sends: true, peers: []int32{0, 1}}}, stage: 1},
		}, bySends: 4, stages: 2},
		{name: "pairs without launcher ranks", procs: []proc{
			{rank: -1, comms: []comm{pair(10, 0)}, stage: profiler.None},
			{rank: -1, comms: []comm{pair(10, 1), pair(11, 0)}, stage: profiler.None},
			{rank: -1, comms: []comm{pair(11, 1)}, stage: profiler.None},
		}, unstaged: 3},
		{name: "one pair without launcher ranks", procs: []proc{
			{rank: -1, comms: []comm{pair(10, 1)}, stage: 1},
			{rank: -1, comms: []comm{pair(10, 0)}, stage: 0},
		}, bySends: 2, stages: 2},
		{name: "named for another dimension", procs: []proc{
			{rank: 0, comms: []comm{{hash: 3, rank: 0, nranks: 2, name: "CONTEXT_PARALLEL_GROUP", sends: true}}, stage: profiler.None},
			{rank: 1, comms: []comm{{hash: 3, rank: 1, nranks: 2, name: "CONTEXT_PARALLEL_GROUP", sends: true}}, stage: profiler.None},
		}},
		{name: "turned off", opts: []Option{WithPipelineGroup(NoPipelineGroup)}, procs: []proc{
			{rank: 0, comms: []comm{{hash: 3, rank: 0, nranks: 2, name: "pp", sends: true}}, stage: profiler.None},
			{rank: 1, comms: []comm{{hash: 3, rank: 1, nranks: 2, name: "pp", sends: true}}, stage: profiler.None},
		}},
		{name: "a name overrules", procs: []proc{
			{rank: 0, comms: []comm{pair(10, 0), {hash: 3, rank: 1, nranks: 4, name: "pipeline", later: true}}, stage: 1},
			{rank: 1, comms: []comm{pair(10, 1), {hash: 3, rank: 0, nranks: 4, name: "pipeline", later: true}}, stage: 0},
		}, stages: 4, pipelineGroup: "pipeline", laterSends: true},
		// Once PyTorch names its communicators, its two-rank ones for
		// sends outside a batch carry the group's name: a name, but a
		// pair's rank is no stage.
		{name: "pairs named as the pipeline's, pp 4", procs: []proc{
			{rank: 0, comms: []comm{{hash: 10, rank: 0, nranks: 2, sends: true, name: "pp:2"}}, stage: 0},
			{rank: 1, comms: []comm{{hash: 10, rank: 1, nranks: 2, sends: true, name: "pp:2"}, {hash: 11, rank: 0, nranks: 2, sends: true, name: "pp:2"}}, stage: 1},
			{rank: 2, comms: []comm{{hash: 11, rank: 1, nranks: 2, sends: true, name: "pp:2"}, {hash: 12, rank: 0, nranks: 2, sends: true, name: "pp:2"}}, stage: 2},
			{rank: 3, comms: []comm{{hash: 12, rank: 1, nranks: 2, sends: true, name: "pp:2"}}, stage: 3},
		}, bySends: 4, stages: 4, namedPairs: 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			col, sink, _ := newTestCollector(t, c.opts...)
			const host = 5_000_000_000
			us := func(n uint64) uint64 { return host + n*1000 }
			var conns []net.Conn
			sends := 0
			for i, p := range c.procs {
				h := helloFrame(wireVersion, uint32(700+i), "n")
				binary.LittleEndian.PutUint32(h[96:], uint32(p.rank+1)) // RANK, 0 for none
				parts := [][]byte{h}
				for _, m := range p.comms {
					if !m.later {
						parts = append(parts, wireRec{kind: 1, hash: m.hash, rank: m.rank, nranks: m.nranks, nnodes: 1, peer: 3, name: m.name}.frame())
					}
				}
				for _, m := range p.comms {
					if !m.sends {
						continue
					}
					peers := m.peers
					if len(peers) == 0 {
						peers = []int32{1 - m.rank%2}
					}
					for _, peer := range peers {
						sends++
						parts = append(parts, wireRec{kind: 3, hash: m.hash, task: uint64(10 + sends), t0: us(2), t1: us(3), a0: 10, a1: 40,
							rank: m.rank, nranks: m.nranks, peer: peer, fn: 6, dtype: 8, name: m.name}.frame())
					}
				}
				conn := send(t, col, stream(parts...), true)
				t.Cleanup(func() { conn.Close() })
				conns = append(conns, conn)
			}
			deadline := time.Now().Add(5 * time.Second)
			for col.Stats().Communicating < len(c.procs) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			for i, p := range c.procs {
				var parts [][]byte
				for _, m := range p.comms {
					if m.later {
						parts = append(parts, wireRec{kind: 1, hash: m.hash, rank: m.rank, nranks: m.nranks, nnodes: 1, peer: 3, name: m.name}.frame())
					}
				}
				if c.laterSends {
					// Sends over a new communicator after a name staged
					// it: they change nothing.
					sends++
					parts = append(parts, wireRec{kind: 3, hash: 50, task: uint64(1000 + sends), t0: us(4), t1: us(5), a0: 10, a1: 40,
						rank: int32(i % 2), nranks: 2, peer: int32(1 - i%2), fn: 6, dtype: 8}.frame())
				}
				parts = append(parts, activityFrame(0, us(0), 0, 0, 0, 0, 0, 0, "libcupti.so.13"))
				parts = append(parts, nameFrames(1, "gemm")...)
				parts = append(parts,
					rangeFrame(10, 1, 2, 0, us(10), 0, 0, "step 0"),
					activityFrame(1, us(20), us(60), 3, 7, 1, 0, 0, ""),
					rangeFrame(10, 0, 2, 0, us(10), us(100), 0, "step 0"),
				)
				if _, err := conns[i].Write(stream(parts...)); err != nil {
					t.Fatal(err)
				}
				conns[i].Close()
			}
			// Per process: a step, a kernel and its sends.
			recs := sink.wait(t, 2*len(c.procs)+sends)
			stageOf := map[int]int16{}
			for i, p := range c.procs {
				r := p.rank
				if r < 0 {
					r = int(p.comms[0].rank) // its rank in its first communicator
				}
				stageOf[r] = c.procs[i].stage
			}
			for _, r := range recs {
				if r.Kind == profiler.KindP2P {
					continue
				}
				if want, ok := stageOf[r.Rank]; !ok || r.Stage != want {
					t.Errorf("%s of rank %d: stage %d, want %d", r.Name, r.Rank, r.Stage, want)
				}
			}
			st := col.Stats()
			staged := 0
			for _, p := range c.procs {
				if p.stage != profiler.None {
					staged++
				}
			}
			if st.Staged != staged || st.StagedBySends != c.bySends || st.Unstaged != c.unstaged || st.Stages != c.stages || st.PipelineGroup != c.pipelineGroup || st.Provisional != c.provisional || st.NamedPairs != c.namedPairs {
				t.Errorf("stats: %d staged, %d by sends, %d unstaged, %d stages, pipeline group %q, %d provisional, %d named pairs; want %d, %d, %d, %d, %q, %d, %d",
					st.Staged, st.StagedBySends, st.Unstaged, st.Stages, st.PipelineGroup, st.Provisional, st.NamedPairs, staged, c.bySends, c.unstaged, c.stages, c.pipelineGroup, c.provisional, c.namedPairs)
			}
			if st.Processes != len(c.procs) || st.Communicating != len(c.procs) {
				t.Errorf("stats: %d processes, %d communicating; want %d and %d", st.Processes, st.Communicating, len(c.procs), len(c.procs))
			}
		})
	}
}

// TestCollectorAllToAll: p2p operations that NCCL's group-block numbers
// (the plugin's a2) put in one block over one communicator are one
// all-to-all when they are a send to and a receive from every rank of it;
// any other block's go as they are.
func TestCollectorAllToAll(t *testing.T) {
	const host = 5_000_000_000
	us := func(n uint64) uint64 { return host + n*1000 }
	// p2p is a Send (fn 6) or Recv (fn 7) of 10 float32 (40 bytes) to
	// or from peer over communicator hash of n ranks, in group block
	// group, enqueued at µs t on thread tid.
	task := uint64(0)
	p2p := func(hash uint64, rank, n int32, fn uint8, peer int32, group, t uint64, tid uint32) (wireRec, uint64) {
		task++
		return wireRec{kind: 3, tid: tid, hash: hash, task: task, t0: us(t), t1: us(t) + 500, a0: 10, a1: 40, a2: group,
			rank: rank, nranks: n, peer: peer, fn: fn, dtype: 8, nch: 1}, task
	}
	type want struct {
		names map[string]int
		a2a   uint64        // stats
		host  time.Duration // an all-to-all's host time: its first enqueue start to its last end; 0 for 1.5 µs
	}
	for _, c := range []struct {
		name  string
		ops   func(rank int32) []wireRec
		ranks int32
		want  want
		// channelsFirst sends the kernel channels before the operations
		// (the plugin ships the proxy thread's ring before the caller's).
		channelsFirst bool
	}{
		{name: "all-to-all over 2, twice", ranks: 2, ops: func(rank int32) []wireRec {
			var out []wireRec
			for g := uint64(1); g <= 2; g++ {
				for peer := int32(0); peer < 2; peer++ {
					s, _ := p2p(40, rank, 2, 6, peer, g, 10*g, 7)
					r, _ := p2p(40, rank, 2, 7, peer, g, 10*g+1, 7)
					out = append(out, s, r)
				}
			}
			return out
		}, want: want{names: map[string]int{"AllToAll": 2}, a2a: 2}},
		// Rank 1's sends and receives with itself are its block's last
		// records, and the rest has run before they arrive.
		{name: "all-to-all over 2, channels first", ranks: 2, channelsFirst: true, ops: func(rank int32) []wireRec {
			var out []wireRec
			for peer := int32(0); peer < 2; peer++ {
				s, _ := p2p(47, rank, 2, 6, peer, 1, 10+2*uint64(peer), 7)
				r, _ := p2p(47, rank, 2, 7, peer, 1, 11+2*uint64(peer), 7)
				out = append(out, s, r)
			}
			return out
		}, want: want{names: map[string]int{"AllToAll": 1}, a2a: 1, host: 3500 * time.Nanosecond}},
		// A pipeline's block: a send to and a receive from the next
		// stage, no more; then an NVTX range on the thread ends it.
		{name: "a pipeline's send and receive", ranks: 2, ops: func(rank int32) []wireRec {
			s, _ := p2p(41, rank, 2, 6, 1-rank, 1, 10, 7)
			r, _ := p2p(41, rank, 2, 7, 1-rank, 1, 11, 7)
			return []wireRec{s, r}
		}, want: want{names: map[string]int{"Send": 1, "Recv": 1}}},
		// A peer twice: the block is no all-to-all, and its operations
		// after the repeat go as they are too.
		{name: "a peer twice", ranks: 2, ops: func(rank int32) []wireRec {
			a, _ := p2p(42, rank, 2, 6, 1-rank, 1, 10, 7)
			b, _ := p2p(42, rank, 2, 7, 1-rank, 1, 11, 7)
			c, _ := p2p(42, rank, 2, 6, 1-rank, 1, 12, 7)
			d, _ := p2p(42, rank, 2, 7, 1-rank, 1, 13, 7)
			return []wireRec{a, b, c, d}
		}, want: want{names: map[string]int{"Send": 2, "Recv": 2}}},
		{name: "no block numbers (profiler interface v4)", ranks: 2, ops: func(rank int32) []wireRec {
			var out []wireRec
			for peer := int32(0); peer < 2; peer++ {
				s, _ := p2p(43, rank, 2, 6, peer, 0, 10, 7)
				r, _ := p2p(43, rank, 2, 7, peer, 0, 11, 7)
				out = append(out, s, r)
			}
			return out
		}, want: want{names: map[string]int{"Send": 2, "Recv": 2}}},
		// Every rank but one: the thread's next block ends it whole.
		{name: "a block short of a rank, then an all-to-all", ranks: 3, ops: func(rank int32) []wireRec {
			var out []wireRec
			for peer := int32(0); peer < 2; peer++ {
				s, _ := p2p(44, rank, 3, 6, peer, 1, 10, 7)
				r, _ := p2p(44, rank, 3, 7, peer, 1, 11, 7)
				out = append(out, s, r)
			}
			for peer := int32(0); peer < 3; peer++ {
				s, _ := p2p(44, rank, 3, 6, peer, 2, 20, 7)
				r, _ := p2p(44, rank, 3, 7, peer, 2, 21, 7)
				out = append(out, s, r)
			}
			return out
		}, want: want{names: map[string]int{"Send": 2, "Recv": 2, "AllToAll": 1}, a2a: 1}},
		// Blocks of two threads interleaved in the stream.
		{name: "two threads", ranks: 2, ops: func(rank int32) []wireRec {
			var out []wireRec
			for peer := int32(0); peer < 2; peer++ {
				s, _ := p2p(45, rank, 2, 6, peer, 1, 10, 7)
				x, _ := p2p(46, rank, 2, 6, 1-rank, 2, 10, 8)
				r, _ := p2p(45, rank, 2, 7, peer, 1, 11, 7)
				out = append(out, s, x, r)
			}
			return out
		}, want: want{names: map[string]int{"Send": 2, "AllToAll": 1}, a2a: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			col, sink, _ := newTestCollector(t, WithLinger(50*time.Millisecond))
			total := 0
			var conns []net.Conn
			for rank := int32(0); rank < c.ranks; rank++ {
				h := helloFrame(wireVersion, uint32(900+rank), "n")
				binary.LittleEndian.PutUint32(h[96:], uint32(rank+1))
				parts := [][]byte{h}
				hashes := map[uint64]bool{}
				ops := c.ops(rank)
				for _, o := range ops {
					if !hashes[o.hash] {
						hashes[o.hash] = true
						parts = append(parts, wireRec{kind: 1, hash: o.hash, rank: rank, nranks: o.nranks, nnodes: 1, peer: 0}.frame())
					}
				}
				// Every p2p's kernel channel but a self-send's, which
				// NCCL does not report: those go when the linger has
				// passed, the others when their channel has stopped.
				var channels, records [][]byte
				for _, o := range ops {
					records = append(records, o.frame())
					if o.peer == rank {
						continue
					}
					channels = append(channels, wireRec{kind: 4, hash: o.hash, task: o.task, rank: rank, nranks: o.nranks, fn: o.fn, parent: 3,
						t0: o.t0 + 2000, t1: o.t0 + 5000, a0: o.t0 + 2500, a1: o.t0 + 5500}.frame())
				}
				after := rangeFrame(7, 0, 1, 0, us(100), us(101), 0, "after")
				if c.channelsFirst {
					parts = append(append(append(parts, channels...), records...), after)
				} else {
					parts = append(append(append(parts, records...), after), channels...)
				}
				conn := send(t, col, stream(parts...), true)
				t.Cleanup(func() { conn.Close() })
				conns = append(conns, conn)
				total++ // the range
				for _, k := range c.want.names {
					total += k
				}
			}
			// Everything arrives with the connections still open.
			recs := sink.wait(t, total)
			for _, conn := range conns {
				conn.Close()
			}
			got := map[int]map[string]int{}
			for _, r := range recs {
				if got[r.Rank] == nil {
					got[r.Rank] = map[string]int{}
				}
				if r.Kind == profiler.KindHost {
					continue
				}
				got[r.Rank][r.Name]++
				if r.Name != "AllToAll" {
					continue
				}
				n := int64(c.ranks)
				col := r.Collective
				if r.Kind != profiler.KindCollective || col.Bytes != 40*n || col.Count != 10*n || col.Peer != -1 || col.GroupSize != int32(n) ||
					col.GroupRank != int32(r.Rank) || col.BusFactor != float64(n-1)/float64(n) || col.Seq&15 != 15 {
					t.Errorf("rank %d all-to-all %+v", r.Rank, col)
				}
				// Its device time: from its first kernel channel's start
				// to its last's stop (the channels ran 2–5 µs after
				// each enqueue, the receives 1 µs after the sends).
				if !r.HasDevice || r.DeviceDuration() != 4*time.Microsecond {
					t.Errorf("rank %d all-to-all device %v %v, want 4µs", r.Rank, r.HasDevice, r.DeviceDuration())
				}
				wantHost := c.want.host
				if wantHost == 0 {
					wantHost = time.Microsecond + 500*time.Nanosecond
				}
				if r.HostDuration() != wantHost {
					t.Errorf("rank %d all-to-all host %v, want %v (first enqueue start to last end)", r.Rank, r.HostDuration(), wantHost)
				}
			}
			for rank := 0; rank < int(c.ranks); rank++ {
				if !maps.Equal(got[rank], c.want.names) {
					t.Errorf("rank %d: %v, want %v", rank, got[rank], c.want.names)
				}
			}
			// The n-th all-to-all of a communicator has one number on
			// every rank.
			seqs := map[int][]uint64{}
			for _, r := range recs {
				if r.Name == "AllToAll" {
					seqs[r.Rank] = append(seqs[r.Rank], r.Collective.Seq)
				}
			}
			for rank := range seqs {
				slices.Sort(seqs[rank])
				if !slices.Equal(seqs[rank], seqs[0]) {
					t.Errorf("all-to-all numbers %v", seqs)
				}
			}
			if st := col.Stats(); st.AllToAlls != c.want.a2a*uint64(c.ranks) || st.AllToAllParts != 2*uint64(c.ranks)*st.AllToAlls {
				t.Errorf("stats: %d all-to-alls of %d parts", st.AllToAlls, st.AllToAllParts)
			}
			// Counted as delivered: an all-to-all's sends and receives
			// with itself (no kernel channel) are not host-only records.
			var ops, hostOnly uint64
			for _, r := range recs {
				if r.Kind != profiler.KindHost {
					ops++
					if !r.HasDevice {
						hostOnly++
					}
				}
			}
			if st := col.Stats(); st.Records != ops || st.HostOnly != hostOnly {
				t.Errorf("stats: %d records, %d host-only; delivered %d, %d without device time", st.Records, st.HostOnly, ops, hostOnly)
			}
		})
	}
}

// TestCollectorStaleChannel: a kernel channel whose timer reads a time
// before its operation was enqueued (seen on the GPU: every channel of a
// communicator carrying all-to-alls, 36 ms to 3 s early) is left out, and
// so is every later channel of that communicator, whose operations are
// host-only from then on; it moves neither the clock estimate nor other
// communicators' device times.
func TestCollectorStaleChannel(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 10_000_000_000
	const gpuAhead = 5_000_000_000
	gpu := func(h uint64) uint64 { return h + gpuAhead }
	const hash, other = 0x77, 0x79
	// AllReduce #1: a clean channel fixes the offset (report 1 µs after
	// the GPU's start). Send: one channel ran 20–60 µs after its enqueue;
	// the other reads a time 41 ms before it. AllReduce #2 over the same
	// communicator, then AllReduce #3 over another, each with a channel
	// 10–30 µs after its enqueue.
	data := stream(
		helloFrame(wireVersion, 300, "n0"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 1, hash: other, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
		wireRec{kind: 2, hash: hash, task: 1, seq: 1, t0: host, t1: host + 5_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: hash, task: 1, seq: 1, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
			t0: gpu(host + 10_000), t1: gpu(host + 30_000), a0: host + 11_000, a1: host + 31_000}.frame(),
		wireRec{kind: 3, hash: hash, task: 2, seq: 0, t0: host + 100_000_000, t1: host + 100_002_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: 1,
			fn: 6, dtype: 8, nch: 2}.frame(),
		wireRec{kind: 4, hash: hash, task: 2, rank: 0, nranks: 2, fn: 6, parent: 3, channel: 0,
			t0: gpu(host + 100_020_000), t1: gpu(host + 100_060_000), a0: host + 100_021_000, a1: host + 100_061_000}.frame(),
		wireRec{kind: 4, hash: hash, task: 2, rank: 0, nranks: 2, fn: 6, parent: 3, channel: 1,
			t0: gpu(host + 59_000_000), t1: gpu(host + 59_010_000), a0: host + 100_070_000, a1: host + 100_071_000}.frame(),
		wireRec{kind: 2, hash: hash, task: 3, seq: 2, t0: host + 200_000_000, t1: host + 200_005_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: hash, task: 3, seq: 2, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
			t0: gpu(host + 200_010_000), t1: gpu(host + 200_030_000), a0: host + 200_011_000, a1: host + 200_031_000}.frame(),
		wireRec{kind: 2, hash: other, task: 4, seq: 1, t0: host + 300_000_000, t1: host + 300_005_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: -1,
			fn: 1, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: other, task: 4, seq: 1, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
			t0: gpu(host + 300_010_000), t1: gpu(host + 300_030_000), a0: host + 300_011_000, a1: host + 300_031_000}.frame(),
	)
	send(t, c, data, false)
	recs := sink.wait(t, 4)
	slices.SortFunc(recs, func(a, b profiler.Record) int { return cmp.Compare(a.HostStart, b.HostStart) })
	ar1, s, ar2, ar3 := recs[0], recs[1], recs[2], recs[3]
	if got := ar1.DeviceStart - ar1.HostStart; !ar1.HasDevice || got != 11*time.Microsecond {
		t.Errorf("first all-reduce device %v, start %v after its enqueue; want 11µs", ar1.HasDevice, got)
	}
	if s.Name != "Send" || s.HasDevice {
		t.Errorf("%s with a stale channel: device %v, want host-only", s.Name, s.HasDevice)
	}
	if ar2.HasDevice {
		t.Errorf("the next all-reduce over the stale channel's communicator has device time %v: its timers are not to be trusted", ar2.DeviceDuration())
	}
	if got := ar3.DeviceStart - ar3.HostStart; !ar3.HasDevice || got != 11*time.Microsecond || ar3.DeviceDuration() != 20*time.Microsecond {
		t.Errorf("an all-reduce over another communicator: device %v, start %v after its enqueue, lasting %v; want 11µs and 20µs: the stale channel moved the clock",
			ar3.HasDevice, got, ar3.DeviceDuration())
	}
	st := c.Stats()
	if st.StaleChannels != 3 || st.StaleComms != 1 || st.ClockConflicts != 0 || st.KernelChannels != 5 || st.HostOnly != 2 {
		t.Errorf("stats: %d stale channels of %d communicators, %d clock conflicts, %d channels, %d host-only; want 3, 1, 0, 5, 2",
			st.StaleChannels, st.StaleComms, st.ClockConflicts, st.KernelChannels, st.HostOnly)
	}
}

// TestCollectorClockConflict: clock bounds that cross by tens of
// microseconds (NCCL starting an operation's event after its kernel) are
// no conflict; by more, the process is counted and the operation named.
func TestCollectorClockConflict(t *testing.T) {
	const host = 10_000_000_000
	const gpuAhead = 5_000_000_000
	gpu := func(h uint64) uint64 { return h + gpuAhead }
	for _, c := range []struct {
		name     string
		early    uint64 // how long before its enqueue the send's channel started
		conflict bool
	}{
		{"3µs", 3_000, false},
		{"50µs", 50_000, false},
		{"500µs", 500_000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			col, sink, _ := newTestCollector(t)
			const hash = 0x78
			data := stream(
				helloFrame(wireVersion, 301, "n0"),
				wireRec{kind: 1, hash: hash, rank: 0, nranks: 2, nnodes: 1, peer: 0}.frame(),
				wireRec{kind: 2, hash: hash, task: 1, seq: 1, t0: host, t1: host + 5_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: -1,
					fn: 1, dtype: 8, nch: 1}.frame(),
				wireRec{kind: 4, hash: hash, task: 1, seq: 1, rank: 0, nranks: 2, fn: 1, parent: 2, channel: 0,
					t0: gpu(host + 10_000), t1: gpu(host + 30_000), a0: host + 11_000, a1: host + 31_000}.frame(),
				wireRec{kind: 3, hash: hash, task: 2, seq: 0, t0: host + 1_000_000, t1: host + 1_002_000, a0: 256, a1: 1024, rank: 0, nranks: 2, peer: 1,
					fn: 6, dtype: 8, nch: 1}.frame(),
				wireRec{kind: 4, hash: hash, task: 2, rank: 0, nranks: 2, fn: 6, parent: 3, channel: 0,
					t0: gpu(host + 1_000_000 - c.early), t1: gpu(host + 1_040_000), a0: host + 1_041_000, a1: host + 1_042_000}.frame(),
			)
			send(t, col, data, false)
			sink.wait(t, 2)
			st := col.Stats()
			if got := st.ClockConflicts == 1; got != c.conflict || st.StaleChannels != 0 {
				t.Errorf("%d clock conflicts (want conflict %v), %d stale channels", st.ClockConflicts, c.conflict, st.StaleChannels)
			}
			if c.conflict && !strings.Contains(st.ClockConflict, "rank 0's Send (peer or root 1, 1 channels, communicator 0000000000000078) enqueued 499µs after") {
				t.Errorf("conflict note %q does not name the send", st.ClockConflict)
			}
		})
	}
}

// TestCollectorNativeAllToAll: NCCL's own all-to-all collective (function
// code 8, NCCL's count per peer) is named and sized as the all-to-alls
// gathered from group blocks: AllToAll, S = count × size × n.
func TestCollectorNativeAllToAll(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 10_000_000_000
	const hash = 0x7a
	data := stream(
		helloFrame(wireVersion, 302, "n0"),
		wireRec{kind: 1, hash: hash, rank: 2, nranks: 4, nnodes: 1, peer: 0}.frame(),
		// 1000 bfloat16 to each of 4 ranks.
		wireRec{kind: 2, hash: hash, task: 1, seq: 3, t0: host, t1: host + 5_000, a0: 1000, a1: 2000, rank: 2, nranks: 4, peer: -1,
			fn: 8, dtype: 10, nch: 1}.frame(),
	)
	send(t, c, data, false)
	r := sink.wait(t, 1)[0]
	col := r.Collective
	if r.Name != "AllToAll" || col.Op != "AllToAll" || r.Kind != profiler.KindCollective || col.Bytes != 8000 || col.BusFactor != 0.75 || col.Seq != 3<<4|8 {
		t.Errorf("NCCL's all-to-all: %s %+v; want AllToAll of 8000 bytes, bus factor 0.75, sequence 3·16+8", r.Name, col)
	}
}

// batchSizes is a sink noting the largest batch it was given.
type batchSizes struct {
	mu       sync.Mutex
	n, large int
}

func (b *batchSizes) Consume(recs []profiler.Record) {
	b.mu.Lock()
	b.n += len(recs)
	b.large = max(b.large, len(recs))
	b.mu.Unlock()
}

// TestCollectorBoundsItsBatches: a process's stream arriving in pieces
// that are not whole records (as a busy socket delivers it) still reaches
// the profiler in batches of at most maxBatch records. The reader used to
// hand records over only when nothing at all was buffered, which a
// stream cut mid-record rarely was: here 8,171 kernels came as one batch,
// from eight processes sending flat out 65,300, and every buffer after it
// kept that size.
func TestCollectorBoundsItsBatches(t *testing.T) {
	p, err := profiler.New(profiler.WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	sizes := &batchSizes{}
	if err := p.AddSink(sizes); err != nil {
		t.Fatal(err)
	}
	c, err := NewCollector(p)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const kernels = 20000
	h := helloFrame(wireVersion, 700, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	parts := [][]byte{h, activityFrame(0, 1_000, 0, 0, 0, 0, 0, 0, "libcupti.so.13")}
	parts = append(parts, nameFrames(1, "gemm")...)
	for k := range kernels {
		at := uint64(2_000 + 10*k)
		parts = append(parts, activityFrame(1, at, at+5, 0, 7, 1, 0, 0, ""))
	}
	data := stream(parts...)
	conn, err := net.Dial("unix", c.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1000 { // never a whole number of records
		if _, err := conn.Write(data[off:min(off+1000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if sizes.n != kernels || sizes.large > maxBatch {
		t.Errorf("%d records, the largest batch %d; want %d records in batches of at most %d", sizes.n, sizes.large, kernels, maxBatch)
	}
}

// TestCollectorDropsOverConnections: a process's drop counts are counts
// since it began, whichever connection they come on. A plugin whose
// stream is stuck at exit sends its last counts over a connection of
// their own, which may be read before the older counts still queued on
// the first: the larger count stands.
func TestCollectorDropsOverConnections(t *testing.T) {
	c, _, _ := newTestCollector(t)
	final := stream(helloFrame(wireVersion, 800, "n"), wireRec{kind: 5, t1: 2, a0: 40, a1: 1, a2: 900, seq: 7, task: 5}.frame())
	older := stream(helloFrame(wireVersion, 800, "n"), wireRec{kind: 5, a0: 12, a1: 1, a2: 0, seq: 2, task: 3}.frame())
	send(t, c, final, false)
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().PluginUnsent == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	send(t, c, older, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Processes != 1 || st.PluginRingFull != 40 || st.PluginRefused != 1 || st.PluginUnsent != 900 || st.PluginActivityDropped != 7 || st.PluginBuffersUnreturned != 2 || st.PluginForeignProxyOps != 5 {
		t.Errorf("stats %+v; want one process with 40 ring full, 1 refused, 900 unsent, 7 dropped by CUPTI, 2 CUPTI buffers unreturned, 5 proxy operations of other processes", st)
	}
}

// TestCollectorCloseTakesWaitingConnections: connections made just before
// Close (a process's last counts, sent as it exited) are read, not
// dropped with the listener.
func TestCollectorCloseTakesWaitingConnections(t *testing.T) {
	c, _, _ := newTestCollector(t)
	const n = 64
	for i := range n {
		send(t, c, stream(helloFrame(wireVersion, uint32(2000+i), "n"), wireRec{kind: 5, a2: 1}.frame()), false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Processes != n || st.PluginUnsent != n || st.Cut != 0 {
		t.Errorf("%d processes, %d unsent, %d cut; want %d processes each counting 1 unsent, none cut", st.Processes, st.PluginUnsent, st.Cut, n)
	}
}

// TestCollectorCloseWhileAccepting: Close under a context already done,
// just as a process connects (profile-run cancelled while the command's
// processes are still starting), leaves no reader behind: the
// connection is read or closed, never left to a goroutine Close did not
// wait for.
func TestCollectorCloseWhileAccepting(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		c, _, _ := newTestCollector(t)
		conn, err := net.Dial("unix", c.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		c.Close(done)
		c.mu.Lock()
		open := len(c.conns)
		c.mu.Unlock()
		conn.Close()
		if open != 0 {
			t.Fatalf("Close #%d returned with %d connection(s) still being read", i, open)
		}
	}
}

// TestCollectorMemoryRecordsAreNoKernels: a device memory allocation is
// an instant on the host, when the call made it, which runs ahead of the
// GPU. It says nothing of how far the process's kernels have come: a
// step must not go out because an allocation made after it has arrived.
func TestCollectorMemoryRecordsAreNoKernels(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 5_000_000_000
	us := func(n uint64) uint64 { return host + n*1000 }
	lag := kernelLag / 1000 // µs
	h := helloFrame(wireVersion, 630, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	end1 := 100 + 3*lag
	conn := send(t, c, stream(h, activityFrame(0, us(0), 0, 0, 0, 0, 0, 0, "libcupti.so.13"),
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step 0"),
		rangeFrame(10, 0, 1, 0, us(0), us(100), 0, "step 0"),
		rangeFrame(10, 1, 2, 0, us(100), 0, 0, "step 1"),
		// In step 1, two lags past step 0's end on the host; no kernel
		// has come yet.
		activityFrame(uint8(ActMemory), us(100+2*lag), us(100+2*lag), 0, 0, 0, 1<<20, MemAllocated, ""),
		rangeFrame(10, 0, 2, 0, us(100), us(end1), 0, "step 1"),
		rangeFrame(10, 1, 3, 0, us(end1), 0, 0, "step 2"),
		rangeFrame(10, 0, 4, 0, us(end1+1), us(end1+2), 1, "marker"),
	), true)
	t.Cleanup(func() { conn.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs := sink.records()
		if slices.ContainsFunc(recs, func(r profiler.Record) bool { return r.Name == "marker" }) {
			for _, r := range recs {
				if r.Name == "step" {
					t.Fatalf("step %d went out with no kernel of the process past its end, only an allocation: %v", r.Step, names(recs))
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no marker range: %v", names(recs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCollectorDroppedActivityIsNotIngested: kernels and copies a process
// sent before it had a rank, beyond those kept until then, are counted
// as dropped, and not among those ingested as well.
func TestCollectorDroppedActivityIsNotIngested(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	other := send(t, c, helloFrame(wireVersion, 671, "n"), true)
	t.Cleanup(func() { other.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Processes < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	parts := [][]byte{helloFrame(wireVersion, 672, "n")}
	for i := range maxEarlyActivity {
		parts = append(parts, activityFrame(1, uint64(1000+2*i), uint64(1001+2*i), 0, 7, 0, 0, 0, ""))
	}
	// Beyond the bound: a labelled kernel, a copy, a memset and an
	// allocation.
	parts = append(parts,
		labelled(activityFrame(1, 900_000, 900_001, 0, 7, 0, 0, 0, ""), 1, 0, 0),
		activityFrame(2, 900_002, 900_003, 0, 7, 0, 64, 1, ""),
		activityFrame(3, 900_004, 900_005, 0, 7, 0, 64, 0, ""),
		activityFrame(uint8(ActMemory), 900_006, 900_006, 0, 0, 0, 64, MemAllocated, ""),
		wireRec{kind: 1, hash: 9, rank: 1, nranks: 2, nnodes: 1, peer: 0, name: "g"}.frame())
	send(t, c, stream(parts...), false)
	sink.wait(t, maxEarlyActivity)
	deadline = time.Now().Add(5 * time.Second)
	for c.Stats().ActivityDropped < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := c.Stats()
	if st.ActivityDropped != 4 || st.Kernels != maxEarlyActivity || st.KernelsLabelled != 0 || st.Copies != 0 || st.MemoryOps != 0 {
		t.Errorf("%d dropped, %d kernels (%d labelled), %d copies and memsets, %d memory operations ingested; want 4 dropped, %d kernels, none labelled, no copy, memset or memory operation",
			st.ActivityDropped, st.Kernels, st.KernelsLabelled, st.Copies, st.MemoryOps, maxEarlyActivity)
	}
}

// TestCollectorGroupBlockOfAHugeCommunicator: a p2p of a group block
// names its communicator's size, which the collector must not take as
// the memory to set aside for the block: a corrupt record claiming 2^27
// ranks costs what the records of the block do, not 2^27 bytes.
func TestCollectorGroupBlockOfAHugeCommunicator(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	h := helloFrame(wireVersion, 680, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	const nranks = 1 << 27
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	send(t, c, stream(h,
		wireRec{kind: 3, tid: 5, hash: 9, task: 1, t0: 100, t1: 200, a0: 4, a1: 16, a2: 1, rank: 0, nranks: nranks, peer: 1, fn: 6, dtype: 8, nch: 1, name: "g"}.frame(),
		wireRec{kind: 3, tid: 5, hash: 9, task: 2, t0: 300, t1: 400, a0: 4, a1: 16, a2: 1, rank: 0, nranks: nranks, peer: 1, fn: 7, dtype: 8, nch: 1, name: "g"}.frame(),
	), false)
	recs := sink.wait(t, 2)
	goruntime.ReadMemStats(&after)
	for _, r := range recs {
		if r.Kind != profiler.KindP2P || r.Collective.Peer != 1 {
			t.Errorf("record %+v, want a send and a receive as they are", r)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > nranks/4 {
		t.Errorf("%d bytes allocated for two records of a block", grew)
	}
}

// TestCollectorShortestLinger: any positive linger is accepted, the
// shortest included (the sweeps come every quarter linger).
func TestCollectorShortestLinger(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithLinger(time.Nanosecond))
	conn := send(t, c, stream(helloFrame(wireVersion, 690, "n"),
		wireRec{kind: 2, task: 1, t0: 10, t1: 20, rank: 0, nranks: 2, peer: -1, fn: 1, nch: 2, name: "g"}.frame(),
		wireRec{kind: 4, task: 1, parent: 2, channel: 0, t0: 100, t1: 130, a0: 30, a1: 40}.frame(),
	), true)
	t.Cleanup(func() { conn.Close() })
	// Its second channel never comes: the sweep delivers it with the
	// connection still open.
	if recs := sink.wait(t, 1); recs[0].Name != "AllReduce" || recs[0].DeviceDuration() != 30 {
		t.Errorf("record %+v", recs[0])
	}
}

// TestCollectorRangesWaitForTheStepThread: as an operation's record, a
// range another thread pushed just after the main thread began step 1
// (the autograd thread's, say) can arrive before that thread's end of
// step 0 and start of step 1. It is in step 1, not in step 0 that looked
// open when it came; one pushed between the steps is in none.
func TestCollectorRangesWaitForTheStepThread(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const host = 4_000_000_000
	us := func(n uint64) uint64 { return host + n*1000 }
	h := helloFrame(wireVersion, 611, "n")
	binary.LittleEndian.PutUint32(h[96:], 1) // RANK=0
	send(t, c, stream(h,
		rangeFrame(10, 1, 1, 0, us(0), 0, 0, "step 0"),
		rangeFrame(20, 0, 1, 0, us(5), us(6), 0, "in step 0"),
		rangeFrame(20, 0, 2, 0, us(20), us(21), 0, "between"),
		rangeFrame(20, 0, 3, 0, us(25), us(30), 0, "in step 1"),
		rangeFrame(10, 0, 1, 0, us(0), us(19), 0, "step 0"),
		rangeFrame(10, 1, 2, 0, us(22), 0, 0, "step 1"),
		rangeFrame(10, 0, 2, 0, us(22), us(40), 0, "step 1"),
	), false)
	got := map[string]int32{}
	for _, r := range sink.wait(t, 5) {
		if r.Name != "step" {
			got[r.Name] = r.Step
		}
	}
	want := map[string]int32{"in step 0": 0, "between": profiler.None, "in step 1": 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ranges' steps %v, want %v", got, want)
	}
}

// blockingSink is a sink whose Consume blocks until released, as a
// call-log writer on a hung disk would.
type blockingSink struct {
	entered, release chan struct{}
	once, freed      sync.Once
}

func (s *blockingSink) free() { s.freed.Do(func() { close(s.release) }) }

func (s *blockingSink) Consume([]profiler.Record) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
}

// Close ends by its deadline even while the profiler's collector is stuck
// in a sink's Consume: what it could not hand over is counted, never
// waited for.
func TestCollectorCloseWhileASinkIsStuck(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sink := &blockingSink{entered: make(chan struct{}), release: make(chan struct{})}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sink.free()
		p.Close(context.Background())
	}()
	rec, err := p.NewRecorder(0, runtime.Device{Type: runtime.DeviceType(99)})
	if err != nil {
		t.Fatal(err)
	}
	rec.Start("step")
	rec.End()
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the profiler never delivered to the sink")
	}
	c, err := NewCollector(p)
	if err != nil {
		t.Fatal(err)
	}
	// An operation whose channel never comes, on a connection left open:
	// Close delivers it host-only, to the stuck profiler.
	conn := send(t, c, stream(helloFrame(wireVersion, 5, "n"),
		wireRec{kind: 3, task: 2, t0: 50, t1: 60, rank: 0, nranks: 2, peer: 1, fn: 7, nch: 1, name: "g"}.frame(),
	), true)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Close(ctx) }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		sink.free() // let Close return, so the test ends
		<-done
		t.Fatal("Close did not return by its deadline while a sink was stuck")
	}
	if err == nil {
		t.Error("Close returned no error though a connection was cut and an operation not handed over")
	}
	if st := c.Stats(); st.IngestErrors != 1 || !strings.Contains(st.LastError, "Consume") {
		t.Errorf("stats %+v; want the operation not handed over counted, naming the stuck sink", st)
	}
}

// NCCL's Gather and Scatter take a count per rank, as AllGather does;
// nccl-tests' S is the root's whole buffer (count × size × ranks) and the
// bus factor (n−1)/n. A grouped send and receive (SendRecv) moves its
// count once, factor 1.
func TestCollectorGatherScatterSizes(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	const hash = 0x77
	data := stream(
		helloFrame(wireVersion, 300, "n0"),
		wireRec{kind: 1, hash: hash, rank: 0, nranks: 8, nnodes: 1, peer: 0, name: "pg"}.frame(),
		// 1000 float32 from each of 8 ranks to the root: 32,000 bytes.
		wireRec{kind: 2, hash: hash, task: 1, seq: 0, t0: 100, t1: 200, a0: 1000, a1: 4000, rank: 0, nranks: 8, peer: 0,
			fn: 9, dtype: 7, nch: 1, name: "pg"}.frame(),
		wireRec{kind: 2, hash: hash, task: 2, seq: 0, t0: 300, t1: 400, a0: 500, a1: 1000, rank: 0, nranks: 8, peer: 0,
			fn: 10, dtype: 6, nch: 1, name: "pg"}.frame(),
		wireRec{kind: 2, hash: hash, task: 3, seq: 0, t0: 500, t1: 600, a0: 64, a1: 256, rank: 0, nranks: 8, peer: -1,
			fn: 11, dtype: 7, nch: 1, name: "pg"}.frame(),
	)
	send(t, c, data, false)
	recs := byOp(sink.wait(t, 3))
	for op, want := range map[string]struct {
		bytes  int64
		factor float64
	}{"Gather": {32000, 0.875}, "Scatter": {8000, 0.875}, "SendRecv": {256, 1}} {
		col := recs[op].Collective
		if col.Bytes != want.bytes || col.BusFactor != want.factor {
			t.Errorf("%s: %d bytes, bus factor %v; want %d and %v", op, col.Bytes, col.BusFactor, want.bytes, want.factor)
		}
	}
}

// goneJob streams, one after another, the connections of procs
// short-lived processes (a job whose launcher restarts its workers): each
// with a launcher rank, kernel names (names KiB in all), a kernel, three
// collectives with their channel, a send to its pair's other process
// without one (host-only when the process goes), and its loss counts.
// Pairs (2k, 2k+1) send over a communicator of their own: they stage
// each other, the first after it has gone.
func goneJob(t *testing.T, c *Collector, procs, names int) {
	t.Helper()
	name := strings.Repeat("k", 1000)
	for i := range procs {
		h := helloFrame(wireVersion, uint32(5000+i), "n")
		putRank(h, i)
		pair := uint64(1000 + i/2)
		parts := [][]byte{h,
			wireRec{kind: 1, hash: 7, rank: int32(i), nranks: int32(procs), peer: int32(i % 8)}.frame(),
			wireRec{kind: 1, hash: pair, rank: int32(i % 2), nranks: 2, peer: int32(i % 8)}.frame(),
			activityFrame(0, 1, 0, 0, 0, 0, 0, 0, "libcupti.so.13"),
		}
		for id := range names {
			parts = append(parts, nameFrames(uint32(id+1), name+strconv.Itoa(id))...)
		}
		parts = append(parts, activityFrame(1, 500, 600, uint32(i%8), 7, 1, 0, 0, ""))
		for k := range 3 {
			// Each later than the one before: one enqueued no later than
			// one the GPU has run may be given up at the next sweep.
			task, d := uint64(k+1), uint64(k)*10_000
			parts = append(parts,
				wireRec{kind: 2, hash: 7, task: task, seq: uint64(k), t0: 1000 + d, t1: 2000 + d, a0: 4, a1: 16, rank: int32(i), nranks: int32(procs),
					peer: -1, fn: 5, dtype: 8, nch: 1}.frame(),
				wireRec{kind: 4, hash: 7, task: task, parent: 2, channel: 0, t0: 50 + d, t1: 60 + d, a0: 1500 + d, a1: 1600 + d}.frame())
		}
		parts = append(parts,
			wireRec{kind: 3, hash: pair, task: 9, t0: 30_000, t1: 30_100, a0: 4, a1: 16, rank: int32(i % 2), nranks: 2, peer: int32(1 - i%2),
				fn: 6, dtype: 8, nch: 1}.frame(),
			wireRec{kind: 5, a0: 1}.frame())
		send(t, c, stream(parts...), false)
	}
}

// heavyProcesses counts the processes of c that still hold what only
// records still to come need.
func heavyProcesses(c *Collector) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, pr := range c.procs {
		if pr.ops != nil || pr.act.names != nil || pr.passed != nil {
			n++
		}
	}
	return n
}

// TestCollectorReleasesGoneProcesses: a process whose connections have
// all closed, with nothing left to deliver, keeps only a tombstone once
// the grace for a reconnect has passed: the collector's memory does not
// grow with the number of processes a job ever had (each held 64 KiB of
// kernel names here), and every record and count stays.
func TestCollectorReleasesGoneProcesses(t *testing.T) {
	sink := &counter{}
	p, err := profiler.New(profiler.WithMaxRecords(0)) // the records delivered are the sink's
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	c, err := NewCollector(p, WithLinger(20*time.Millisecond), withGrace(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const procs, names = 200, 64
	before := testmem.LiveHeap()
	goneJob(t, c, procs, names)
	// Per process: a kernel, three collectives and the send.
	const want = procs * 5
	deadline := time.Now().Add(20 * time.Second)
	for sink.n.Load() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for heavyProcesses(c) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	heavy := heavyProcesses(c)
	grew := int64(testmem.LiveHeap()) - int64(before)
	t.Logf("%d processes: %d still heavy, heap grew %d KiB (%d bytes a process)", procs, heavy, grew>>10, grew/procs)
	if heavy > 0 {
		t.Errorf("%d of %d gone processes still hold their state", heavy, procs)
	}
	if grew > procs*4<<10 {
		t.Errorf("heap grew %d bytes, %d a process: more than a tombstone's", grew, grew/procs)
	}
	if n := sink.n.Load(); n != want {
		t.Errorf("%d records, want %d", n, want)
	}
	st := c.Stats()
	if st.Processes != procs || st.Connections != procs || st.Records != procs*4 || st.HostOnly != procs || st.KernelChannels != procs*3 ||
		st.Kernels != procs || st.Traced != procs || st.Communicating != procs || st.PluginRingFull != procs ||
		st.Staged != procs || st.StagedBySends != procs || st.Stages != 2 || st.Provisional != 0 || st.Unstaged != 0 || st.Orphans != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCollectorReleasedProcessReconnects: a process that reconnects
// after its state was released (its drainer stopped with its last
// communicator, and started again with a new one) goes on as the same
// process: its rank and device by communicator, its step numbers, its
// ended steps (a late end sent again is no second step), its loss counts
// since it began (not counted again); its kernel names come again with
// the new connection.
func TestCollectorReleasedProcessReconnects(t *testing.T) {
	c, sink, _ := newTestCollector(t, WithLinger(20*time.Millisecond), withGrace(50*time.Millisecond))
	const mangled = "_ZN2at6native6kernelEv"
	first := [][]byte{helloFrame(wireVersion, 900, "n"),
		wireRec{kind: 1, hash: 5, rank: 1, nranks: 2, peer: 3}.frame(),
		activityFrame(0, 1, 0, 0, 0, 0, 0, 0, "libcupti.so.13")}
	first = append(first, nameFrames(1, mangled)...)
	first = append(first,
		rangeFrame(10, 1, 1, 0, 100, 0, 0, "step 3"),
		activityFrame(1, 1100, 1200, 3, 7, 1, 0, 0, ""),
		wireRec{kind: 2, hash: 5, task: 1, seq: 0, t0: 1000, t1: 2000, a0: 4, a1: 16, rank: 1, nranks: 2, peer: -1, fn: 5, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: 5, task: 1, parent: 2, channel: 0, t0: 50, t1: 60, a0: 1500, a1: 1600}.frame(),
		rangeFrame(10, 0, 2, 2, 2500, 2600, 1, "fwd"),
		rangeFrame(10, 0, 1, 2, 100, 5000, 0, "step 3"),
		wireRec{kind: 5, a0: 4}.frame())
	send(t, c, stream(first...), false)
	sink.wait(t, 4)
	released := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		pr := c.procs[procKey{"n", 900}]
		return pr != nil && pr.released
	}
	deadline := time.Now().Add(10 * time.Second)
	for !released() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !released() {
		t.Fatal("the gone process was not released")
	}
	second := [][]byte{helloFrame(wireVersion, 900, "n"), activityFrame(0, 1, 0, 0, 0, 0, 0, 0, "libcupti.so.13")}
	second = append(second, nameFrames(1, mangled)...)
	second = append(second,
		rangeFrame(10, 0, 1, 2, 100, 5000, 0, "step 3"), // sent again
		rangeFrame(10, 1, 3, 2, 6000, 0, 0, "step"),
		activityFrame(1, 7100, 7200, 3, 7, 1, 0, 0, ""),
		wireRec{kind: 2, hash: 5, task: 2, seq: 1, t0: 7000, t1: 8000, a0: 4, a1: 16, rank: 1, nranks: 2, peer: -1, fn: 5, dtype: 8, nch: 1}.frame(),
		wireRec{kind: 4, hash: 5, task: 2, parent: 2, channel: 0, t0: 6050, t1: 6060, a0: 7500, a1: 7600}.frame(),
		rangeFrame(10, 0, 4, 2, 8500, 8600, 1, "fwd"),
		rangeFrame(10, 0, 3, 2, 6000, 9000, 0, "step"),
		wireRec{kind: 5, a0: 4}.frame())
	send(t, c, stream(second...), false)
	recs := sink.wait(t, 8)
	steps := map[int32]int{}
	for _, r := range recs {
		if r.Rank != 1 || r.Device.Index != 3 {
			t.Errorf("%s: rank %d device %v, want rank 1 on cuda:3", r.Name, r.Rank, r.Device)
		}
		switch r.Kind {
		case profiler.KindKernel:
			if r.Name != KernelName(mangled) {
				t.Errorf("kernel named %q, want %q", r.Name, KernelName(mangled))
			}
		case profiler.KindCollective:
			if want := int32(3 + r.Collective.Seq>>4); r.Step != want {
				t.Errorf("collective #%d in step %d, want %d", r.Collective.Seq>>4, r.Step, want)
			}
		}
		if r.Name == profiler.StepName {
			steps[r.Step]++
		}
	}
	if !maps.Equal(steps, map[int32]int{3: 1, 4: 1}) {
		t.Errorf("steps %v, want 3 and 4 once each", steps)
	}
	if st := c.Stats(); st.Processes != 1 || st.Connections != 2 || st.Records != 2 || st.Kernels != 2 || st.Steps != 2 ||
		st.RangesLost != 2 || st.PluginRingFull != 4 || st.Traced != 1 || st.Communicating != 1 {
		t.Errorf("stats %+v", st)
	}
}

// withGrace shortens the grace for a gone process's reconnect.
func withGrace(d time.Duration) Option { return optionFunc(func(c *config) { c.grace = d }) }

// TestCollectorSharedGPUs: processes of one host that made communicators
// on a GPU of one UUID share it; the same UUID on another host, a GPU of
// one process, and a process whose plugin read no UUID share nothing. A
// process's second communicator on its GPU counts it once.
func TestCollectorSharedGPUs(t *testing.T) {
	c, sink, _ := newTestCollector(t)
	uuid := func(b byte) (a1, a2 uint64) {
		var u [16]byte
		for i := range u {
			u[i] = b + byte(i)
		}
		return binary.LittleEndian.Uint64(u[:8]), binary.LittleEndian.Uint64(u[8:])
	}
	procs := []struct {
		pid  uint32
		host string
		gpu  byte // 0: no UUID read
	}{{1, "a", 0x10}, {2, "a", 0x10}, {3, "a", 0x20}, {4, "b", 0x10}, {5, "a", 0}}
	for i, p := range procs {
		a1, a2 := uint64(0), uint64(0)
		if p.gpu != 0 {
			a1, a2 = uuid(p.gpu)
		}
		hash := uint64(100 + i)
		send(t, c, stream(helloFrame(wireVersion, p.pid, p.host),
			wireRec{kind: 1, hash: hash, t0: 10, a0: 22809, a1: a1, a2: a2, rank: 0, nranks: 1, peer: 0}.frame(),
			wireRec{kind: 1, hash: hash + 50, t0: 11, a0: 22809, a1: a1, a2: a2, rank: 0, nranks: 1, peer: 0}.frame(),
			wireRec{kind: 2, hash: hash, task: 1, seq: 0, t0: 1000, t1: 2000, a0: 4, a1: 16, rank: 0, nranks: 1, peer: -1, fn: 1, dtype: 8, nch: 1}.frame(),
			wireRec{kind: 4, hash: hash, task: 1, parent: 2, channel: 0, t0: 50, t1: 60, a0: 1500, a1: 1600}.frame()), false)
	}
	sink.wait(t, len(procs))
	st := c.Stats()
	if st.Processes != len(procs) || st.SharedGPUs != 1 || st.SharingProcesses != 2 || !slices.Equal(st.NCCLVersions, []int32{22809}) {
		t.Errorf("processes %d, shared GPUs %d by %d processes, NCCL %v; want 5, 1 by 2, [22809]", st.Processes, st.SharedGPUs, st.SharingProcesses, st.NCCLVersions)
	}
	// The GPUs by UUID, each once, in byte order: 0x10… (hosts a and b)
	// and 0x20….
	var want [][16]byte
	for _, b := range []byte{0x10, 0x20} {
		var u [16]byte
		for i := range u {
			u[i] = b + byte(i)
		}
		want = append(want, u)
	}
	if !slices.Equal(st.GPUs, want) {
		t.Errorf("GPUs %x, want %x", st.GPUs, want)
	}
}
