package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gpipeTraces writes two torch.profiler traces, one per stage, of a GPipe
// step of 8 microbatches over 2 stages, as PyTorch's pipelining runtime
// records it: each microbatch's work inside "Forward i" or "Backward i"
// on the main thread, the backward kernels launched by the autograd
// thread while the main thread waits in its range, each activation and
// gradient sent as a batch of one ("nccl:coalesced", the metadata on the
// send or receive call), ProfilerStep#1 around the step, and the ranks'
// process groups in distributedInfo. Device times, in µs from the step's
// start: stage 0's forwards [100i, 100i+100), stage 1's [100i+100,
// 100i+200); stage 1's backwards (8−1 down to 0) [900+200k, 1100+200k),
// stage 0's [1100+200k, 1300+200k). The step runs from 0 to 2700 µs, and
// each stage computes 2400 µs of it: its bubble is 300 µs, 11.1 %, the
// ideal (p−1)/(m+p−1) = 1/9.
func gpipeTraces(t *testing.T, dir string) []string { return gpipeStepTraces(t, dir, 1) }

// gpipeStepTraces writes steps such steps, ProfilerStep#1 to #steps, each
// 3000 µs after the one before.
func gpipeStepTraces(t *testing.T, dir string, steps int) []string {
	t.Helper()
	const m = 8
	var files []string
	for rank := 0; rank < 2; rank++ {
		pid, autograd := 1000+rank, 2000+rank
		var evs []map[string]any
		corr := 0
		x := func(cat, name string, tid int, ts, dur float64, args map[string]any) {
			e := map[string]any{"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
			if args != nil {
				e["args"] = args
			}
			evs = append(evs, e)
		}
		// launch: a kernel run at device time [start, end) launched 50 µs
		// before on thread tid.
		launch := func(tid int, kernel string, start, end float64, stream int, args map[string]any) {
			corr++
			x("cuda_runtime", "cudaLaunchKernel", tid, start-50, 5, map[string]any{"correlation": corr})
			ka := map[string]any{"correlation": corr, "device": 0, "stream": stream}
			for k, v := range args {
				ka[k] = v
			}
			x("kernel", kernel, 0, start, end-start, ka)
		}
		peer := 1 - rank
		// p2p: a send or receive ending at device time end, run as a batch
		// of one (its call's metadata on record_param_comms).
		p2p := func(op string, end float64) {
			meta := map[string]any{"Collective name": op, "Process Group Name": "1", "Process Group Description": "PIPELINE_MODEL_PARALLEL_GROUP",
				"Process Group Ranks": "[0, 1]", "Group size": 2, "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024}
			if op == "send" {
				meta["Dst Rank"] = peer
			} else {
				meta["Src Rank"] = peer
			}
			x("cpu_op", "record_param_comms", pid, end-70, 3, meta)
			x("user_annotation", "nccl:coalesced", pid, end-62, 10, nil)
			launch(pid, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", end-5, end, 20, nil)
		}
		for step := 1; step <= steps; step++ {
			at := float64(3000 * (step - 1))
			x("user_annotation", fmt.Sprintf("ProfilerStep#%d", step), pid, at-100, 2900, nil)
			for i := 0; i < m; i++ {
				start := at + float64(100*i+100*rank)
				x("user_annotation", fmt.Sprintf("Forward %d", i), pid, start-60, 50, nil)
				if rank == 1 {
					p2p("recv", start)
				}
				launch(pid, "gemm_forward", start, start+100, 7, nil)
				if rank == 0 {
					p2p("send", start+100)
				}
			}
			for k := 0; k < m; k++ {
				i := m - 1 - k
				start := at + float64(900+200*k+200*(1-rank))
				x("user_annotation", fmt.Sprintf("Backward %d", i), pid, start-60, 50, nil)
				x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", autograd, start-55, 20, nil)
				if rank == 0 {
					p2p("recv", start)
				}
				launch(autograd, "gemm_backward", start, start+200, 7, nil)
				if rank == 1 {
					p2p("send", start+200)
				}
			}
		}
		doc := map[string]any{
			"schemaVersion": 1, "baseTimeNanoseconds": 1772000000000000000,
			"distributedInfo": map[string]any{"backend": "nccl", "rank": rank, "world_size": 2, "pg_config": []map[string]any{
				{"pg_name": "0", "pg_desc": "default_pg", "ranks": []int{0, 1}},
				{"pg_name": "1", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": []int{0, 1}},
			}},
			"traceEvents": evs,
		}
		raw, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(dir, fmt.Sprintf("rank%d.json", rank)))
		if err := os.WriteFile(files[rank], raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestImportKinetoPipeline: torch.profiler traces of a pipelined step are
// analysed as a wrapped run's: ProfilerStep#1 is the step range, each
// rank staged by its pipeline process group, the kernels labelled with
// the microbatch of the "Forward i" or "Backward i" range they were
// launched in (the backward ones from the autograd thread), and the sends
// paired with their receives through the calls' metadata. The bubble is
// worked out by hand in gpipeTraces.
func TestImportKinetoPipeline(t *testing.T) {
	files := gpipeTraces(t, t.TempDir())
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, files[0], files[1])
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"rank0.json: Chrome/Kineto trace, rank 0, 89 ranges, stage 0 (from its process group), 16 kernels launched inside ranges named as forward or backward work, the reference clock",
		"rank1.json: Chrome/Kineto trace, rank 1, 89 ranges, stage 1 (from its process group), 16 kernels launched inside ranges named as forward or backward work, clock +0.000 ms against",
		"(from 16 sends matched with their receives: no collective crossed, residual 0.000 ms)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	report := onlyRunReport(t, out)
	// Busy: each rank's 2.400 ms of kernels in its 2.900 ms step range.
	_, went, _ := strings.Cut(report, "=== where the steps went")
	for _, rank := range []string{"0", "1"} {
		if got := stageRow(went, rank); strings.Join(got, " ") != rank+" 1 2.900 82.8 17.2" {
			t.Errorf("rank %s: where the steps went %q, want stage %s, 1 step of 2.900 ms, 82.8%% busy:\n%s", rank, got, rank, went)
		}
	}
	_, section, _ := strings.Cut(report, "=== pipeline analysis")
	for _, want := range []string{
		"1 of 1 step complete",
		"pipeline: 2 stages × 1 chunk × 8 microbatches; ideal bubble (p−1)/(v·m+p−1) = 11.1% of the span",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("pipeline section lacks %q:\n%s", want, section)
		}
	}
	// Each stage: 0.300 ms of bubble in a 2.700 ms span; stage 0's before
	// its first backward (the wait for stage 1's), stage 1's before its
	// first forward and after its last backward (the drain).
	for stage, want := range map[string][]string{"0": {"1", "2.400", "0.300", "11.1", "0.300", "0.000"}, "1": {"1", "2.400", "0.300", "11.1", "0.100", "0.200"}} {
		got := stageRow(section, stage)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("stage %s row %q, want %q:\n%s", stage, got, want, section)
		}
	}
}

// stageRow is the fields after the first column of the row for key (a
// stage or a rank) of the first table in section.
func stageRow(section, stage string) []string {
	in := false
	for _, line := range strings.Split(section, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && (f[0] == "Stage" || f[0] == "Rank" && !in):
			in = true
		case in && len(f) > 1 && f[0] == stage:
			return f[1:]
		case in && (len(f) == 0 || f[0] == "Rank"):
			return nil
		}
	}
	return nil
}

// TestImportTraceBound: a step the trace's bound cuts short is left out
// of the trace whole, and the summary says so: two steps of 89 records a
// rank, a bound of 200 records (step 1's 178 and 22 of step 2's): the
// trace holds step 1 alone, as a one-step import's does (242 events).
func TestImportTraceBound(t *testing.T) {
	defer func(b int) { detailBound = b }(detailBound)
	detailBound = 200
	files := gpipeStepTraces(t, t.TempDir(), 2)
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, "-trace-steps", "all", files[0], files[1])
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "trace: 242 events, 16 flows (0 unmatched), step 1 (step 2 left out whole: the trace holds 200 records at most; -trace-steps to choose the steps)"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	// Both steps are in the report's analysis, which keeps no records.
	if report := onlyRunReport(t, out); !strings.Contains(report, "2 of 2 steps complete") {
		t.Errorf("report lacks both steps:\n%s", report)
	}
}

// TestImportDirectory: a directory stands for its *.json and *.json.gz
// files (tensorboard_trace_handler's output), in name order; one with
// none is a usage error naming it.
func TestImportDirectory(t *testing.T) {
	dir := t.TempDir()
	gpipeTraces(t, dir)
	for name, text := range map[string]string{"notes.txt": "not a trace", ".hidden.json": "{", "sub/x.json": "{"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "import", "-out", out, dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "importing 2 file(s), 178 ranges:\n  "+filepath.Join(dir, "rank0.json")+": Chrome/Kineto trace, rank 0") {
		t.Errorf("stdout:\n%s", stdout)
	}
	empty := t.TempDir()
	code, _, stderr = runCmd(t, "import", "-out", out, empty)
	if code != exitUsage || !strings.Contains(stderr, empty+" is a directory with no trace in it (no *.json or *.json.gz file)") {
		t.Errorf("an empty directory: exit %d, %s", code, stderr)
	}
	// An -out directory holding runs: their traces are named for it, two
	// one by one, five by a pattern.
	for i, name := range []string{"20260101-000000-aaaaaa", "20260101-000100-bbbbbb", "c", "d", "e"} {
		run := filepath.Join(empty, name)
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, "trace.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC)
		if err := os.Chtimes(filepath.Join(run, "trace.json"), at, at); err != nil {
			t.Fatal(err)
		}
		want := ""
		switch i {
		case 1:
			want = empty + " is an output directory holding 2 run directories, not a trace: name the traces to import (profile-run import " +
				filepath.Join(empty, "20260101-000000-aaaaaa", "trace.json") + " " + filepath.Join(empty, "20260101-000100-bbbbbb", "trace.json") + ")"
		case 4:
			want = empty + " is an output directory holding 5 run directories, not a trace: name the traces to import (profile-run import " + empty + "/*/trace.json)"
		default:
			continue
		}
		code, _, stderr = runCmd(t, "import", "-out", out, empty)
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%d runs: exit %d, %s; want exit 2 and %q", i+1, code, stderr, want)
		}
	}
}

// TestImportPipelineSchedule: traces whose kernels carry no chunk or
// microbatch (their ranges named as no work: PyTorch's Schedule1F1B
// names none) get the ideal bubble from -pipeline-schedule; the bubble
// is the hand-worked 0.300 ms a stage all the same, since their kernels
// are a staged rank's computation.
func TestImportPipelineSchedule(t *testing.T) {
	dir := t.TempDir()
	for _, f := range gpipeTraces(t, dir) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(strings.ReplaceAll(string(raw), `"name":"Forward `, `"name":"microstep `), `"name":"Backward `, `"name":"microstep `)
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "pipeline: 2 stages; the work carries no chunk or microbatch (traced kernels outside any range named as forward or backward work), so there is no ideal bubble to compare with unless the schedule is given (-pipeline-schedule)"},
		{[]string{"-pipeline-schedule", "microbatches=8"}, "pipeline: 2 stages × 1 chunk × 8 microbatches (chunks and microbatches as given: the work carries stages only); ideal bubble (p−1)/(v·m+p−1) = 11.1% of the span"},
	} {
		out := t.TempDir()
		code, stdout, stderr := runCmd(t, append(append([]string{"import", "-out", out}, tc.flags...), dir)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s\n%s", tc.flags, code, stdout, stderr)
		}
		if strings.Contains(stdout, "kernels launched inside ranges named as forward or backward work") {
			t.Errorf("%v: kernels labelled:\n%s", tc.flags, stdout)
		}
		_, section, _ := strings.Cut(onlyRunReport(t, out), "=== pipeline analysis")
		if !strings.Contains(section, tc.want) {
			t.Errorf("%v: pipeline section lacks %q:\n%s", tc.flags, tc.want, section)
		}
		for _, stage := range []string{"0", "1"} {
			if got := stageRow(section, stage); len(got) < 4 || got[1] != "2.400" || got[2] != "0.300" || got[3] != "11.1" {
				t.Errorf("%v: stage %s row %q, want 2.400 ms of computation, a bubble of 0.300 ms, 11.1%%", tc.flags, stage, got)
			}
		}
	}
	code, _, stderr := runCmd(t, "import", "-pipeline-schedule", "microbatches=0", dir)
	if code != exitUsage || !strings.Contains(stderr, `-pipeline-schedule "microbatches=0"`) {
		t.Errorf("microbatches=0: exit %d, %s", code, stderr)
	}
}

// TestImportMemory: a torch.profiler trace recorded with
// profile_memory=True gives the rank's peak device memory in the report
// (the highest "Total Allocated" of its device inside a step: 6 MiB) and
// the trace's peaks, allocated and reserved, in the file's line.
func TestImportMemory(t *testing.T) {
	const trace = `{"distributedInfo": {"rank": 0}, "traceEvents": [
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#4","pid":1,"tid":1,"ts":100,"dur":100},
 {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":110,"dur":5,"args":{"correlation":9}},
 {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":120,"dur":10,"args":{"device":0,"stream":7,"correlation":9}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":130,"args":{"Device Type":1,"Device Id":0,"Total Allocated":6291456,"Total Reserved":10485760,"Bytes":6291456}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":140,"args":{"Device Type":1,"Device Id":0,"Total Allocated":0,"Total Reserved":10485760,"Bytes":-6291456}},
 {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":250,"args":{"Device Type":1,"Device Id":0,"Total Allocated":8388608,"Total Reserved":12582912,"Bytes":8388608}}
]}`
	dir, out := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "rank0.json")
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, "import", "-out", out, path)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "device timing: as the imported profiles recorded it"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q (an import has no -device-depth):\n%s", want, stdout)
	}
	if want := ", peak device memory 8.00 MB allocated, 12.00 MB reserved (from 3 memory events)"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	// The 8 MiB allocated after the step ended count in the run's
	// figure; the rank's file covers the step, which saw 6 MiB. Both say
	// what was measured: tensors, not the cached pool.
	const note = " (tensors allocated, as torch.cuda.max_memory_allocated gives it, from the trace's memory events)\n"
	if report := onlyRunReport(t, out); !strings.Contains(report, "Peak device memory (rank 0): 8.00 MB"+note) {
		t.Errorf("report lacks rank 0's peak of 8 MB and what it measures:\n%s", report)
	}
	rank0, err := os.ReadFile(filepath.Join(runDirs(t, out)[0], "report.rank0"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rank0), "Peak device memory (rank 0): 6.00 MB"+note) {
		t.Errorf("report.rank0 lacks the step's peak of 6 MB and what it measures:\n%s", rank0)
	}
}
