#!/usr/bin/env bash
# GPU evidence for timing device ranges from CUPTI's activity records
# (profile-run -device-timing trace; docs/benchmarks.md), in one run.
#
#   scripts/gpu-trace.sh build   # on a machine with Go: binaries into .bin/
#   OUT=/path scripts/gpu-trace.sh run
#
# run, from the repository copy on the GPU machine (no Go), within about
# 9 minutes, writes under $OUT:
#   tests.txt    runtime/cuda's work-trace tests: every kernel, GEMM, copy
#                and memset of three streams reported once, issued inside
#                its call, each stream's in order across collects; GEMM
#                ranges timed from the trace against events; whether CUPTI
#                hands records over in the order their stream ran them
#   smoke-*.log  profile-run -device-depth 0 -device-timing trace on the
#                launch-bound model (pp 1) and pipelined (pp 2 × vpp 2,
#                ranks sharing the GPU): its summary and work-trace line,
#                and rank 0's report of step 1 (report-*.txt)
#   bench/       scripts/gpu-bench.sh with the variants off, every kernel
#                by events (depth 0), every kernel from the trace, and the
#                torch twin off and under torch.profiler (BENCH=0 skips it)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

case ${1:-} in
build)
	set -e
	"$root/scripts/gpu-bench.sh" build
	;;
run)
	: "${OUT:?set OUT to a directory for the results}"
	mkdir -p "$OUT"
	export NCCL_NVLS_ENABLE=0
	t0=$SECONDS
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/env.log" 2>&1
	(cd "$bin" && timeout 120 ./cuda.test -test.run 'TestWorkTrace|TestActivityIssueOrder|TestActivityTrace$' -test.v) >"$OUT/tests.txt" 2>&1
	echo "tests: exit $?" | tee -a "$OUT/env.log"
	grep -E '^(---|\s+\w+_test\.go)' "$OUT/tests.txt"
	common=(-backend cuda -width 128 -layers 16 -microbatches 8 -microbatch-size 16 -steps 12 -device-depth 0
		-device-timing trace -progress off -metrics-addr off -call-log-size 0 -pprof off -trace off -quiet)
	for layout in "pp1:-pp 1 -vpp 1" "pp2:-pp 2 -vpp 2"; do
		name=${layout%%:*}
		# shellcheck disable=SC2086 # the layout is a list of flags
		timeout 120 "$bin/profile-run" "${common[@]}" ${layout#*:} -out "$OUT/runs-$name" >"$OUT/smoke-$name.log" 2>&1
		echo "smoke $name: exit $?" | tee -a "$OUT/env.log"
		grep -E '^(records|work trace|backend errors)' "$OUT/smoke-$name.log"
		d=$(ls -d "$OUT/runs-$name"/*/ 2>/dev/null | head -1)
		[ -n "$d" ] && sed -n '/step 1 ===/,/^$/p' "$d/report.rank0" | tee "$OUT/report-$name.txt"
		rm -rf "$OUT/runs-$name"
	done
	if [ "${BENCH:-1}" = 1 ]; then
		left=$((${HARD_S:-560} - (SECONDS - t0)))
		OUT=$OUT/bench JOBS="launch-bound compute-bound" \
			VARIANTS="trainscope-off trainscope-depth0 trainscope-trace torch-off torch-profiler" \
			ROUNDS=${ROUNDS:-6} EXTRAS=0 BUDGET_S=$((left - 50)) HARD_S=$left "$root/scripts/gpu-bench.sh" run >"$OUT/bench.log" 2>&1
		echo "bench: exit $?" | tee -a "$OUT/env.log"
		cat "$OUT/bench/bench.md" 2>/dev/null
	fi
	;;
*)
	echo "usage: $0 build | run" >&2
	exit 2
	;;
esac
