package importer

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
)

// collectiveOps maps PyTorch's "Collective name" (the names c10d's
// ProcessGroupNCCL records with RECORD_PARAM_COMMS) to trainscope's
// operations. Names not listed keep a name of their own, which has no bus
// bandwidth factor (ccl.BusFactor is 0 for it).
var collectiveOps = map[string]string{
	"allreduce":                       ccl.OpAllReduce,
	"all_reduce":                      ccl.OpAllReduce,
	"allreduce_coalesced":             ccl.OpAllReduce,
	"allgather":                       ccl.OpAllGather,
	"all_gather":                      ccl.OpAllGather,
	"_allgather_base":                 ccl.OpAllGather,
	"allgather_coalesced":             ccl.OpAllGather,
	"allgather_into_tensor_coalesced": ccl.OpAllGather,
	"all_gather_into_tensor":          ccl.OpAllGather,
	"reduce_scatter":                  ccl.OpReduceScatter,
	"_reduce_scatter_base":            ccl.OpReduceScatter,
	"reduce_scatter_tensor":           ccl.OpReduceScatter,
	"reduce_scatter_tensor_coalesced": ccl.OpReduceScatter,
	"broadcast":                       ccl.OpBroadcast,
	"_broadcast_oop":                  ccl.OpBroadcast,
	"reduce":                          ccl.OpReduce,
	"_reduce_oop":                     ccl.OpReduce,
	"send":                            ccl.OpSend,
	"recv":                            ccl.OpRecv,
	"recvanysource":                   ccl.OpRecv,
	"all_to_all":                      ccl.OpAllToAll,
	"all_to_allv":                     ccl.OpAllToAll,
	"alltoall":                        ccl.OpAllToAll,
	"alltoall_base":                   ccl.OpAllToAll,
	"gather":                          ccl.OpGather,
	"scatter":                         ccl.OpScatter,
	"barrier":                         "Barrier",
}

// kernelOps are the operations NCCL names its kernels after
// (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_AllGather_RING_LL_Sum_int8_t).
var kernelOps = []string{ccl.OpAllReduce, ccl.OpAllGather, ccl.OpReduceScatter, ccl.OpBroadcast, ccl.OpReduce, ccl.OpSendRecv, ccl.OpAllToAll}

// dtypes maps c10::ScalarType names, as the "dtype" arg spells them, to
// trainscope's names and element sizes.
var dtypes = map[string]struct {
	name string
	size int64
}{
	"Float":           {"float32", 4},
	"Double":          {"float64", 8},
	"Half":            {"float16", 2},
	"BFloat16":        {"bfloat16", 2},
	"Byte":            {"uint8", 1},
	"Char":            {"int8", 1},
	"Short":           {"int16", 2},
	"Int":             {"int32", 4},
	"Long":            {"int64", 8},
	"Bool":            {"bool", 1},
	"ComplexHalf":     {"complex32", 4},
	"ComplexFloat":    {"complex64", 8},
	"ComplexDouble":   {"complex128", 16},
	"UInt16":          {"uint16", 2},
	"UInt32":          {"uint32", 4},
	"UInt64":          {"uint64", 8},
	"Float8_e5m2":     {"float8_e5m2", 1},
	"Float8_e4m3fn":   {"float8_e4m3fn", 1},
	"Float8_e5m2fnuz": {"float8_e5m2fnuz", 1},
	"Float8_e4m3fnuz": {"float8_e4m3fnuz", 1},
	"Float8_e8m0fnu":  {"float8_e8m0fnu", 1},
	// Two float4 values packed in each element's byte.
	"Float4_e2m1fn_x2": {"float4_e2m1fn_x2", 1},
}

// isNCCLKernel reports a kernel NCCL launched.
func isNCCLKernel(name string) bool {
	return strings.HasPrefix(name, "ncclDevKernel_") || strings.HasPrefix(name, "ncclKernel_")
}

// collectiveOf reads the collective a GPU activity carries: from PyTorch's
// metadata where present, else from the NCCL kernel's name (operation
// only: no size, so no bandwidth).
func collectiveOf(d *kEvent, rank int, unknownDType map[string]bool) (profiler.Collective, bool) {
	a := d.args()
	if a.Collective == "" && !isNCCLKernel(d.name) {
		return profiler.Collective{}, false
	}
	c := profiler.Collective{Peer: -1, Root: -1}
	if a.Collective != "" {
		name := strings.ToLower(string(a.Collective))
		op, ok := collectiveOps[name]
		if !ok {
			op = string(a.Collective)
		}
		c.Op = op
	} else {
		c.Op = kernelOp(d.name)
	}
	if a.GroupSize != nil && a.GroupSize.V > 0 && a.GroupSize.V < 1<<31 {
		c.GroupSize = int32(a.GroupSize.V)
	}
	c.Group = string(a.GroupName)
	c.GroupRank = groupRank(string(a.GroupRanks), c.GroupSize, rank)
	if a.Seq != nil && a.Seq.V >= 0 {
		c.Seq = uint64(a.Seq.V)
	} else {
		c.Seq = noSeq // numbered by numberCollectives
	}
	// PyTorch gives the peer's global rank; the peer is its place in the
	// group, as the rank's own is (GroupRank), and as NCCL numbers it.
	switch {
	case c.Op == ccl.OpSend && a.DstRank != nil:
		c.Peer = peerRank(string(a.GroupRanks), c.GroupSize, a.DstRank.V)
	case c.Op == ccl.OpRecv && a.SrcRank != nil:
		c.Peer = peerRank(string(a.GroupRanks), c.GroupSize, a.SrcRank.V)
	}
	if a.InNelems != nil || a.OutNelems != nil {
		var in, out int64
		if a.InNelems != nil {
			in = max(a.InNelems.V, 0)
		}
		if a.OutNelems != nil {
			out = max(a.OutNelems.V, 0)
		}
		// Per-rank buffer: the smaller side of a gather or scatter (the
		// larger is the gathered total), either side of the others.
		c.Count = min(in, out)
		if c.Count == 0 {
			c.Count = max(in, out)
		}
		if dt, ok := dtypes[string(a.DType)]; ok {
			c.DType = dt.name
			// S as nccl-tests defines it: the larger side, which is the
			// total gathered size for AllGather and ReduceScatter.
			if n := max(in, out); n <= (1<<62)/dt.size {
				c.Bytes = n * dt.size
			}
		} else {
			c.DType = string(a.DType)
			unknownDType[c.DType] = true
		}
	}
	c.BusFactor = ccl.BusFactor(c.Op, int(c.GroupSize))
	return c, true
}

// kernelOp reads the operation from an NCCL kernel's name.
func kernelOp(name string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(name, "ncclDevKernel_"), "ncclKernel_")
	word, _, _ := strings.Cut(rest, "_")
	word, _, _ = strings.Cut(word, "(")
	for _, op := range kernelOps {
		if word == op {
			return op
		}
	}
	return word
}

// groupRank is rank's position in a "Process Group Ranks" list such as
// "[0, 1, 2, 3]" of a group of size ranks (0: not known); 0 when absent.
func groupRank(list string, size int32, rank int) int32 {
	return max(listIndex(list, size, int64(rank)), 0)
}

// listIndex is v's position in a "Process Group Ranks" list of a group of
// size ranks (0: not known), −1 where the list does not hold it. PyTorch
// shortens a long list to its first ranks and "...", which newer versions
// follow with the last rank: the group's last, at size−1.
func listIndex(list string, size int32, v int64) int32 {
	list = strings.Trim(strings.TrimSpace(list), "[]")
	want := strconv.FormatInt(v, 10)
	fields := strings.Split(list, ",")
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "..." {
			if i == len(fields)-2 && size > int32(i) && strings.TrimSpace(fields[i+1]) == want {
				return size - 1
			}
			return -1
		}
		if f == want {
			return int32(i)
		}
	}
	return -1
}

// listAt is the rank at place i of a "Process Group Ranks" list of a
// group of size ranks (listIndex's inverse), −1 where the list does not
// hold it: past its end, or left out where it was shortened.
func listAt(list string, size int32, i int64) int64 {
	fields := strings.Split(strings.Trim(strings.TrimSpace(list), "[]"), ",")
	for j, f := range fields {
		f = strings.TrimSpace(f)
		if f == "..." {
			if j == len(fields)-2 && size > int32(j) && i == int64(size)-1 {
				f = strings.TrimSpace(fields[j+1])
			} else {
				return -1
			}
		} else if int64(j) != i {
			continue
		}
		if v, err := strconv.ParseInt(f, 10, 64); err == nil && v >= 0 {
			return v
		}
		return -1
	}
	return -1
}

// rankFromCollectives is the global rank a trace's record_param_comms
// calls say it is, for a trace without distributedInfo: each call's place
// in its process group ("Rank") looked up in the group's ranks, or taken
// as it is on the default group. Calls that disagree are named in a
// warning and give no rank.
func rankFromCollectives(p *Profile, events *eventList) flexInt {
	var seen []int64
	for i := range events.len() {
		ev := events.at(i)
		a := ev.args()
		if ev.class != classHost || ev.name != "record_param_comms" || a.Rank == nil || !a.Rank.Set || a.Rank.V < 0 {
			continue
		}
		g := int64(-1)
		switch {
		case a.GroupRanks != "":
			size := int32(0)
			if a.GroupSize != nil && a.GroupSize.V > 0 && a.GroupSize.V <= 1<<30 {
				size = int32(a.GroupSize.V)
			}
			g = listAt(string(a.GroupRanks), size, a.Rank.V)
		case strings.Trim(string(a.GroupDesc), `"`) == "default_pg":
			g = a.Rank.V
		}
		if g >= 0 && !slices.Contains(seen, g) {
			seen = append(seen, g)
		}
	}
	switch len(seen) {
	case 0:
		return flexInt{}
	case 1:
		return flexInt{V: seen[0], Set: true}
	}
	slices.Sort(seen)
	names := make([]string, len(seen))
	for i, v := range seen {
		names[i] = strconv.FormatInt(v, 10)
	}
	p.warnf("%s: no distributedInfo, and its collectives name ranks %s and %s as this trace's: its rank is not taken from them",
		p.Path, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	return flexInt{}
}

// peerRank is global rank v's position in a "Process Group Ranks" list of
// a group of size ranks; v itself where the list does not hold it
// (absent, or shortened).
func peerRank(list string, size int32, v int64) int32 {
	if v < 0 || v >= 1<<31 {
		return -1
	}
	if i := listIndex(list, size, v); i >= 0 {
		return i
	}
	return int32(v)
}

// noSeq marks a collective whose trace gave no sequence number (PyTorch
// adds "Seq" to its NCCL kernels' metadata only in some versions).
const noSeq = ^uint64(0)

// numberCollectives gives the collectives of one rank's records that came
// without a sequence number one, so that the analysis can match them
// across ranks: the k-th collective of group g in step s (by device
// start) is (s+1)<<32 | k, as every rank's k-th collective of a group in a
// step is the same call — NCCL runs a communicator's calls in order. It
// returns how many it numbered.
func numberCollectives(recs []profiler.Record) int {
	var idx []int
	for i := range recs {
		if recs[i].Kind == profiler.KindCollective && recs[i].Collective.Seq == noSeq {
			idx = append(idx, i)
		}
	}
	start := func(r *profiler.Record) time.Duration {
		if r.HasDevice {
			return r.DeviceStart
		}
		return r.HostStart
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(start(&recs[a]), start(&recs[b])) })
	type key struct {
		group string
		step  int32
	}
	next := map[key]uint64{}
	for _, i := range idx {
		r := &recs[i]
		k := key{r.Collective.Group, r.Step}
		r.Collective.Seq = uint64(uint32(r.Step+1))<<32 | next[k]
		next[k]++
	}
	return len(idx)
}
