package importer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

func byName(recs []profiler.Record, name string) *profiler.Record {
	for i := range recs {
		if recs[i].Name == name {
			return &recs[i]
		}
	}
	return nil
}

func TestKinetoTrace(t *testing.T) {
	p := loadFile(t, "testdata/kineto/rank0.json")
	if p.Format != FormatKineto || !p.RankKnown {
		t.Fatalf("format %v, rank known %v", p.Format, p.RankKnown)
	}
	// 9 host events and 4 GPU activities; three launches merge with
	// what they launched (and the memcpy's): 10 records.
	if len(p.Records) != 10 {
		for _, r := range p.Records {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d records, want 10", len(p.Records))
	}
	base := time.Duration(1772000000000000000)
	us := time.Microsecond
	step := byName(p.Records, profiler.StepName) // ProfilerStep#3, a step range
	mm := byName(p.Records, "aten::mm")
	gemm := byName(p.Records, "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32")
	if step == nil || mm == nil || gemm == nil {
		t.Fatal("missing records")
	}
	if step.Depth != 0 || step.Step != 3 || step.HostStart != base+100*us || step.HostDuration() != 2000*us || step.Kind != profiler.KindHost {
		t.Errorf("step: %+v", *step)
	}
	if mm.Parent != step.ID || mm.Depth != 1 || mm.Step != 3 {
		t.Errorf("aten::mm: parent %d depth %d step %d", mm.Parent, mm.Depth, mm.Step)
	}
	// The kernel takes its launch's place: host time the cudaLaunchKernel
	// (130–140 µs), device time the kernel (150–270.5 µs). It is a kernel
	// CUPTI traced: busy time counts it as compute.
	if gemm.Parent != mm.ID || gemm.Depth != 2 || gemm.Kind != profiler.KindKernel || !gemm.HasDevice ||
		gemm.HostStart != base+130*us || gemm.HostEnd != base+140*us ||
		gemm.DeviceStart != base+150*us || gemm.DeviceEnd != base+270*us+500*time.Nanosecond ||
		gemm.Device != (runtime.Device{Type: runtime.CUDA, Index: 0}) || gemm.Stream != 7 {
		t.Errorf("gemm: %+v", *gemm)
	}
	if gemm.Activity() != profiler.ActivityCompute {
		t.Errorf("gemm counts as %v in busy time, want compute", gemm.Activity())
	}
	if byName(p.Records, "cudaLaunchKernel") != nil {
		t.Error("a launch that launched one kernel is still a record of its own")
	}
	if s := byName(p.Records, "cudaStreamSynchronize"); s == nil || s.HasDevice || s.Depth != 1 || s.HostDuration() != 20*us {
		t.Errorf("cudaStreamSynchronize: %+v", s)
	}
	if m := byName(p.Records, "Memcpy DtoH (Device -> Pageable)"); m == nil || m.Kind != profiler.KindDevice || m.DeviceDuration() != 30*us || m.HostDuration() != 12*us {
		t.Errorf("memcpy: %+v", m)
	}

	ar := byName(p.Records, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
	if ar == nil || ar.Kind != profiler.KindCollective || ar.Depth != 3 || ar.DeviceDuration() != 400*us {
		t.Fatalf("all-reduce: %+v", ar)
	}
	// 1 Mi float32 elements: S = 4 MiB; 2(n−1)/n = 1 for two ranks.
	c := ar.Collective
	if c.Op != "AllReduce" || c.Bytes != 4<<20 || c.Count != 1<<20 || c.DType != "float32" || c.GroupSize != 2 || c.Group != "0" || c.GroupRank != 0 || c.BusFactor != 1 {
		t.Errorf("all-reduce collective %+v", c)
	}
	ag := byName(p.Records, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
	// 256 Ki bf16 in, 512 Ki out: S is the gathered total, 1 MiB; (n−1)/n.
	if ag == nil || ag.Collective.Op != "AllGather" || ag.Collective.Bytes != 1<<20 || ag.Collective.Count != 256<<10 || ag.Collective.DType != "bfloat16" || ag.Collective.BusFactor != 0.5 {
		t.Errorf("all-gather: %+v", ag)
	}
	if len(p.Warnings) != 2 || !strings.Contains(p.Warnings[0], `"Trace"`) || !strings.Contains(p.Warnings[1], "2 collectives carry no sequence number") {
		t.Errorf("warnings %q, want one about the skipped Trace span and one about the 2 collectives without Seq", p.Warnings)
	}
	// Neither kernel says its "Seq": in step 3, group "0", the all-reduce
	// (at 330 µs) is the first call and the all-gather (at 820 µs) the
	// second, on every rank alike.
	if ar.Collective.Seq != 4<<32 || ag.Collective.Seq != 4<<32|1 {
		t.Errorf("sequence numbers %#x and %#x, want %#x and %#x", ar.Collective.Seq, ag.Collective.Seq, uint64(4<<32), uint64(4<<32|1))
	}
}

func TestKinetoRanksAndCombine(t *testing.T) {
	p0 := loadFile(t, "testdata/kineto/rank0.json")
	p1 := loadFile(t, "testdata/kineto/rank1.json")
	// A trace that does not say its rank gets the first free one.
	anon, err := ParseKineto("anon.json", strings.NewReader(`[{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":5,"dur":2}]`))
	if err != nil {
		t.Fatal(err)
	}
	if anon.RankKnown {
		t.Fatal("a bare array says its rank")
	}
	ws := AssignRanks([]*Profile{p0, anon, p1})
	if anon.Records[0].Rank != 2 || len(ws) != 1 || !strings.Contains(ws[0], "rank 2") {
		t.Errorf("anonymous trace got rank %d; warnings %q", anon.Records[0].Rank, ws)
	}
	recs := Combine([]*Profile{p0, p1})
	if len(recs) != 20 {
		t.Fatalf("%d records", len(recs))
	}
	// Rank 1's process started 50 µs after rank 0's: its step starts at
	// 50 µs on the combined timeline, rank 0's at 0.
	var s0, s1 *profiler.Record
	ids := map[[2]uint64]bool{}
	for i := range recs {
		r := &recs[i]
		if ids[[2]uint64{uint64(r.Rank), r.ID}] {
			t.Errorf("rank %d ID %d twice", r.Rank, r.ID)
		}
		ids[[2]uint64{uint64(r.Rank), r.ID}] = true
		if r.Name == profiler.StepName {
			if r.Rank == 0 {
				s0 = r
			} else {
				s1 = r
			}
		}
		if i > 0 && recs[i-1].HostEnd > r.HostEnd {
			t.Errorf("record %d ends before the one delivered before it", i)
		}
	}
	if s0 == nil || s1 == nil || s0.HostStart != 0 || s1.HostStart != 50*time.Microsecond {
		t.Errorf("steps start at %v and %v", s0.HostStart, s1.HostStart)
	}
}

// TestRepeatedRank: a rank two files hold is combined only when the
// files lie apart in time and steps (one run's profiling windows);
// otherwise the later file's records of it are left out, and a warning
// names both files.
func TestRepeatedRank(t *testing.T) {
	// later moves a profile's records d later and n steps on.
	later := func(p *Profile, d time.Duration, n int32) *Profile {
		for i := range p.Records {
			r := &p.Records[i]
			r.HostStart += d
			r.HostEnd += d
			if r.HasDevice {
				r.DeviceStart += d
				r.DeviceEnd += d
			}
			if r.Step != profiler.None {
				r.Step += n
			}
		}
		return p
	}
	seed := loadFile(t, "testdata/seed/calls.rank0")
	oneRange := loadFile(t, "testdata/kineto/rank0.json")
	oneRange.Records = oneRange.Records[:1]
	for _, tc := range []struct {
		name     string
		second   *Profile
		combined bool
		warning  string
	}{
		{"a copy", loadFile(t, "testdata/kineto/rank0.json"), false,
			"rank 0 is in both testdata/kineto/rank0.json and testdata/kineto/rank0.json, over the same time or steps: testdata/kineto/rank0.json's 10 ranges of rank 0 are left out"},
		{"the next window", later(loadFile(t, "testdata/kineto/rank0.json"), time.Second, 1), true,
			"rank 0 is in testdata/kineto/rank0.json and testdata/kineto/rank0.json, at different times and steps: combined"},
		{"later, same step", later(loadFile(t, "testdata/kineto/rank0.json"), time.Second, 0), false, "left out"},
		{"same time, next step", later(loadFile(t, "testdata/kineto/rank0.json"), 0, 1), false, "left out"},
		{"another format", seed, false, "testdata/seed/calls.rank0's 8 ranges of rank 0 are left out"},
		{"one range of a copy", oneRange, false, "testdata/kineto/rank0.json's 1 range of rank 0 is left out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := loadFile(t, "testdata/kineto/rank0.json")
			one := loadFile(t, "testdata/kineto/rank1.json")
			n := len(tc.second.Records)
			ws := AssignRanks([]*Profile{first, one, tc.second})
			if len(ws) != 1 || !strings.Contains(ws[0], tc.warning) {
				t.Fatalf("warnings %q, want one saying %q", ws, tc.warning)
			}
			if len(first.Records) != 10 || len(one.Records) != 10 || len(first.LeftOut)+len(one.LeftOut) != 0 {
				t.Errorf("the first files: %d and %d records, left out %v %v; want 10 each, none left out", len(first.Records), len(one.Records), first.LeftOut, one.LeftOut)
			}
			want, wantOut := 0, []int{0}
			if tc.combined {
				want, wantOut = n, nil
			}
			if len(tc.second.Records) != want || !slices.Equal(tc.second.LeftOut, wantOut) {
				t.Errorf("the second file of rank 0 kept %d of %d records, left out ranks %v; want %d, %v", len(tc.second.Records), n, tc.second.LeftOut, want, wantOut)
			}
			steps := 0
			for _, r := range Combine([]*Profile{first, one, tc.second}) {
				if r.Rank == 0 && r.Name == profiler.StepName {
					steps++
				}
			}
			if wantSteps := map[bool]int{false: 1, true: 2}[tc.combined]; steps != wantSteps {
				t.Errorf("rank 0 has %d step ranges after Combine, want %d", steps, wantSteps)
			}
		})
	}
}

func TestKinetoErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/kineto/rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		text   string
		offset int64
		want   string
	}{
		{"truncated", string(good[:1500]), 1500, "truncated"},
		{"syntax", `{"traceEvents": [{"ph": "X",, }]}`, 17, "invalid character"},
		{"wrong type", `{"traceEvents": [{"ph": "X", "name": 5}]}`, 38, "name"},
		{"bad ts", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "soon"}]}`, 17, "ts"},
		{"negative dur", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": -3}]}`, 17, "out of range"},
		// A complete event without its duration is malformed, not an
		// instant of no length.
		{"no dur", `{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}`, 17, `event "k": dur: missing`},
		{"null dur", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": null}]}`, 17, `event "a": dur: missing`},
		{"no events", `{"schemaVersion": 1}`, 20, "no traceEvents"},
		// 4611686018427387 µs after a base of 2^62−1 ns, lasting 10^12 µs:
		// it would end past 2^63−1 ns.
		{"end past int64", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 4611686018427387, "dur": 1000000000000}], "baseTimeNanoseconds": 4611686018427387903}`, 17, "out of range"},
		{"trailing", `{"traceEvents": []} x`, 20, "invalid character"},
		{"not an object", `"trace"`, 0, "want a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKineto("t.json", strings.NewReader(tc.text))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Offset != tc.offset || pe.Line != 0 || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "t.json: byte ") {
				t.Errorf("error %q at byte %d, want byte %d mentioning %q", err, pe.Offset, tc.offset, tc.want)
			}
		})
	}
}

func TestMicrosToNanos(t *testing.T) {
	for in, want := range map[string]int64{"1": 1000, "1.5": 1500, "1772000000000123.456": 1772000000000123456, "0.0004": 0, "-2.25": -2250, "1e3": 1000000} {
		got, err := microsToNanos(jsonNumber(in))
		if err != nil || got != want {
			t.Errorf("%s µs: %d ns, %v; want %d", in, got, err, want)
		}
	}
}

// TestKinetoCorrelationClaimedOnce: a GPU activity is launched once. Where
// several runtime calls carry its correlation (a malformed trace), the
// first claims it and the others stay host ranges: the activity's device
// time is counted once, and the records stay as many as the events, not
// launches × activities.
func TestKinetoCorrelationClaimedOnce(t *testing.T) {
	p, err := ParseKineto("t.json", strings.NewReader(`[
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":10,"dur":5,"args":{"correlation":1}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":20,"dur":5,"args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":30,"dur":10,"args":{"correlation":1,"device":0,"stream":7}}]`))
	if err != nil {
		t.Fatal(err)
	}
	us := time.Microsecond
	if len(p.Records) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(p.Records), p.Records)
	}
	k, launch := p.Records[0], p.Records[1]
	if k.Name != "k" || !k.HasDevice || k.HostStart != 10*us || k.HostEnd != 15*us || k.DeviceStart != 30*us || k.DeviceEnd != 40*us {
		t.Errorf("the kernel: %+v; want host 10–15 µs, device 30–40 µs", k)
	}
	if launch.Name != "cudaLaunchKernel" || launch.HasDevice || launch.HostStart != 20*us || launch.HostEnd != 25*us {
		t.Errorf("the second launch: %+v; want a host range at 20–25 µs", launch)
	}

	// 200 launches and 200 kernels of one correlation: the first launch
	// holds the 200 kernels (as a CUDA graph's does), the other 199 are
	// host ranges: 400 records.
	var b strings.Builder
	b.WriteString("[")
	for i := range 200 {
		fmt.Fprintf(&b, `{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":1,"args":{"correlation":1}},`, 2*i)
		fmt.Fprintf(&b, `{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%d,"dur":1,"args":{"correlation":1}},`, 1000+2*i)
	}
	b.WriteString(`{"ph":"M","name":"process_name","pid":1}]`)
	p, err = ParseKineto("t.json", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 400 {
		t.Errorf("%d records from 400 events, want 400", len(p.Records))
	}
}

// TestKinetoWarningsInOrder: the warnings about categories not imported
// and dtypes not known come in the same order every time (by name), so
// that two imports of one trace say the same.
func TestKinetoWarningsInOrder(t *testing.T) {
	trace := `[
{"ph":"X","cat":"overhead","name":"a","pid":1,"tid":1,"ts":1,"dur":1},
{"ph":"X","cat":"Trace","name":"b","pid":1,"tid":1,"ts":1,"dur":1},
{"ph":"X","cat":"cuda_sync","name":"c","pid":1,"tid":1,"ts":1,"dur":1},
{"ph":"X","cat":"gpu_user_annotation","name":"d","pid":1,"tid":1,"ts":1,"dur":1},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":1,"dur":1,"args":{"Collective name":"allreduce","In msg nelems":1,"dtype":"Zeta","Seq":1}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":2,"dur":1,"args":{"Collective name":"allreduce","In msg nelems":1,"dtype":"Alpha","Seq":2}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":3,"dur":1,"args":{"Collective name":"allreduce","In msg nelems":1,"dtype":"Mu","Seq":3}}]`
	want := []string{`category "Trace"`, `category "cuda_sync"`, `category "gpu_user_annotation"`, `category "overhead"`,
		`dtype "Alpha"`, `dtype "Mu"`, `dtype "Zeta"`}
	for range 20 {
		p, err := ParseKineto("t.json", strings.NewReader(trace))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Warnings) != len(want) {
			t.Fatalf("warnings %q, want %d", p.Warnings, len(want))
		}
		for i, w := range want {
			if !strings.Contains(p.Warnings[i], w) {
				t.Fatalf("warnings %q, want them in the order %q", p.Warnings, want)
			}
		}
	}
}

// TestKinetoNewerDTypes: PyTorch's MX scale type and packed float4 are a
// byte an element (Float4_e2m1fn_x2 holds two values in its byte), so
// 8 elements of each are 8 bytes, with no warning.
func TestKinetoNewerDTypes(t *testing.T) {
	trace := `[
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllGather","pid":0,"tid":7,"ts":1,"dur":1,"args":{"Collective name":"allgather","In msg nelems":8,"Out msg nelems":8,"dtype":"Float8_e8m0fnu","Seq":1}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllGather","pid":0,"tid":7,"ts":3,"dur":1,"args":{"Collective name":"allgather","In msg nelems":8,"Out msg nelems":8,"dtype":"Float4_e2m1fn_x2","Seq":2}}]`
	p, err := ParseKineto("t.json", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 || len(p.Records) != 2 {
		t.Fatalf("%d records, warnings %q; want 2 and none", len(p.Records), p.Warnings)
	}
	for i, want := range []string{"float8_e8m0fnu", "float4_e2m1fn_x2"} {
		if c := p.Records[i].Collective; c.DType != want || c.Bytes != 8 {
			t.Errorf("record %d: dtype %q, %d bytes; want %q, 8", i, c.DType, c.Bytes, want)
		}
	}
}

// TestKinetoCapitalisedCategories: the first Kineto traces (PyTorch
// 1.8–1.9) name their categories with a capital letter ("Operator",
// "Runtime", "Kernel", "Memcpy"), which classify reads alike. A "Kernel"
// is a traced kernel as a "kernel" is: busy time counts it as compute.
func TestKinetoCapitalisedCategories(t *testing.T) {
	trace := `{"traceEvents": [
{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 24572, "tid": "24572", "ts": 1621401187223005, "dur": 40, "args": {"External id": 2}},
{"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 24572, "tid": "24572", "ts": 1621401187223010, "dur": 9, "args": {"correlation": 334, "external id": 2}},
{"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": "stream 7", "ts": 1621401187223030, "dur": 120, "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 334, "external id": 2}},
{"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": "stream 7", "ts": 1621401187223200, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 335}}
]}`
	p, err := ParseKineto("old.json", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	k := byName(p.Records, "volta_sgemm_128x64_nn")
	if k == nil || k.Kind != profiler.KindKernel || !k.HasDevice || k.Parent == 0 {
		t.Fatalf("the Kernel: %+v; want a KindKernel launched inside aten::mm", k)
	}
	if k.Activity() != profiler.ActivityCompute {
		t.Errorf("the Kernel counts as %v in busy time, want compute", k.Activity())
	}
	if m := byName(p.Records, "Memcpy DtoH (Device -> Pageable)"); m == nil || m.Kind != profiler.KindDevice {
		t.Errorf("the Memcpy: %+v; want a KindDevice range", m)
	}
}

// TestMicrosToNanosRounds: a time with more than three decimals (float
// noise from a tool that rewrote the trace through a float64) is rounded
// to the nearest nanosecond, not cut; exponent forms are read exactly,
// however large.
func TestMicrosToNanosRounds(t *testing.T) {
	for in, want := range map[string]int64{
		"124.45699999999999":       124457,
		"124.45600000000001":       124456,
		"0.0005":                   1, // half a nanosecond: away from zero
		"0.00049999":               0,
		"-2.2505":                  -2251,
		"-2.25049":                 -2250,
		"1772000000000123.4565":    1772000000000123457,
		"1772000000000123.456499":  1772000000000123456,
		"1.77e15":                  1770000000000000000,
		"1.7720000000001234565E15": 1772000000000123457,
		"1772000000000123456e-3":   1772000000000123456,
		"9.999999e-4":              1,
		"12345E-3":                 12345,
		"1e-500":                   0,
		"0e500":                    0,
		"1e3":                      1000000,
		"+7":                       7000,
		// The largest: zeros past the digits multiplied in up to it.
		"9223372036854775.807":    math.MaxInt64,
		"9223372036854775.8074":   math.MaxInt64,
		"9.223372036854775807e15": math.MaxInt64,
		"9223372036854775807e-3":  math.MaxInt64,
		"-9.2e15":                 -9200000000000000000,
	} {
		got, err := microsToNanos(jsonNumber(in))
		if err != nil || got != want {
			t.Errorf("%s µs: %d ns, %v; want %d", in, got, err, want)
		}
	}
	// trainscope's own traces are written above the exact nanosecond
	// (half a nanosecond before December 2026, a quarter since): read
	// back cut toward zero, both are the nanosecond written.
	for in, want := range map[string]int64{"10.0005": 10000, "10.00025": 10000, "-2.2505": -2250, "-2.25025": -2250, "1.0000005e3": 1000000} {
		got, err := microsToNanosCut(jsonNumber(in))
		if err != nil || got != want {
			t.Errorf("cut: %s µs: %d ns, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "1.2.3", "1e", "1e+", "--1", "-", "1e400", "9223372036854775.808", "1x", "0x10", ".", "e5",
		// Past int64 nanoseconds: by rounding, by the zeros past the
		// digits (1e19 and 1e20 ns), or past a uint64 in the digits.
		"9223372036854775.8075", "1e16", "1e17", "18446744073709551.615", "18446744073709551616e-3"} {
		if got, err := microsToNanos(jsonNumber(in)); err == nil {
			t.Errorf("%q µs: %d ns, want an error", in, got)
		}
	}
}

// TestKinetoNoisyTimesNest: a parent whose duration a float64 rewrote
// as 24.45699999999999 µs still encloses a child that ends where it does
// (124.457 µs): rounded, the parent ends at 124.457 µs, not 1 ns before.
func TestKinetoNoisyTimesNest(t *testing.T) {
	p, err := ParseKineto("t.json", strings.NewReader(`[
{"ph":"X","cat":"cpu_op","name":"parent","pid":1,"tid":1,"ts":100,"dur":24.45699999999999},
{"ph":"X","cat":"cpu_op","name":"child","pid":1,"tid":1,"ts":100.001,"dur":24.456}]`))
	if err != nil {
		t.Fatal(err)
	}
	parent, child := byName(p.Records, "parent"), byName(p.Records, "child")
	if parent == nil || child == nil {
		t.Fatalf("records %+v", p.Records)
	}
	if parent.HostEnd != 124457*time.Nanosecond || child.HostEnd != 124457*time.Nanosecond {
		t.Errorf("parent ends at %v, child at %v; want both at 124.457µs", parent.HostEnd, child.HostEnd)
	}
	if child.Parent != parent.ID || child.Depth != 1 {
		t.Errorf("child: parent %d depth %d; want %d, 1", child.Parent, child.Depth, parent.ID)
	}
}

// TestKinetoBeginEnd: duration events written as "B"/"E" pairs, as
// Chrome-trace writers other than Kineto write them, import as complete
// events do: each "E" ends the latest "B" still open on its pid and tid,
// its args merged with the "B"'s. An "E" with nothing open and a "B"
// never ended are left out, and warnings count them.
func TestKinetoBeginEnd(t *testing.T) {
	trace := `{"traceEvents": [
{"ph":"B","cat":"cpu_op","name":"outer","pid":1,"tid":1,"ts":100},
{"ph":"B","cat":"cpu_op","name":"inner","pid":1,"tid":1,"ts":110},
{"ph":"B","cat":"user_annotation","name":"other thread","pid":1,"tid":2,"ts":115},
{"ph":"E","pid":1,"tid":1,"ts":130},
{"ph":"B","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":140},
{"ph":"E","pid":1,"tid":1,"ts":145,"args":{"correlation":9}},
{"ph":"E","pid":1,"tid":2,"ts":150.5},
{"ph":"E","pid":1,"tid":1,"ts":200},
{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":150,"dur":10,"args":{"correlation":9,"device":0,"stream":7}},
{"ph":"E","pid":1,"tid":1,"ts":210},
{"ph":"B","cat":"cpu_op","name":"never ends","pid":1,"tid":3,"ts":300},
{"ph":"B","cat":"gpu_user_annotation","name":"not imported","pid":1,"tid":4,"ts":1},
{"ph":"E","pid":1,"tid":4,"ts":2}
]}`
	p, err := ParseKineto("t.json", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	us := time.Microsecond
	// outer, inner, the launch merged with its kernel, other thread.
	if len(p.Records) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(p.Records), p.Records)
	}
	outer, inner, k, other := byName(p.Records, "outer"), byName(p.Records, "inner"), byName(p.Records, "k"), byName(p.Records, "other thread")
	if outer == nil || inner == nil || k == nil || other == nil {
		t.Fatalf("records %+v", p.Records)
	}
	if outer.HostStart != 100*us || outer.HostEnd != 200*us || outer.Depth != 0 {
		t.Errorf("outer: %+v; want 100–200 µs at depth 0", *outer)
	}
	if inner.HostStart != 110*us || inner.HostEnd != 130*us || inner.Parent != outer.ID || inner.Depth != 1 {
		t.Errorf("inner: %+v; want 110–130 µs inside outer", *inner)
	}
	// The launch's correlation is on its "E": merged, it claims the kernel.
	if k.HostStart != 140*us || k.HostEnd != 145*us || !k.HasDevice || k.DeviceStart != 150*us || k.DeviceEnd != 160*us ||
		k.Kind != profiler.KindKernel || k.Parent != outer.ID || k.Stream != 7 {
		t.Errorf("k: %+v; want host 140–145 µs, device 150–160 µs, inside outer", *k)
	}
	if other.HostStart != 115*us || other.HostEnd != 150*us+500*time.Nanosecond || other.Depth != 0 {
		t.Errorf("other thread: %+v; want 115–150.5 µs at depth 0", *other)
	}
	want := []string{`1 "B"/"E" pair of category "gpu_user_annotation" not imported`,
		`1 "E" event with no "B" open on its thread`, `1 "B" event never ended`}
	if len(p.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", p.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.Contains(p.Warnings[i], w) {
			t.Errorf("warning %q, want it to say %q", p.Warnings[i], w)
		}
	}

	// An "E" before the "B" it ends is malformed: an error at the "E",
	// which quotes both times (the "B"'s read before the events between).
	bad := `{"traceEvents": [{"ph":"B","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5},` +
		`{"ph":"X","cat":"cpu_op","name":"b","pid":22,"tid":33,"ts":77,"dur":1},{"ph":"E","pid":1,"tid":1,"ts":4}]}`
	_, err = ParseKineto("t.json", strings.NewReader(bad))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Offset != int64(strings.Index(bad, `,{"ph":"E"`)) || !strings.Contains(err.Error(), `"a"`) ||
		!strings.Contains(err.Error(), `("E" at ts 4) before it begins (ts 5)`) {
		t.Errorf("error %v, want a *ParseError at the E event (byte %d) naming \"a\" and its times", err, strings.Index(bad, `,{"ph":"E"`))
	}
}

// TestKinetoPipelineTrace: a trace of more events than an eventList
// block holds (4425: 1475 a step) imports as its generator made it: one
// record per host event, each launch merged with its kernel (802 a step),
// every kernel on device 0 and stream 7, labelled with its work; the
// records are made to measure, and those of one name share its text.
func TestKinetoPipelineTrace(t *testing.T) {
	const steps = 3
	p, err := ParseKineto("pipeline.json", strings.NewReader(string(pipelineTrace(steps, 8, 10))))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != steps*802 || cap(p.Records) != len(p.Records) {
		t.Errorf("%d records (room for %d), want %d", len(p.Records), cap(p.Records), steps*802)
	}
	if p.KernelsLabelled != steps*8*2*2*10*2 {
		t.Errorf("%d kernels labelled, want %d", p.KernelsLabelled, steps*8*2*2*10*2)
	}
	names := map[string]*byte{}
	for i := range p.Records {
		r := &p.Records[i]
		if r.HasDevice && (r.Device != runtime.Device{Type: runtime.CUDA} || r.Stream != 7) {
			t.Fatalf("%s on %v stream %d, want cuda:0 stream 7", r.Name, r.Device, r.Stream)
		}
		if d, ok := names[r.Name]; ok && d != unsafe.StringData(r.Name) {
			t.Fatalf("two copies of the name %q", r.Name)
		}
		names[r.Name] = unsafe.StringData(r.Name)
	}
}
