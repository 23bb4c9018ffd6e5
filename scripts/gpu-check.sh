#!/usr/bin/env bash
# GPU evidence for the CUDA and NCCL backends (docs/gpu.md).
#
#   scripts/gpu-check.sh build   # on a machine with Go: CGO_ENABLED=0 binaries into .bin/
#   scripts/gpu-check.sh run     # on the GPU machine (no Go needed): results under $OUT
#                                # (tests, then bench, run one half each)
#   scripts/gpu-check.sh         # both, where Go and GPUs are on one machine
#   scripts/gpu-check.sh quick   # after a ccl or trainer change: NCCL tests, bench b, profile-run
#   scripts/gpu-check.sh stall   # bench b's stall under variants, with goroutine dumps
#   scripts/gpu-check.sh overhead  # bench b's off vs device depth 1, repeated in fresh processes
#   scripts/gpu-check.sh machine   # profile-run version, the environment a run records, one GPU without NCCL
#
# run writes at most four files under $OUT: env.log, tests.log,
# profile-run.log and bench.log. Every step is bounded by `timeout`, so a
# hang shows as a failed step, not a stuck script. NCCL_NVLS_ENABLE=0 is
# exported (NVLink SHARP multicast must stay off on shared GPU hosts).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

build() {
	set -e
	mkdir -p "$bin"
	cd "$root"
	export CGO_ENABLED=0
	go test -c -ldflags '-s -w' -o "$bin/cuda.test" ./runtime/cuda
	go test -c -ldflags '-s -w' -o "$bin/nccl.test" ./ccl/nccl
	# profile-run with the GPU backends imported, through a build overlay:
	# cmd/profile-run itself is not edited.
	go build -ldflags '-s -w' -o "$bin/profile-run" ./cmd/profile-run
	ls -l "$bin"
}

# step NAME SECONDS LOG CMD...: runs CMD with a deadline, appending to LOG.
step() {
	local name=$1 secs=$2 log=$3
	shift 3
	echo "=== $name: $*" >>"$log"
	local t0=$SECONDS
	timeout -k 10 "$secs" "$@" >>"$log" 2>&1
	local rc=$?
	echo "=== $name: exit $rc after $((SECONDS - t0))s" >>"$log"
	echo "$name: exit $rc after $((SECONDS - t0))s"
}

setup_run() {
	: "${OUT:?set OUT to the results directory}"
	mkdir -p "$OUT"
	OUT=$(cd "$OUT" && pwd) # the steps run in .bin/
	export NCCL_NVLS_ENABLE=0
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	cd "$bin"
	{
		date -u
		uname -a
		nvidia-smi -L
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
		nvidia-smi topo -m
		ls -l /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda/lib64/libcublas.so* 2>&1
		ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1
		nproc
	} >"$OUT/env.log" 2>&1
}

run_tests() {
	step cuda-tests 150 "$OUT/tests.log" ./cuda.test -test.v -test.count=1 -test.timeout=140s
	faults='TestCommInitRankTimesOut|TestPeerNeverCalls'
	step nccl-tests 240 "$OUT/tests.log" ./nccl.test -test.v -test.count=1 -test.timeout=230s -test.skip "$faults"
	# Fault tests in processes of their own: a fault must not leave the
	# others a broken CUDA context.
	step nccl-fault-tests 90 "$OUT/tests.log" ./nccl.test -test.v -test.count=1 -test.timeout=80s -test.run "$faults"
	step "nccl tests, blocking NCCL" 150 "$OUT/tests.log" env TRAINSCOPE_NCCL_BLOCKING=1 ./nccl.test -test.v -test.count=1 -test.timeout=140s -test.run 'TestCollectives|TestProcessGroupProfiled|TestTrainerMatchesCPU'
	step "nccl fault tests, blocking NCCL" 90 "$OUT/tests.log" env TRAINSCOPE_NCCL_BLOCKING=1 ./nccl.test -test.v -test.count=1 -test.timeout=80s -test.run "$faults"

	pr=$OUT/profile-run.log
	runs=$(mktemp -d)
	for layout in "-pp 2 -vpp 2 -dp 1" "-pp 1 -vpp 2 -dp 2"; do
		# shellcheck disable=SC2086
		step "profile-run cuda $layout" 90 "$pr" ./profile-run -backend cuda $layout -steps 10 -out "$runs/cuda"
		# shellcheck disable=SC2086
		step "profile-run cpu $layout" 90 "$pr" ./profile-run -backend cpu $layout -steps 10 -profile off -out "$runs/cpu"
	done
	step "profile-run auto" 60 "$pr" ./profile-run -steps 3 -profile off -out "$runs/auto"
	# A stop on a device that does not get through its work (a kernel
	# holding each stream for an hour): SIGINT after 4 s must end the run
	# with 130 within its -comm-timeout and the stop deadlines (about
	# 10 s), every output written, the hung ranges marked unfinished.
	step "profile-run cuda, SIGINT with the device stuck" 60 "$pr" timeout -k 40 --preserve-status -s INT 4 ./profile-run -backend cuda -steps 1 -comm-timeout 5s -action-delay 1h -metrics-addr off -out "$runs/stuck"
	{
		ls -l "$runs"/stuck/*/
		echo "ranges marked device_unfinished in trace.json: $(grep -o '"device_unfinished"' "$runs"/stuck/*/trace.json | wc -l)"
		grep -h '"device_unfinished"' "$runs"/stuck/*/summary.json
	} >>"$pr" 2>&1
	for f in "$runs"/cuda/*/report.txt; do
		echo "=== $f" >>"$pr"
		cat "$f" >>"$pr"
	done
}

# run_machine: what profile-run says of the machine (version, -json), the
# environment a run's summary.json records, and jobs that need no NCCL
# (ranks sharing the GPU, one rank) trained with libnccl hidden; the
# one-rank job's losses beside the host backend's. Writes machine.log.
run_machine() {
	ml=$OUT/machine.log
	runs=$(mktemp -d)
	step "version" 60 "$ml" ./profile-run version
	step "version -json" 60 "$ml" ./profile-run version -json
	step "version, libnccl hidden" 60 "$ml" env TRAINSCOPE_NCCL_LIB=/nonexistent/libnccl.so.2 ./profile-run version
	# Alone in a process of its own: nothing may have used a GPU before.
	step "cuda test: describing makes no context" 60 "$ml" ./cuda.test -test.v -test.count=1 -test.run '^TestDescribingMakesNoContext$'
	step "cuda tests: devices and libraries" 90 "$ml" ./cuda.test -test.v -test.count=1 -test.run 'TestDevices|TestLibrariesBeforeInit|TestNvidiaDriverVersion'
	step "nccl tests: the library named" 90 "$ml" ./nccl.test -test.v -test.count=1 -test.run 'TestGroupedOnOneGPU|TestMissingLibraryIsUnavailable'
	step "profile-run, libnccl hidden" 90 "$ml" env TRAINSCOPE_NCCL_LIB=/nonexistent/libnccl.so.2 ./profile-run -steps 5 -quiet -metrics-addr off -out "$runs/nonccl"
	step "profile-run with NCCL" 90 "$ml" ./profile-run -steps 5 -quiet -metrics-addr off -out "$runs/nccl"
	for d in "$runs"/nonccl/* "$runs"/nccl/*; do
		echo "=== environment of $d" >>"$ml"
		python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["environment"], indent=1))' "$d/summary.json" >>"$ml" 2>&1
	done
	step "profile-run one rank on cuda, libnccl hidden" 90 "$ml" env TRAINSCOPE_NCCL_LIB=/nonexistent/libnccl.so.2 ./profile-run -backend cuda -pp 1 -vpp 1 -steps 5 -profile off
	step "profile-run one rank on cpu" 90 "$ml" ./profile-run -backend cpu -pp 1 -vpp 1 -steps 5 -profile off
	step "profile-run cpu for compare" 90 "$ml" ./profile-run -backend cpu -steps 5 -quiet -metrics-addr off -out "$runs/cpu"
	step "compare cuda with cpu" 60 "$ml" ./profile-run compare "$runs"/cpu/* "$runs"/nccl/*
}

run_bench() {
	bl=$OUT/bench.log
	step "bench a: event record" 90 "$bl" ./cuda.test -test.run '^$' -test.bench 'EventRecord' -test.benchtime 1s -test.count 2
	step "bench d: gemm" 120 "$bl" ./cuda.test -test.run '^$' -test.bench 'Gemm' -test.benchtime 20x
	step "bench b: trainer step" 150 "$bl" env GOTRACEBACK=all ./nccl.test -test.run '^$' -test.bench 'TrainerStep' -test.benchtime 100x -test.count 3 -test.timeout 140s
	# profile-run's own job on CUDA: unprofiled, default device depth, every kernel timed.
	runs=$(mktemp -d)
	for mode in "-profile off" "-device-depth 1" "-device-depth 0"; do
		# shellcheck disable=SC2086
		step "bench b: profile-run $mode" 90 "$bl" ./profile-run -backend cuda -steps 30 -metrics-addr off -trace off -pprof off -out "$runs" $mode
	done
	step "bench c: collectives" 150 "$bl" ./nccl.test -test.run '^$' -test.bench 'Collective$' -test.benchtime 20x
	step "bench c: what separates back-to-back calls" 120 "$bl" ./nccl.test -test.run '^$' -test.bench 'CollectiveGap' -test.benchtime 20x
	# The same with blocking NCCL communicators (nccl.WithBlockingOps).
	step "bench b, blocking NCCL" 100 "$bl" env TRAINSCOPE_NCCL_BLOCKING=1 ./nccl.test -test.run '^$' -test.bench 'TrainerStep' -test.benchtime 100x -test.count 1
	step "bench c, blocking NCCL" 120 "$bl" env TRAINSCOPE_NCCL_BLOCKING=1 ./nccl.test -test.run '^$' -test.bench 'Collective$' -test.benchtime 20x
}

# quick: the checks that belong together after a change to ccl or the
# trainer — the profiled process-group and trainer tests on NCCL, the
# trainer benchmark under Go's test deadline (which prints every
# goroutine's stack if a step stalls), and profile-run in both layouts.
run_quick() {
	step nccl-profiled 120 "$OUT/tests.log" ./nccl.test -test.v -test.count=1 -test.timeout=110s -test.run 'TestProcessGroupProfiled|TestTrainerMatchesCPU|TestCollectives'
	step "bench b: trainer step" 150 "$OUT/bench.log" env GOTRACEBACK=all ./nccl.test -test.run '^$' -test.bench 'TrainerStep' -test.benchtime 100x -test.count 1 -test.timeout 140s
	pr=$OUT/profile-run.log
	runs=$(mktemp -d)
	for layout in "-pp 2 -vpp 2 -dp 1" "-pp 1 -vpp 2 -dp 2"; do
		step "profile-run cuda $layout" 60 "$pr" ./profile-run -backend cuda $layout -steps 10 -metrics-addr off -out "$runs/cuda"
	done
	for f in "$runs"/cuda/*/report.txt; do
		echo "=== $f" >>"$pr"
		cat "$f" >>"$pr"
	done
}

# stall: the launch-bound trainer benchmark, which stalled after tens of
# steps (docs/gpu.md, Known limits), under the variants worth telling
# apart, each dumped if it is still running after 60 s: the GPUs'
# utilisation, every thread's native stack (where gdb exists) and every
# goroutine's (SIGQUIT). The variants: as is; CUDA loading every module at
# initialisation (CUDA_MODULE_LOADING=EAGER: a lazily loaded kernel waits
# for the whole device to drain, which a NCCL kernel waiting for its peer
# never does); Go's collector off (cleanups destroying events on another
# thread). Then the collective gap benchmark.
stall_one() {
	local name=$1
	shift
	local log=$OUT/stall-$name.log
	echo "=== $name: $*" >"$log"
	env GOTRACEBACK=all "$@" ./nccl.test -test.run '^$' -test.bench 'TrainerStep/profiling=off' -test.benchtime 100x -test.count 1 >>"$log" 2>&1 &
	local pid=$! t=0
	while kill -0 "$pid" 2>/dev/null && [ $t -lt 60 ]; do
		sleep 1
		t=$((t + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "=== $name: still running after ${t}s" >>"$log"
		nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv >>"$log" 2>&1
		if command -v gdb >/dev/null; then
			timeout 30 gdb -p "$pid" -batch -ex 'thread apply all bt 30' >>"$log" 2>&1
		else
			echo "(no gdb: no native stacks)" >>"$log"
		fi
		kill -QUIT "$pid"
		sleep 5
		kill -9 "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	echo "$name: after ${t}s, $(grep -c '^Benchmark' "$log") benchmark lines, $(grep -c '^goroutine ' "$log") goroutines dumped"
}

run_stall() {
	stall_one as-is
	stall_one eager-modules CUDA_MODULE_LOADING=EAGER
	stall_one gc-off GOGC=off
	step "bench c: gap at 1 MiB" 120 "$OUT/bench.log" ./nccl.test -test.run '^$' -test.bench 'CollectiveGap' -test.benchtime 20x
}

# overhead: bench b's two figures that the target is about — no profiling
# against profiling at device depth 1 — each in a process of its own, six
# times, alternating which goes first, 200 steps per figure, in both NCCL
# modes: the spread between processes is as large as the difference
# measured, so one pair proves little.
run_overhead() {
	bl=$OUT/overhead.log
	for mode in nonblocking blocking; do
		blocking=0
		[ $mode = blocking ] && blocking=1
		for i in 1 2 3 4 5 6; do
			cases="off on,device-depth=1"
			[ $((i % 2)) = 0 ] && cases="on,device-depth=1 off"
			for c in $cases; do
				step "overhead $mode #$i $c" 40 "$bl" env TRAINSCOPE_NCCL_BLOCKING=$blocking ./nccl.test -test.run '^$' -test.bench "TrainerStep/profiling=$c\$" -test.benchtime 200x -test.count 1 -test.timeout 35s
			done
		done
	done
}

case ${1:-all} in
stall) setup_run && run_stall ;;
overhead) setup_run && run_overhead ;;
machine) setup_run && run_machine ;;
quick) setup_run && run_quick ;;
build) build ;;
run) setup_run && run_tests && run_bench ;;
tests) setup_run && run_tests ;;
bench) setup_run && run_bench ;;
all) build && setup_run && run_tests && run_bench ;;
*)
	echo "usage: $0 [build|run|tests|bench|quick|stall|overhead|machine|all]" >&2
	exit 2
	;;
esac
