package pipeline

import (
	"fmt"
	"math"
	"runtime/metrics"

	"github.com/trainscope/trainscope/runtime"
)

// MemoryEstimate is what the built-in trainer allocates for one rank, in
// bytes.
type MemoryEstimate struct {
	// Device is what the rank allocates on its device: per chunk its
	// weights and their gradients (Width² floats a layer each), every
	// microbatch's activations (the chunk's input and each layer's
	// output) and the gradients received and sent for each microbatch;
	// on the last virtual stage the target projection (Width² floats) and
	// a step's inputs and targets and one loss per microbatch; two scratch
	// blocks besides.
	Device int64
	// Host is what the rank holds in host memory: its replica's share of
	// the synthetic dataset on the first and last stages (a step's inputs
	// for each of the D/G global batches the dataset holds, see
	// Config) — page-locked where the backend offers it
	// (runtime.HostAlloc) — a step's per-microbatch losses on the last,
	// and the staging of its weight and projection uploads.
	Host int64
}

// Memory returns the most any one rank of c allocates (Device and Host
// each at their maximum over the ranks); c's sizes must be valid.
func (c Config) Memory() MemoryEstimate {
	var e MemoryEstimate
	for s := range c.Stages {
		r := c.rankMemory(s)
		e.Device = max(e.Device, r.Device)
		e.Host = max(e.Host, r.Host)
	}
	return e
}

// rankMemory is what the rank of stage s allocates (every replica's rank
// of a stage allocates the same): rank.setup's buffers, counted the way it
// makes them.
func (c Config) rankMemory(s int) MemoryEstimate {
	const f32 = 4
	p, v, m, w := int64(c.Stages), int64(c.Chunks), int64(c.Microbatches), int64(c.Width)
	l := int64(c.layersPerChunk())
	n := int64(c.MicrobatchSize) * w // one microbatch's activations
	dev := 2 * n                     // scratch
	for ci := range v {
		virtual := ci*p + int64(s)
		dev += 2 * l * w * w // weights, gradients
		dev += m * (l + 1) * n
		dev += m * n // gradients received
		if virtual != 0 {
			dev += m * n // gradients sent back
		}
		if virtual == p*v-1 {
			dev += w*w + 2*m*n + m + 1 // projection, a step's inputs and targets, per-microbatch losses and a spare
		}
	}
	first, last := s == 0, s == c.Stages-1
	host := 2 * w * w // weight (and projection) upload: one layer as floats, then as bytes
	if first || last {
		host += int64(c.datasetBatches()) * m * n // the replica's share of the dataset
	}
	if last {
		host += m // a step's per-microbatch losses, copied back
	}
	return MemoryEstimate{Device: f32 * dev, Host: f32 * host}
}

// sharedScratch is what a rank's data-parallel endpoint of the in-process
// collectives (ccl/local.NewShared, used when ranks share devices) may
// allocate to combine an all-reduce of a chunk's gradients, twice that
// where a rank's peers are on other devices (a staging copy): 0 when the
// ranks have devices of their own or there is no data parallelism.
func (c Config) sharedScratch(devices int) int64 {
	ranks := c.Stages * c.Replicas
	if devices >= ranks || c.Replicas < 2 {
		return 0
	}
	w := int64(c.Width)
	b := 4 * int64(c.layersPerChunk()) * w * w
	if devices > 1 {
		b *= 2
	}
	return b
}

// maxRankBytes bounds the estimate for one rank, far beyond any machine,
// so that the figures (and the buffer sizes behind them) cannot overflow.
const maxRankBytes = 1 << 60

// checkSizesRepresentable refuses sizes whose buffers could not even be
// counted; it runs before any arithmetic in int.
func (c Config) checkSizesRepresentable() error {
	fl := func(x int) float64 { return float64(x) }
	w, n := fl(c.Width), fl(c.MicrobatchSize)*fl(c.Width)
	l := fl(c.Layers) // every layer on one rank: the bound for any layout
	perRank := 4 * fl(c.Chunks) * ((2*l+1)*w*w + fl(c.Microbatches)*(l+5)*n)
	if perRank > maxRankBytes {
		return invalid("%s, %s, %s and %s: too large to allocate (more than 2^60 bytes a rank)",
			field("Width", c.Width), field("Layers", c.Layers), field("Microbatches", c.Microbatches), field("MicrobatchSize", c.MicrobatchSize))
	}
	if fl(c.Stages)*fl(c.Chunks)*fl(c.Microbatches) > maxRankBytes {
		return invalid("%s × %s × %s: too many pipeline actions to count (more than 2^60)",
			field("Stages", c.Stages), field("Chunks", c.Chunks), field("Microbatches", c.Microbatches))
	}
	// The global batch sizes the dataset (Config.datasetRows) and the
	// reference's buffers.
	if 4*fl(c.Replicas)*fl(c.Microbatches)*n > maxRankBytes {
		return invalid("%s, %s, %s and %s: a global batch too large to allocate (more than 2^60 bytes)",
			field("Replicas", c.Replicas), field("Microbatches", c.Microbatches), field("MicrobatchSize", c.MicrobatchSize), field("Width", c.Width))
	}
	return nil
}

// checkMemory compares what the ranks allocate with what their devices
// have, as d reports it once per device; c's rank count must be at most
// MaxRanks (validateModel checks it). A device whose memory d cannot tell is not
// checked. Ranks on devices that share the host's memory are counted
// together, with the host memory each keeps and the garbage collector's
// headroom (that memory is Go's heap). Ranks on devices of their own keep
// host memory too (their share of the dataset, page-locked where the
// backend offers it, and the staging of their uploads): it is counted
// against the host's memory, without the headroom.
func (c Config) checkMemory(d runtime.MemoryDescriber, devices int) error {
	ranks := c.Stages * c.Replicas
	var hostNeed float64
	var hostMem runtime.DeviceMemory
	hostRanks := 0
	// Host memory kept by the ranks on devices of their own.
	var devHost float64
	devRanks := 0
	// Ranks sharing a device (rank r is on device r mod devices) add up.
	type onDevice struct {
		need  int64
		ranks []int
	}
	perDevice := make(map[int]*onDevice)
	// Each device is asked once: a backend may read the host's memory
	// afresh at every call (cpu reads /proc/meminfo).
	type described struct {
		mem runtime.DeviceMemory
		err error
	}
	memOf := make(map[int]described, min(ranks, devices))
	for id := range ranks {
		idx := id % devices
		dm, ok := memOf[idx]
		if !ok {
			dm.mem, dm.err = d.DeviceMemory(idx)
			memOf[idx] = dm
		}
		mem, err := dm.mem, dm.err
		if err != nil {
			continue // unknown: nothing to compare with
		}
		need := c.rankMemory(id % c.Stages)
		need.Device += c.sharedScratch(devices)
		if mem.Host {
			hostNeed += float64(need.Device + need.Host)
			hostMem = mem
			hostRanks++
			continue
		}
		devHost += float64(need.Host)
		devRanks++
		od := perDevice[idx]
		if od == nil {
			od = &onDevice{}
			perDevice[idx] = od
		}
		od.need += need.Device
		od.ranks = append(od.ranks, id)
		if capacity := capacityOf(mem); (capacity > 0 || mem.AvailableKnown) && od.need > capacity {
			dev := runtime.Device{Type: c.Backend, Index: idx}
			who, more := fmt.Sprintf("rank %d", id), fieldName("Stages")
			if len(od.ranks) > 1 {
				// More stages would share the same device: more devices
				// is what helps.
				who, more = fmt.Sprintf("ranks %v sharing it", od.ranks), fieldName("Devices")
			}
			avail := bytesString(float64(capacity)) + " is"
			if capacity == 0 {
				avail = "nothing is" // taken by another process, or by this one
			}
			return invalid("the model needs about %s on %s (%s), but %s available there: lower %s, %s, %s or %s, or raise %s",
				bytesString(float64(od.need)), dev, who, avail,
				fieldName("Width"), fieldName("Layers"), fieldName("Microbatches"), fieldName("MicrobatchSize"), more)
		}
	}
	// The schedule's plan (planRounds) is the process's, on the host
	// whatever the backend: with the ranks on host memory, or alone.
	plan := float64(planBytes(c.Stages, c.Chunks, c.Microbatches))
	if hostRanks == 0 {
		mem, ok := hostMemory()
		if !ok {
			return nil // unknown: nothing to compare with
		}
		hostMem = mem
	}
	capacity, growth := hostCapacity(hostMem)
	need := (hostNeed+plan)*growth + devHost
	if capacity == 0 || need <= float64(capacity) {
		return nil
	}
	headroom := ""
	if growth > 1 {
		headroom = fmt.Sprintf(" × %.3g for the garbage collector's headroom (GOGC=%.0f)", growth, 100*(growth-1))
	}
	if devHost > (hostNeed+plan)*growth {
		what := "the schedule's plan"
		if hostNeed > 0 {
			what += " and the ranks on host memory"
		}
		others := fmt.Sprintf(" + %s for %s%s", bytesString(hostNeed+plan), what, headroom)
		return invalid("the ranks on %s devices keep about %s of host memory per rank (their share of the dataset and the staging of their uploads) × %d ranks%s = %s, but %s is available on the host: lower %s, %s, %s or %s",
			c.Backend, bytesString(devHost/float64(devRanks)), devRanks, others, bytesString(need), bytesString(float64(capacity)),
			fieldName("Width"), fieldName("Microbatches"), fieldName("MicrobatchSize"), fieldName("Replicas"))
	}
	onDevices := ""
	if devHost > 0 {
		onDevices = fmt.Sprintf(" + %s kept on the host by %d ranks on %s devices", bytesString(devHost), devRanks, c.Backend)
	}
	if plan >= hostNeed {
		ranks := ""
		if hostRanks > 0 {
			ranks = fmt.Sprintf(" (+ %s for %d ranks on this host)", bytesString(hostNeed), hostRanks)
		}
		return invalid("the schedule's plan of 2 × %s × %s × %s = %.0f actions a step needs about %s of host memory%s%s%s = %s, but %s is available: lower %s, %s or %s",
			field("Stages", c.Stages), field("Chunks", c.Chunks), field("Microbatches", c.Microbatches),
			2*float64(c.Stages)*float64(c.Chunks)*float64(c.Microbatches), bytesString(plan), ranks, headroom, onDevices,
			bytesString(need), bytesString(float64(capacity)), fieldName("Stages"), fieldName("Chunks"), fieldName("Microbatches"))
	}
	planned := ""
	if plan >= hostNeed/100 {
		planned = fmt.Sprintf(" + %s for the schedule's plan", bytesString(plan))
	}
	return invalid("the model needs about %s per rank × %d ranks on this host%s%s%s = %s, but %s is available: lower %s, %s, %s, %s or %s",
		bytesString(hostNeed/float64(hostRanks)), hostRanks, planned, headroom, onDevices, bytesString(need), bytesString(float64(capacity)),
		fieldName("Width"), fieldName("Layers"), fieldName("Microbatches"), fieldName("MicrobatchSize"), fieldName("Replicas"))
}

// hostMemory is the host's memory as the cpu backend reports it (its
// DeviceMemory, with Host set: /proc/meminfo's MemAvailable on Linux),
// which is what Validate compares host-backed ranks with; ok is false
// where that backend is not registered or does not describe the host.
// Tests replace it.
var hostMemory = func() (mem runtime.DeviceMemory, ok bool) {
	impl, err := runtime.Available(runtime.CPU)
	if err != nil {
		return mem, false
	}
	d, isDescriber := impl.(runtime.MemoryDescriber)
	if !isDescriber {
		return mem, false
	}
	mem, err = d.DeviceMemory(0)
	if err != nil || !mem.Host || capacityOf(mem) == 0 {
		return runtime.DeviceMemory{}, false
	}
	return mem, true
}

// hostCapacity is what Go's heap may grow to on a host of memory mem
// (capacityOf, capped by GOMEMLIMIT), 0 when unknown, and the factor by
// which the garbage collector lets the heap exceed its live size
// (heapGrowth).
func hostCapacity(mem runtime.DeviceMemory) (capacity int64, growth float64) {
	capacity = capacityOf(mem)
	growth, limit := heapGrowth()
	if limit > 0 && (capacity == 0 || limit < capacity) {
		capacity = limit
	}
	return capacity, growth
}

// capacityOf is what a device can still allocate: Available, else Total,
// else 0 (unknown; none left where AvailableKnown).
func capacityOf(m runtime.DeviceMemory) int64 {
	if m.Available > 0 || m.AvailableKnown {
		return m.Available
	}
	return m.Total
}

// heapGrowth reads how far Go's garbage collector lets the heap grow past
// its live size before collecting, 1 + GOGC/100, and the memory limit
// (GOMEMLIMIT), 0 when none is set. Under a limit the collector keeps the
// heap below it rather than at GOGC's ratio, so growth is 1 then; with
// GOGC=off and no limit garbage is never collected, which no ratio
// describes, and growth stays at the default's 2.
func heapGrowth() (growth float64, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	growth = 2
	if s[0].Value.Kind() == metrics.KindUint64 {
		if pct := s[0].Value.Uint64(); pct <= math.MaxInt32 {
			growth = 1 + float64(pct)/100
		}
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		if l := s[1].Value.Uint64(); l < math.MaxInt64 {
			return 1, int64(l)
		}
	}
	return growth, 0
}

// bytesString writes a size the way the message reads it: 34.4 GB.
func bytesString(b float64) string {
	switch {
	case b >= 1e12:
		return fmt.Sprintf("%.1f TB", b/1e12)
	case b >= 1e9:
		return fmt.Sprintf("%.1f GB", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", b/1e6)
	}
	return fmt.Sprintf("%.1f kB", b/1e3)
}
