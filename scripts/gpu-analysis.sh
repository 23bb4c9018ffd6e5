#!/usr/bin/env bash
# The pipeline analysis on the GPU machine (docs/analysis.md): the
# fidelity tests (bubble against the ideal, straggler, stage balance,
# clock offsets) on
# the CUDA backend, and the built-in trainer at pp=2 × vpp=2 with the
# report's pipeline section. It uses every GPU the machine has: with one,
# the ranks share it (in-process collectives); with one per rank, NCCL.
#
#   scripts/gpu-analysis.sh build         # here: binaries into .bin/
#   OUT=... scripts/gpu-analysis.sh run   # there; results under $OUT
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.bin"

build() {
	set -e
	mkdir -p "$bin"
	cd "$root"
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/profile-run" ./cmd/profile-run
	CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/analysis.test" ./profiler/analysis/
	CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/cuda.test" ./runtime/cuda/
	ls -l "$bin/profile-run" "$bin/analysis.test" "$bin/cuda.test"
}

# report runs profile-run on CUDA and keeps its first line and the
# report's pipeline section.
report() {
	local name=$1
	shift
	echo "=== $name: profile-run -backend cuda $*" | tee -a "$OUT/runs.txt"
	timeout 180 ./profile-run -backend cuda "$@" -metrics-addr off -progress off \
		-no-step-lines -trace off -out "$OUT/runs/$name" >"$OUT/runs/$name.log" 2>&1
	echo "exit $?" | tee -a "$OUT/runs.txt"
	sed -n '/training on/p;/pipeline analysis/,/^records:/p' "$OUT/runs/$name.log" | tee -a "$OUT/runs.txt"
}

run() {
	: "${OUT:?set OUT to the results directory}"
	mkdir -p "$OUT/runs"
	OUT=$(cd "$OUT" && pwd) # the steps run in .bin/
	export NCCL_NVLS_ENABLE=0
	cd "$bin" || exit 1
	{
		date -u
		nvidia-smi -L
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	} >"$OUT/machine.txt" 2>&1
	cat "$OUT/machine.txt"

	# The stream sleep the fidelity runs rely on.
	timeout 120 ./cuda.test -test.run 'TestSleepOnDevice' -test.v 2>&1 | tee "$OUT/sleep.txt" | grep -E '^(---|ok|FAIL|PASS)|sleep'
	echo "sleep test: exit ${PIPESTATUS[0]}" | tee -a "$OUT/sleep.txt"

	# The fidelity tests, unchanged, on the GPU: every action holds its
	# stream 15 ms (a one-thread kernel), so chunks cost the same. They set
	# CUDA_DEVICE_MAX_CONNECTIONS=32 themselves (docs/gpu.md says why).
	TRAINSCOPE_FIDELITY_BACKEND=cuda timeout 400 ./analysis.test \
		-test.run 'TestBubbleFidelity|TestStragglerFidelity|TestStageBalanceFidelity|TestClockOffsetsRecovered' -test.v 2>&1 |
		tee "$OUT/fidelity.txt" | grep -E '^\s*(---|ok|FAIL|PASS)|bubble|injected|named|slowest|jitter|fidelity_test'
	echo "fidelity tests: exit ${PIPESTATUS[0]}" | tee -a "$OUT/fidelity.txt"

	# The trainer's own work, no sleeps.
	report tf32-4096 -pp 2 -vpp 2 -width 4096 -layers 8 -microbatches 8 -microbatch-size 256 -dtype tf32 -steps 12
	report fp32-1024 -pp 2 -vpp 2 -width 1024 -layers 8 -microbatches 8 -microbatch-size 64 -steps 12
	# A straggler the report should name: rank 2 (stage 0 of replica 1)
	# holds its stream 5 ms more per microbatch, 40 ms per step.
	report straggler -pp 2 -vpp 2 -dp 2 -width 1024 -layers 8 -microbatches 8 -microbatch-size 64 -steps 12 \
		-straggler-rank 2 -straggler-delay 5ms
	rm -rf "$OUT/runs"/*/ # the run directories: the logs above say what matters
}

case "${1:-run}" in
build) build ;;
run) run ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
