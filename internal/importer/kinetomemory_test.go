package importer

import (
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// memoryTrace: two steps of rank 0 on device 0, with the "[memory]"
// instants profile_memory=True writes. Device 0's allocator holds 5 MiB
// before the first step, 3 then 1 MiB in step 0 (one instant on the
// autograd thread), 2 MiB in step 1; the host allocator's 100 MiB and
// device 1's 50 MiB are not the rank's device.
const memoryTrace = `{"distributedInfo": {"rank": 0}, "traceEvents": [
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":50,"args":{"Device Type":1,"Device Id":0,"Total Allocated":5242880,"Total Reserved":8388608,"Bytes":5242880}},
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":1,"tid":1,"ts":100,"dur":100},
 {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":110,"dur":5,"args":{"correlation":5}},
 {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":120,"dur":10,"args":{"device":0,"stream":7,"correlation":5}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":2,"ts":150,"args":{"Device Type":1,"Device Id":0,"Total Allocated":3145728,"Total Reserved":4194304,"Bytes":1048576}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":160,"args":{"Device Type":1,"Device Id":0,"Total Allocated":1048576,"Total Reserved":4194304,"Bytes":-2097152}},
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":200,"dur":100},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":250,"args":{"Device Type":1,"Device Id":0,"Total Allocated":2097152,"Total Reserved":4194304,"Bytes":1048576}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":260,"args":{"Device Type":0,"Device Id":-1,"Total Allocated":104857600,"Total Reserved":104857600,"Bytes":1}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":270,"args":{"Device Type":1,"Device Id":1,"Total Allocated":52428800,"Total Reserved":52428800,"Bytes":1}}
]}`

func TestKinetoMemory(t *testing.T) {
	p, err := ParseKineto("memory.json", strings.NewReader(memoryTrace))
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	if p.PeakMemory != 5*mib || p.PeakReserved != 8*mib || p.MemoryEvents != 4 {
		t.Errorf("peak %d allocated, %d reserved, %d events; want 5 MiB, 8 MiB, 4 (device 0's)", p.PeakMemory, p.PeakReserved, p.MemoryEvents)
	}
	peaks := map[int32]int64{}
	for _, r := range p.Records {
		if r.Name == profiler.StepName {
			peaks[r.Step] = r.PeakMemory
		}
	}
	if peaks[0] != 3*mib || peaks[1] != 2*mib || len(peaks) != 2 {
		t.Errorf("steps' peaks %v, want step 0 3 MiB (the autograd thread's instant inside it), step 1 2 MiB", peaks)
	}
	// The report's per-rank peak: the highest of its ranges'.
	s := profiler.NewSummary()
	s.Consume(p.Records)
	if got := s.Peaks()[0]; got != 3*mib {
		t.Errorf("report's peak %d, want 3 MiB", got)
	}

	// A trace without memory events has none; a malformed one is an error
	// naming its offset.
	if p, err := ParseKineto("none.json", strings.NewReader(`[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5,"dur":2}]`)); err != nil || p.MemoryEvents != 0 || p.Records[0].PeakMemory != 0 {
		t.Errorf("no memory events: %v, %+v", err, p)
	}
	_, err = ParseKineto("bad.json", strings.NewReader(`[{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":"x1","args":{"Device Type":1,"Total Allocated":1}}]`))
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "[memory] event: ts") {
		t.Errorf("malformed [memory] ts: %v", err)
	}
}
