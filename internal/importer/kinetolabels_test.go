package importer

import (
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// interleavedTrace is rank 1 of an interleaved pipeline as
// torch.distributed.pipelining's multi-stage schedule records it: the
// rank (global rank 5) holds stages 1 and 3 (chunks 0 and 1), each action a "PP:…"
// range on the main thread (tid 10); the backward kernel is launched by
// the autograd thread (tid 20) while the main thread waits in "PP:3B0";
// a receive runs as a batch of one, a send and a receive as a batch of
// two. No distributedInfo pg_config: the actions stage the rank.
const interleavedTrace = `{"distributedInfo": {"rank": 5}, "traceEvents": [
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#4","pid":1,"tid":10,"ts":0,"dur":1000},
{"ph":"X","cat":"user_annotation","name":"PP:1RECV_F0","pid":1,"tid":10,"ts":5,"dur":20},
{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":10,"ts":6,"dur":2,"args":{"Collective name":"recv","Src Rank":4,"Process Group Name":"7","Process Group Ranks":"[4, 5]","Group size":2,"dtype":"BFloat16","In msg nelems":8,"Out msg nelems":8}},
{"ph":"X","cat":"user_annotation","name":"nccl:coalesced","pid":1,"tid":10,"ts":10,"dur":10},
{"ph":"X","cat":"cuda_driver","name":"cuLaunchKernelEx","pid":1,"tid":10,"ts":11,"dur":2,"args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)","pid":0,"tid":20,"ts":30,"dur":10,"args":{"correlation":1,"device":0,"stream":20}},
{"ph":"X","cat":"user_annotation","name":"PP:1F0","pid":1,"tid":10,"ts":50,"dur":100},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":10,"ts":60,"dur":20},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":10,"ts":65,"dur":5,"args":{"correlation":2}},
{"ph":"X","cat":"kernel","name":"gemm_f1","pid":0,"tid":7,"ts":70,"dur":50,"args":{"correlation":2,"device":0,"stream":7}},
{"ph":"X","cat":"user_annotation","name":"PP:3F0","pid":1,"tid":10,"ts":200,"dur":100},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":10,"ts":210,"dur":5,"args":{"correlation":3}},
{"ph":"X","cat":"kernel","name":"gemm_f3","pid":0,"tid":7,"ts":220,"dur":50,"args":{"correlation":3,"device":0,"stream":7}},
{"ph":"X","cat":"user_annotation","name":"PP:3B0","pid":1,"tid":10,"ts":400,"dur":200},
{"ph":"X","cat":"cpu_op","name":"autograd::engine::evaluate_function: MmBackward0","pid":1,"tid":20,"ts":410,"dur":100},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":20,"ts":420,"dur":5,"args":{"correlation":4}},
{"ph":"X","cat":"kernel","name":"gemm_b3","pid":0,"tid":7,"ts":430,"dur":60,"args":{"correlation":4,"device":0,"stream":7}},
{"ph":"X","cat":"user_annotation","name":"PP:1SEND_B0","pid":1,"tid":10,"ts":620,"dur":40},
{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":10,"ts":621,"dur":2,"args":{"Collective name":"send","Dst Rank":4,"Process Group Name":"7","Process Group Ranks":"[4, 5]"}},
{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":10,"ts":624,"dur":2,"args":{"Collective name":"recv","Src Rank":4,"Process Group Name":"7","Process Group Ranks":"[4, 5]"}},
{"ph":"X","cat":"cuda_driver","name":"cuLaunchKernelEx","pid":1,"tid":10,"ts":630,"dur":2,"args":{"correlation":5}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)","pid":0,"tid":20,"ts":640,"dur":10,"args":{"correlation":5,"device":0,"stream":20}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":10,"ts":700,"dur":5,"args":{"correlation":6}},
{"ph":"X","cat":"kernel","name":"sgd","pid":0,"tid":7,"ts":710,"dur":10,"args":{"correlation":6,"device":0,"stream":7}},
{"ph":"X","cat":"cpu_op","name":"autograd::engine::evaluate_function: Late","pid":1,"tid":20,"ts":1500,"dur":10},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":20,"ts":1502,"dur":5,"args":{"correlation":7}},
{"ph":"X","cat":"kernel","name":"late","pid":0,"tid":7,"ts":1510,"dur":10,"args":{"correlation":7,"device":0,"stream":7}}
]}`

func TestKinetoPipelineLabels(t *testing.T) {
	p, err := ParseKineto("interleaved.json", strings.NewReader(interleavedTrace))
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]struct {
		step              int32
		phase             profiler.Phase
		chunk, microbatch int
	}{
		"gemm_f1": {4, profiler.Forward, 0, 0},  // stage 1: the rank's first
		"gemm_f3": {4, profiler.Forward, 1, 0},  // stage 3: its second
		"gemm_b3": {4, profiler.Backward, 1, 0}, // from the autograd thread
		"sgd":     {4, profiler.PhaseNone, profiler.None, profiler.None},
		"late":    {profiler.None, profiler.PhaseNone, profiler.None, profiler.None}, // after the step
	} {
		r := byName(p.Records, name)
		if r == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if r.Step != w.step || r.Phase != w.phase || int(r.Chunk) != w.chunk || int(r.Microbatch) != w.microbatch || r.Kind != profiler.KindKernel {
			t.Errorf("%s: step %d phase %v chunk %d microbatch %d kind %v; want step %d phase %v chunk %d microbatch %d, a kernel",
				name, r.Step, r.Phase, r.Chunk, r.Microbatch, r.Kind, w.step, w.phase, w.chunk, w.microbatch)
		}
	}
	// The autograd thread's range takes its step from the step range it
	// started in, on the main thread.
	if r := byName(p.Records, "autograd::engine::evaluate_function: MmBackward0"); r == nil || r.Step != 4 || r.Phase != profiler.PhaseNone {
		t.Errorf("the autograd thread's range: %+v; want step 4, no phase (only kernels are labelled)", r)
	}
	if p.KernelsLabelled != 3 || p.StagedBy != "pipelining actions" {
		t.Errorf("%d kernels labelled, staged by %q; want 3, by its pipelining actions", p.KernelsLabelled, p.StagedBy)
	}
	for i := range p.Records {
		if p.Records[i].Stage != 1 {
			t.Errorf("%s: stage %d, want 1 (the rank's first stage)", p.Records[i].Name, p.Records[i].Stage)
		}
	}
	// The step range is on the rank's device.
	if s := byName(p.Records, profiler.StepName); s == nil || s.Step != 4 || s.Device.String() != "cuda:0" {
		t.Errorf("step range %+v; want step 4 on cuda:0", s)
	}
	// The receive of a batch of one takes its call's metadata, the peer
	// as its place in the group; the batch of two keeps none.
	var p2p []profiler.Record
	for _, r := range p.Records {
		if r.Kind == profiler.KindP2P {
			p2p = append(p2p, r)
		}
	}
	if len(p2p) != 2 {
		t.Fatalf("%d point-to-point records, want 2", len(p2p))
	}
	c := p2p[0].Collective
	if c.Op != "Recv" || c.Peer != 0 || c.GroupRank != 1 || c.Group != "7" || c.Bytes != 16 || c.DType != "bfloat16" {
		t.Errorf("the receive: %+v; want Recv from group rank 0 in group 7 (ranks 4, 5), 16 bytes of bfloat16", c)
	}
	if c := p2p[1].Collective; c.Op != "SendRecv" || c.Peer != -1 {
		t.Errorf("the batch of two: %+v; want SendRecv with no peer", c)
	}
	if !containsWarning(p.Warnings, "1 point-to-point kernels each ran a batch of several sends and receives") {
		t.Errorf("warnings %q lack the batch of two", p.Warnings)
	}
}

// TestKinetoStagedByGroup: a rank's place in its pipeline process group
// (distributedInfo.pg_config) stages it, before its actions do; a group
// of other dimensions, or one the rank is not in, does not.
func TestKinetoStagedByGroup(t *testing.T) {
	for _, tc := range []struct {
		cfg       string
		stage     int16
		stagedBy  string
		warnsPart string
	}{
		{`[{"pg_name":"0","pg_desc":"default_pg","ranks":[4,5,6,7]},{"pg_name":"2","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":[3,5]}]`, 1, "process group", ""},
		{`[{"pg_name":"mesh_pp","pg_desc":"undefined","ranks":[5,9,13]}]`, 0, "process group", ""},
		{`[{"pg_name":"3","pg_desc":"DATA_PARALLEL_GROUP","ranks":[1,5]},{"pg_name":"4","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":[0,1]}]`, 1, "pipelining actions", ""},
		{`{"not":"a list"}`, 1, "pipelining actions", "distributedInfo.pg_config not read"},
		// Ranks written as the collectives' "Process Group Ranks" are, a
		// string, shortened past the first ranks with "..." and the last.
		{`[{"pg_name":"2","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":"[3, 5]"}]`, 1, "process group", ""},
		{`[{"pg_name":"2","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","pg_size":16,"ranks":"[1, 2, 3, ..., 5]"}]`, 15, "process group", ""},
		{`[{"pg_name":"2","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","pg_size":"16","ranks":"[0, 1, 2, 3, 4, 5, 6]"}]`, 5, "process group", ""},
		// A group whose ranks cannot be read is named, and the others
		// still stage the rank.
		{`[{"pg_name":"7","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":{"r":5}},{"pg_name":"8","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":[5,6]}]`, 0, "process group",
			`distributedInfo.pg_config: process group "7" (PIPELINE_MODEL_PARALLEL_GROUP): its ranks {"r":5} are not a list of ranks`},
		// A pipeline group shortened before the rank: its place is not
		// known, and it is not guessed.
		{`[{"pg_name":"2","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","pg_size":16,"ranks":"[0, 1, 2, ..., 15]"}]`, 1, "pipelining actions",
			`process group "2" (PIPELINE_MODEL_PARALLEL_GROUP) lists only some of its 16 ranks ([0, 1, 2, ..., 15]): rank 5's place in it is not known`},
	} {
		text := strings.Replace(interleavedTrace, `"distributedInfo": {"rank": 5}`, `"distributedInfo": {"rank": 5, "pg_config": `+tc.cfg+`}`, 1)
		p, err := ParseKineto("t.json", strings.NewReader(text))
		if err != nil {
			t.Fatalf("%s: %v", tc.cfg, err)
		}
		if p.Records[0].Stage != tc.stage || p.StagedBy != tc.stagedBy {
			t.Errorf("%s: stage %d by %q, want %d by %q", tc.cfg, p.Records[0].Stage, p.StagedBy, tc.stage, tc.stagedBy)
		}
		if tc.warnsPart != "" && !containsWarning(p.Warnings, tc.warnsPart) {
			t.Errorf("%s: warnings %q lack %q", tc.cfg, p.Warnings, tc.warnsPart)
		}
	}
}

// TestKinetoNestedProfilerStep: ProfilerStep#N inside the loop's own
// range labels the step of what is in it, and of the other threads' work
// in its time, but is no step range (a step range is top-level).
func TestKinetoNestedProfilerStep(t *testing.T) {
	text := strings.Replace(interleavedTrace, `"traceEvents": [`, `"traceEvents": [
{"ph":"X","cat":"user_annotation","name":"train","pid":1,"tid":10,"ts":-10,"dur":2000},`, 1)
	p, err := ParseKineto("t.json", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if byName(p.Records, profiler.StepName) != nil || byName(p.Records, "ProfilerStep#4") == nil {
		t.Error("a nested ProfilerStep#4 became a step range")
	}
	if r := byName(p.Records, "gemm_b3"); r == nil || r.Step != 4 || r.Phase != profiler.Backward {
		t.Errorf("gemm_b3: %+v; want step 4, backward", r)
	}
}

func containsWarning(ws []string, part string) bool {
	for _, w := range ws {
		if strings.Contains(w, part) {
			return true
		}
	}
	return false
}

// TestKinetoStepUnderPythonStack: with_stack's python_function events
// enclose the whole loop; the ProfilerStep#N inside them is still the
// step range, top-level, and what it encloses nests under it.
func TestKinetoStepUnderPythonStack(t *testing.T) {
	text := strings.Replace(interleavedTrace, `"traceEvents": [`, `"traceEvents": [
{"ph":"X","cat":"python_function","name":"train.py(10): <module>","pid":1,"tid":10,"ts":-100,"dur":3000},
{"ph":"X","cat":"python_function","name":"train.py(20): main","pid":1,"tid":10,"ts":-90,"dur":2900},`, 1)
	p, err := ParseKineto("t.json", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	step := byName(p.Records, profiler.StepName)
	if step == nil || step.Step != 4 || step.Depth != 0 || step.Parent != 0 {
		t.Fatalf("step range %+v; want step 4, top-level", step)
	}
	mm := byName(p.Records, "aten::mm")
	pp := byName(p.Records, "PP:1F0")
	if pp == nil || mm == nil || pp.Parent != step.ID || pp.Depth != 1 || mm.Parent != pp.ID || mm.Depth != 2 {
		t.Errorf("PP:1F0 %+v, aten::mm %+v; want them at depths 1 and 2 under the step", pp, mm)
	}
	if main := byName(p.Records, "train.py(20): main"); main == nil || main.Depth != 1 || main.Step != profiler.None {
		t.Errorf("the Python caller %+v: want depth 1 under <module>, no step", main)
	}
	if r := byName(p.Records, "gemm_b3"); r == nil || r.Step != 4 || r.Phase != profiler.Backward || r.Chunk != 1 {
		t.Errorf("gemm_b3: %+v; want step 4, backward, chunk 1", r)
	}
}

// TestKinetoRankFromCollectives: a trace with no distributedInfo (older
// PyTorch, or Kineto on its own) still says its rank through its
// collectives' record_param_comms: "Rank" is the rank's place in the
// call's process group, so the global rank is that place of "Process
// Group Ranks" (or "Rank" itself on the default group).
func TestKinetoRankFromCollectives(t *testing.T) {
	trace := strings.Replace(interleavedTrace, `{"distributedInfo": {"rank": 5}, "traceEvents": [`, `{"traceEvents": [`, 1)
	if trace == interleavedTrace {
		t.Fatal("the trace's head changed")
	}
	// withArgs adds args[i] to the i-th record_param_comms call.
	withArgs := func(args ...string) string {
		const at = `"Process Group Name":"7",`
		parts := strings.Split(trace, at)
		if len(parts) <= len(args) {
			t.Fatalf("the trace has %d calls, not %d", len(parts)-1, len(args))
		}
		var b strings.Builder
		for i, part := range parts[:len(parts)-1] {
			b.WriteString(part + at)
			if i < len(args) {
				b.WriteString(args[i] + ",")
			}
		}
		b.WriteString(parts[len(parts)-1])
		return b.String()
	}
	for _, tc := range []struct {
		name, text string
		rank       int // −1: not known
		warn       string
	}{
		{"none", trace, -1, ""},
		{"place in the group", withArgs(`"Rank":1`, `"Rank":1`), 5, ""},
		{"as a string", withArgs(`"Rank":"1"`), 5, ""},
		{"default group", strings.Replace(trace, `"Process Group Name":"7","Process Group Ranks":"[4, 5]","Group size":2`,
			`"Process Group Name":"0","Process Group Description":"default_pg","Rank":3,"Group size":8`, 1), 3, ""},
		{"not in the shortened list", strings.Replace(trace, `"Process Group Ranks":"[4, 5]","Group size":2`,
			`"Rank":12,"Process Group Ranks":"[0, 1, 2, ..., 15]","Group size":16`, 1), -1, ""},
		{"the shortened list's last", strings.Replace(trace, `"Process Group Ranks":"[4, 5]","Group size":2`,
			`"Rank":15,"Process Group Ranks":"[0, 1, 2, ..., 31]","Group size":16`, 1), 31, ""},
		{"disagreeing", withArgs(`"Rank":1`, `"Rank":0`), -1, "collectives name ranks 4 and 5 as this trace's: its rank is not taken from them"},
	} {
		p, err := ParseKineto("t.json", strings.NewReader(tc.text))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.rank < 0 {
			if p.RankKnown {
				t.Errorf("%s: rank %d known", tc.name, p.Records[0].Rank)
			}
		} else if !p.RankKnown || p.Records[0].Rank != tc.rank {
			t.Errorf("%s: rank %d (known %v), want %d", tc.name, p.Records[0].Rank, p.RankKnown, tc.rank)
		}
		if tc.warn != "" && !containsWarning(p.Warnings, tc.warn) {
			t.Errorf("%s: warnings %q lack %q", tc.name, p.Warnings, tc.warn)
		}
	}
}

// TestKinetoStepAfterTheLastNumber: a step range without a number after
// ProfilerStep#2147483647 (the largest a step label holds) takes no
// number past it: it wrapped to −2147483648.
func TestKinetoStepAfterTheLastNumber(t *testing.T) {
	text := `{"traceEvents": [
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#2147483647","pid":1,"tid":10,"ts":0,"dur":100},
{"ph":"X","cat":"user_annotation","name":"step","pid":1,"tid":10,"ts":200,"dur":100}
]}`
	p, err := ParseKineto("t.json", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Records {
		if r.Step < 0 && r.Step != profiler.None {
			t.Errorf("%s (from %d to %d ns): step %d", r.Name, r.HostStart, r.HostEnd, r.Step)
		}
	}
}
