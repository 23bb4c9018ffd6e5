package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
)

// pipelineTrace is one rank's torch.profiler trace of steps steps of an
// interleaved pipeline, shaped as PyTorch 2.11's are: per step a
// ProfilerStep#N; per microbatch and chunk a "PP:…F" and a "PP:…B" range,
// each with an aten op launching kernels (the backward ones from the
// autograd thread), a send as a batch of one with its record_param_comms;
// per step an all-reduce. About 28 events a microbatch and chunk.
func pipelineTrace(steps, microbatches, kernels int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"schemaVersion":1,"baseTimeNanoseconds":1772000000000000000,"distributedInfo":{"rank":1,"pg_config":[{"pg_name":"1","pg_desc":"PIPELINE_MODEL_PARALLEL_GROUP","ranks":[0,1]}]},"traceEvents":[`)
	first := true
	ev := func(format string, args ...any) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, format, args...)
	}
	corr := 0
	t := 0.0
	launch := func(tid int, name string) {
		corr++
		ev(`{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":7,"tid":%d,"ts":%.3f,"dur":4.5,"args":{"External id":%d,"correlation":%d}}`, tid, t, corr, corr)
		ev(`{"ph":"X","cat":"kernel","name":%q,"pid":0,"tid":7,"ts":%.3f,"dur":40.25,"args":{"External id":%d,"queued":0,"device":0,"context":1,"stream":7,"correlation":%d,"registers per thread":96,"grid":[2,1,1],"block":[640,1,1]}}`, name, t+10, corr, corr)
		t += 5
	}
	for s := 1; s <= steps; s++ {
		stepStart := t
		ev(`{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":7,"tid":7,"ts":%.3f,"dur":%d,"args":{"External id":1}}`, s, stepStart, microbatches*2*2*(kernels*2*5+200)+100)
		t += 1
		for mb := 0; mb < microbatches; mb++ {
			for _, stage := range []int{1, 3} {
				for _, phase := range []string{"F", "B"} {
					start := t
					ev(`{"ph":"X","cat":"user_annotation","name":"PP:%d%s%d","pid":7,"tid":7,"ts":%.3f,"dur":%d,"args":{}}`, stage, phase, mb, start, kernels*2*5+100)
					t += 1
					tid := 7
					if phase == "B" {
						tid = 8
						ev(`{"ph":"X","cat":"cpu_op","name":"autograd::engine::evaluate_function: MmBackward0","pid":7,"tid":8,"ts":%.3f,"dur":%d,"args":{"Sequence number":1}}`, t, kernels*2*5+20)
					} else {
						ev(`{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":7,"tid":7,"ts":%.3f,"dur":%d,"args":{"Sequence number":1}}`, t, kernels*2*5+20)
					}
					t += 1
					for k := 0; k < kernels; k++ {
						launch(tid, "void gemm_kernel<float, 128, 128>(float const*, float*)")
						launch(tid, "void at::native::vectorized_elementwise_kernel<4, tanh_kernel>(int, float*)")
					}
					t = start + float64(kernels*2*5+100) + 2
					ev(`{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":7,"tid":7,"ts":%.3f,"dur":2,"args":{"Collective name":"send","Dst Rank":0,"Process Group Name":"1","Process Group Ranks":"[0, 1]","Group size":2,"dtype":"Float","In msg nelems":2097152,"Out msg nelems":2097152}}`, t)
					t += 3
					ev(`{"ph":"X","cat":"user_annotation","name":"nccl:coalesced","pid":7,"tid":7,"ts":%.3f,"dur":8,"args":{}}`, t)
					launch(7, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
					t += 80
				}
			}
		}
		launch(7, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
		t = stepStart + float64(microbatches*2*2*(kernels*2*5+200)+200)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// TestWritePipelineTrace writes pipelineTrace(steps, 8, 10) to the file
// TRAINSCOPE_PIPELINE_TRACE names, with TRAINSCOPE_PIPELINE_STEPS steps
// (default 340: about 110 MB), to measure profile-run import of a large
// trace (docs/benchmarks.md). Without TRAINSCOPE_PIPELINE_TRACE it is
// skipped.
func TestWritePipelineTrace(t *testing.T) {
	path := os.Getenv("TRAINSCOPE_PIPELINE_TRACE")
	if path == "" {
		t.Skip("TRAINSCOPE_PIPELINE_TRACE names no file to write")
	}
	steps := 340
	if s := os.Getenv("TRAINSCOPE_PIPELINE_STEPS"); s != "" {
		var err error
		if steps, err = strconv.Atoi(s); err != nil || steps < 1 {
			t.Fatalf("TRAINSCOPE_PIPELINE_STEPS %q: want a number of steps", s)
		}
	}
	raw := pipelineTrace(steps, 8, 10)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d steps, %d bytes", path, steps, len(raw))
}

// heapPeak samples the heap's objects every millisecond until the
// function it returns is called, which stops it and returns the highest
// it saw above what the heap held at the start (after a collection).
// It is what a benchmark's B/op does not say: how much it held at once.
func heapPeak() func() uint64 {
	// One sample, read again and again: the sampling allocates nothing
	// the benchmark's B/op would count.
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		peak := base
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				done <- peak - base
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		return <-done
	}
}

// BenchmarkParseKineto: the import of one rank's trace of an interleaved
// pipeline (steps, labels, stages, p2p pairing) beside the baseline of
// decoding the same JSON into plain Go values, which any reader pays.
// peak-heap-B is the most the heap held above the input at once, garbage
// not yet collected included: what an import of a large file needs.
func BenchmarkParseKineto(b *testing.B) {
	for _, steps := range []int{10, 100} {
		raw := pipelineTrace(steps, 8, 10)
		b.Run(fmt.Sprintf("steps=%d/import", steps), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			peak := heapPeak()
			defer func() { b.ReportMetric(float64(peak()), "peak-heap-B") }()
			for b.Loop() {
				p, err := ParseKineto("bench.json", bytes.NewReader(raw))
				if err != nil || p.KernelsLabelled != steps*8*2*2*10*2 {
					b.Fatalf("%v; %d kernels labelled", err, p.KernelsLabelled)
				}
			}
		})
		b.Run(fmt.Sprintf("steps=%d/json-decode", steps), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			peak := heapPeak()
			defer func() { b.ReportMetric(float64(peak()), "peak-heap-B") }()
			for b.Loop() {
				var doc struct {
					TraceEvents []struct {
						Ph, Cat, Name string
						Pid, Tid      int
						Ts, Dur       float64
						Args          map[string]any
					} `json:"traceEvents"`
				}
				if err := json.Unmarshal(raw, &doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
