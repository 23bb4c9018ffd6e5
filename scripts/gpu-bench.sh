#!/usr/bin/env bash
# The profiler's overhead measured beside torch.profiler on the same model
# (docs/benchmarks.md, "GPU: trainscope beside torch.profiler on the same
# model"), in one run on a GPU machine.
#
#   scripts/gpu-bench.sh build         # on a machine with Go: CGO_ENABLED=0 binaries into .bin/
#   OUT=/path scripts/gpu-bench.sh run # on the GPU machine (no Go; python3 with PyTorch)
#
# run, from the repository copy on the GPU machine, within about 9 minutes
# on one H200 (BUDGET_S; every process is cut off by HARD_S):
#   a. counts the GPUs (those of CUDA_VISIBLE_DEVICES where it is set; the
#      one-GPU jobs run on the first); with 2 or more, profile-run with no
#      flags on two;
#   b. profile-run with no flags on one GPU (exit code and first lines);
#   c. the GEMM rate on the trainer's shapes per dtype ($GEMM_BENCH);
#   d. two jobs on one GPU, in rounds of fresh processes (ROUNDS at most,
#      while the budget lasts), each round in a rotating order: profile-run
#      -profile off / on at device depth 1 / on at depth 0 / sync, and
#      benchmarks/torch/twin.py (the same model in eager PyTorch) without and
#      with torch.profiler (VARIANTS may add torch-cuda: torch.profiler with
#      the CUDA activity alone; trainscope-trace: depth 0 timed from CUPTI's
#      records, -device-timing trace; trainscope-trace1: the same at depth
#      1; and trainscope-cupti: profile-run -profile
#      off wrapped by profile-run -- …, which has CUPTI record its every
#      kernel, copy and memset, as a profiler timing ranges from CUPTI's
#      records would);
#      launch-bound: profile-run's default model on one rank (width 128, 16
#      layers, 8 microbatches of 16 rows, pp 1 vpp 1);
#      compute-bound: width 4096, 8 layers, 8 microbatches of 256 rows, pp 2
#      vpp 2 (the two ranks share the GPU; the twin runs the whole model
#      unpipelined on it: the same FLOPs);
#   e. if time is left, the compute-bound job once more per dtype (tf32,
#      bf16): profile-run off and on, the twin off and with torch.profiler;
#   f. benchmarks/torch/summarize.py: $OUT/bench.json (every number) and
#      $OUT/bench.md (tables for docs/benchmarks.md), rewritten after every
#      round, so a run cut short still leaves them.
#
# Under $OUT: env.log, bench.log (one line per process: exit code,
# seconds), default-*.log (profile-run with no flags, all of its output),
# reports/ (report.txt of the first profiled process of each variant),
# raw/ (every process's stdout and stderr, runs.tsv, gemm.log, gpu.csv,
# settings.env), bench.json, bench.md. NCCL_NVLS_ENABLE=0 is exported
# (NVLink SHARP multicast must stay off on shared GPU hosts).
#
# Settings below can be overridden from the environment, e.g.
#   OUT=/tmp/b ROUNDS=8 BUDGET_S=540 scripts/gpu-bench.sh run
#   OUT=/tmp/b CB_LAYOUT="-pp 1 -vpp 2" scripts/gpu-bench.sh run
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

# The GEMM benchmark of the trainer's shapes in .bin/cuda.test (M=4096,
# N=256, K=4096 forward and its backward forms, per dtype, a FLOP/s metric).
GEMM_BENCH=${GEMM_BENCH:-BenchmarkGemmTrainerShapes}
GEMM_BENCHTIME=${GEMM_BENCHTIME:-2000x}
ROUNDS=${ROUNDS:-6}     # rounds of fresh processes, at most
WARMUP=${WARMUP:-3}     # steps left out of every process's median
LB_STEPS=${LB_STEPS:-30} # timed steps, launch-bound job
CB_STEPS=${CB_STEPS:-20} # timed steps, compute-bound job
# No round or extra starts that would end later (seconds from the start).
# At 480, 5 rounds fitted on one H200 (docs/benchmarks.md); the overhead
# targets ask for medians of 6 or more pairs.
BUDGET_S=${BUDGET_S:-540}
HARD_S=${HARD_S:-570}   # no process runs past this: the whole run stays under 10 minutes
PYTHON=${PYTHON:-python3}
LB_WIDTH=${LB_WIDTH:-128} LB_LAYERS=${LB_LAYERS:-16} LB_MB=${LB_MB:-8} LB_MBS=${LB_MBS:-16}
LB_LAYOUT=${LB_LAYOUT:--pp 1 -vpp 1}
CB_WIDTH=${CB_WIDTH:-4096} CB_LAYERS=${CB_LAYERS:-8} CB_MB=${CB_MB:-8} CB_MBS=${CB_MBS:-256}
CB_LAYOUT=${CB_LAYOUT:--pp 2 -vpp 2}
# Where the jobs run: cuda on the GPU machine; PR_BACKEND=cpu TWIN_DEVICE=cpu
# (with small CB_* sizes) tries the script out on a machine without a GPU.
PR_BACKEND=${PR_BACKEND:-cuda}
TWIN_DEVICE=${TWIN_DEVICE:-cuda}
# Per-process deadlines (seconds), each also cut to what HARD_S leaves.
LB_LIMIT=${LB_LIMIT:-60}
CB_LIMIT=${CB_LIMIT:-120}

# A trainscope variant ending in @NAME (e.g. trainscope-trace@b) runs
# .bin/profile-run-NAME with the variant's flags: another build, for an
# A/B of two commits in the same rounds, or a script that runs
# .bin/profile-run under other settings (GOGC=off, say). build makes
# .bin/profile-run-noq: trainscope-trace@noq is the trace mode with CUPTI
# asked for no kernel enqueue times (kernels unplaced), to measure what
# those cost.
# JOBS and VARIANTS (words) narrow the rounds, e.g. for more rounds of one
# comparison: JOBS=compute-bound VARIANTS="trainscope-off trainscope-depth1
# torch-off torch-profiler" ROUNDS=12 EXTRAS=0.
JOBS=${JOBS:-launch-bound compute-bound}
# DTYPES: the precisions the rounds run every job in (float32, tf32, bf16),
# e.g. DTYPES="tf32 bf16" JOBS=compute-bound EXTRAS=0 for the tensor-core
# rates in rounds of fresh pairs rather than the extras' single one.
DTYPES=${DTYPES:-float32}
# SPREAD=1: where there are two GPUs, profile-run's ranks of the
# compute-bound job get one each (NCCL between them) instead of sharing
# the first; the twin stays on one. So the overhead is read without the
# other rank's kernels sharing the device (docs/benchmarks.md, "steps in
# two modes").
SPREAD=${SPREAD:-0}
read -r -a VARIANTS <<<"${VARIANTS:-trainscope-off trainscope-depth1 trainscope-depth0 trainscope-sync torch-off torch-profiler}"
EXTRAS=${EXTRAS:-1} # the compute-bound job once more per dtype, if time is left

build() {
	set -e
	# gpu-check.sh builds profile-run, cuda.test and nccl.test into .bin/.
	"$root/scripts/gpu-check.sh" build
	if [ ! -x "$bin/cuda.test" ]; then
		(cd "$root" && CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/cuda.test" ./runtime/cuda)
	fi
	if ! "$bin/cuda.test" -test.list "^${GEMM_BENCH}\$" | grep -q .; then
		echo "note: .bin/cuda.test has no $GEMM_BENCH; run will fall back to BenchmarkGemm (square shapes)" >&2
	fi
	# The NCCL plugin, for the trainscope-cupti variant (a C compiler).
	if make -C "$root/plugins/nccl" libtrainscope-nccl.so >/dev/null; then
		cp "$root/plugins/nccl/libtrainscope-nccl.so" "$bin/"
	else
		echo "note: no NCCL plugin built: run will skip the trainscope-cupti variant" >&2
	fi
	# The same profile-run with the work trace asking CUPTI for no kernel
	# enqueue times (kernels unplaced): the variant trainscope-trace@noq
	# measures what those cost beside trainscope-trace.
	(cd "$root" && CGO_ENABLED=0 go build -ldflags '-s -w -X github.com/trainscope/trainscope/runtime/cuda.enqueueTimes=off' \
		-o "$bin/profile-run-noq" ./cmd/profile-run)
	if ! "$bin/profile-run" -h 2>&1 | grep -q -- '-dtype'; then
		echo "note: .bin/profile-run has no -dtype flag; run will skip profile-run's tf32 and bf16 jobs" >&2
	fi
}

t0=$SECONDS
notes=""

note() {
	echo "note: $*" | tee -a "$OUT/bench.log"
	notes="$notes $*;"
}

left() { echo $((HARD_S - (SECONDS - t0))); }

# bounded SECS: SECS, or less where HARD_S is closer.
bounded() {
	local l
	l=$(left)
	if [ "$1" -lt "$l" ]; then echo "$1"; else echo "$l"; fi
}

# step NAME SECONDS LOG CMD...: runs CMD with a deadline, appending to LOG.
step() {
	local name=$1 secs
	secs=$(bounded "$2")
	local log=$3
	shift 3
	if [ "$secs" -lt 5 ]; then
		echo "$name: not run, the time is up" | tee -a "$OUT/bench.log"
		return 124
	fi
	echo "=== $name: $*" >>"$log"
	local s=$SECONDS
	timeout -k 10 "$secs" "$@" >>"$log" 2>&1
	local rc=$?
	echo "=== $name: exit $rc after $((SECONDS - s))s" >>"$log"
	echo "$name: exit $rc after $((SECONDS - s))s" | tee -a "$OUT/bench.log"
	return $rc
}

# now: seconds since the epoch, with a decimal point whatever the locale.
now() { date +%s.%N; }

setup_run() {
	: "${OUT:?set OUT to the results directory}"
	mkdir -p "$OUT/raw" "$OUT/reports"
	OUT=$(cd "$OUT" && pwd)
	raw=$OUT/raw
	: >"$OUT/bench.log"
	export NCCL_NVLS_ENABLE=0
	export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	cd "$root" || exit 1
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	if [ ! -x "$bin/profile-run" ]; then
		echo "no $bin/profile-run: run 'scripts/gpu-bench.sh build' on a machine with Go first" >&2
		exit 1
	fi
	{
		date -u
		uname -a
		nvidia-smi -L
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
		nvidia-smi topo -m
		ls -l /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda/lib64/libcublas.so* 2>&1
		ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1
		nproc
		command -v "$PYTHON"
		# Also brings PyTorch into the file cache before anything is timed.
		timeout 120 "$PYTHON" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
		"$bin/profile-run" -h 2>&1 | grep -E -- '-(dtype|profile|device-depth) '
	} >"$OUT/env.log" 2>&1
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >"$raw/gpu.csv" 2>/dev/null
	# The GPUs to use: the first one or two of CUDA_VISIBLE_DEVICES where it
	# is set (a machine shared by jobs may hand out some of its GPUs that
	# way), else of all.
	local visible=${CUDA_VISIBLE_DEVICES:-}
	if [ -n "$visible" ]; then
		ngpu=$(tr ',' '\n' <<<"$visible" | grep -c .)
		gpu1=${visible%%,*}
		gpu2=$(cut -d, -f1-2 <<<"$visible")
	else
		ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
		gpu1=0 gpu2=0,1
	fi
	torch_version=$(timeout 60 "$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)
	has_dtype=0
	"$bin/profile-run" -h 2>&1 | grep -q -- '-dtype' && has_dtype=1
	printf 'job\tdtype\tvariant\tround\ttool\trc\tstart\tend\tskip\twidth\tlayers\tmicrobatches\tmicrobatch_size\tout\terr\tcmd\n' >"$raw/runs.tsv"
	echo "GPUs: $ngpu (one-GPU jobs on CUDA_VISIBLE_DEVICES=$gpu1); PyTorch: ${torch_version:-not importable by $PYTHON}; profile-run -dtype: $has_dtype" | tee -a "$OUT/bench.log"
	[ -n "$torch_version" ] || note "PyTorch is not importable by $PYTHON (set PYTHON): the twin's variants fail"
	# The twin's own tests, its training ones included where PyTorch is
	# importable (on the CPU, small: seconds).
	if timeout 120 "$PYTHON" -m unittest discover -v -s benchmarks/torch -p 'test_twin.py' >"$raw/twin-tests.log" 2>&1; then
		echo "twin.py tests: $(tail -n 1 "$raw/twin-tests.log")" | tee -a "$OUT/bench.log"
	else
		note "twin.py's tests failed (raw/twin-tests.log): $(tail -n 1 "$raw/twin-tests.log")"
	fi
}

write_settings() {
	cat >"$raw/settings.env" <<EOF
DATE=$(date -u +%Y-%m-%d)
GPUS=$ngpu
GPU1=$gpu1
CB_GPUS=$([ "$SPREAD" = 1 ] && [ "$ngpu" -ge 2 ] && echo "$gpu2" || echo "$gpu1")
TORCH_VERSION=$torch_version
GEMM_BENCH=$GEMM_BENCH
GEMM_BENCHTIME=$GEMM_BENCHTIME
ROUNDS=$ROUNDS
ROUNDS_RUN=${rounds_run:-0}
WARMUP=$WARMUP
LB_STEPS=$LB_STEPS
CB_STEPS=$CB_STEPS
LB_LAYOUT=$LB_LAYOUT
CB_LAYOUT=$CB_LAYOUT
BUDGET_S=$BUDGET_S
HARD_S=$HARD_S
PR_BACKEND=$PR_BACKEND
TWIN_DEVICE=$TWIN_DEVICE
ELAPSED_S=$((SECONDS - t0))
PROFILE_RUN_DTYPE=$has_dtype
NOTES=$notes
EOF
}

summarize() {
	write_settings
	timeout 60 "$PYTHON" "$root/benchmarks/torch/summarize.py" --raw "$raw" --out "$OUT" >>"$OUT/bench.log" 2>&1 ||
		echo "summarize.py failed (see bench.log); the raw results are in $raw" | tee -a "$OUT/bench.log"
}

# record JOB DTYPE VARIANT ROUND TOOL RC START END SKIP W L MB MBS OUT ERR CMD...
record() {
	local fields=("${@:1:15}")
	shift 15
	# As it would be typed from the repository root, the scratch directory
	# named $TMPDIR.
	local cmd="$*"
	cmd=${cmd//$root\//}
	cmd=${cmd//$work/\$TMPDIR}
	local IFS=$'\t'
	printf '%s\t%s\n' "${fields[*]}" "$cmd" >>"$raw/runs.tsv"
}

# skipped JOB DTYPE VARIANT ROUND "W L MB MBS" REASON: a process not run,
# in runs.tsv with exit code -1 and the reason for its command.
skipped() {
	local t model
	t=$(now)
	read -r -a model <<<"$5"
	echo "$1/$2/$3 round $4: skipped: $6" | tee -a "$OUT/bench.log"
	record "$1" "$2" "$3" "$4" "${3%%-*}" -1 "$t" "$t" 0 "${model[@]}" "" "" "skipped: $6"
}

# The model flags of a job: JOB → width layers microbatches microbatch-size.
model_of() {
	case $1 in
	launch-bound) echo "$LB_WIDTH $LB_LAYERS $LB_MB $LB_MBS" ;;
	compute-bound) echo "$CB_WIDTH $CB_LAYERS $CB_MB $CB_MBS" ;;
	*) echo "128 16 8 16" ;; # pipeline.DefaultConfig
	esac
}

# Per JOB/DTYPE/VARIANT: failures so far (2 or more: not run again), and why.
declare -A failures why

# run_variant JOB DTYPE VARIANT ROUND: one fresh process, its output under
# raw/, a row in runs.tsv.
run_variant() {
	local job=$1 dtype=$2 variant=$3 round=$4
	local key=$job/$dtype/$variant
	local w l m r steps limit layout
	read -r w l m r <<<"$(model_of "$job")"
	if [ "${failures[$key]:-0}" -ge 2 ]; then
		skipped "$job" "$dtype" "$variant" "$round" "$w $l $m $r" "${why[$key]:-failed in two rounds}"
		return
	fi
	if [ "$job" = launch-bound ]; then
		steps=$LB_STEPS limit=$LB_LIMIT layout=$LB_LAYOUT
	else
		steps=$CB_STEPS limit=$CB_LIMIT layout=$CB_LAYOUT
	fi
	local dir=$raw/$job-$dtype
	mkdir -p "$dir"
	local base=$variant.r$round
	local tool cmd skip
	case $variant in
	trainscope-*)
		tool=trainscope skip=$WARMUP
		local runs=$work/$job-$dtype-$base
		# shellcheck disable=SC2206 # the layout is a list of flags
		# A variant ending in @NAME runs .bin/profile-run-NAME (another
		# build, or a script around this one) with the same flags.
		local prog=$bin/profile-run
		if [ "${variant%@*}" != "$variant" ]; then
			prog=$bin/profile-run-${variant##*@}
			if [ ! -x "$prog" ]; then
				skipped "$job" "$dtype" "$variant" "$round" "$w $l $m $r" "no .bin/profile-run-${variant##*@}"
				return
			fi
		fi
		cmd=("$prog" -backend "$PR_BACKEND" $layout -width "$w" -layers "$l" -microbatches "$m" -microbatch-size "$r"
			-steps $((WARMUP + steps)) -progress off -metrics-addr off -trace off -pprof off -call-log-size 0 -quiet -out "$runs")
		[ "$dtype" = float32 ] || cmd+=(-dtype "$dtype")
		case ${variant%@*} in
		trainscope-off) cmd+=(-profile off) ;;
		trainscope-depth1) cmd+=(-profile on -device-depth 1) ;;
		trainscope-depth0) cmd+=(-profile on -device-depth 0) ;;
		trainscope-trace) cmd+=(-profile on -device-depth 0 -device-timing trace) ;;
		trainscope-trace1) cmd+=(-profile on -device-depth 1 -device-timing trace) ;;
		trainscope-sync) cmd+=(-profile sync) ;;
		trainscope-cupti)
			# The same job unprofiled, wrapped: the plugin, its CUDA
			# injection library, has CUPTI record every kernel, copy and
			# memset. Its step lines are the wrapped process's.
			if [ ! -f "$bin/libtrainscope-nccl.so" ]; then
				skipped "$job" "$dtype" "$variant" "$round" "$w $l $m $r" "no .bin/libtrainscope-nccl.so (build needs a C compiler)"
				return
			fi
			cmd=("$bin/profile-run" -metrics-addr off -progress off -quiet -trace off -pprof off -out "$runs-wrapper" -- "${cmd[@]}" -profile off)
			;;
		esac
		;;
	torch-*)
		tool=torch skip=0
		cmd=("$PYTHON" "$root/benchmarks/torch/twin.py" --device "$TWIN_DEVICE" --width "$w" --layers "$l" --microbatches "$m" --microbatch-size "$r"
			--steps "$steps" --warmup "$WARMUP" --dtype "$dtype")
		case $variant in
		torch-off) cmd+=(--profile off) ;;
		torch-cuda) cmd+=(--profile cuda) ;;
		*) cmd+=(--profile torch) ;;
		esac
		;;
	esac
	local secs
	secs=$(bounded "$limit")
	if [ "$secs" -lt 5 ]; then
		skipped "$job" "$dtype" "$variant" "$round" "$w $l $m $r" "the time was up (HARD_S=${HARD_S}s)"
		return
	fi
	local start end rc s=$SECONDS
	start=$(now)
	local devices=$gpu1
	if [ "$SPREAD" = 1 ] && [ "$ngpu" -ge 2 ] && [ "$tool" = trainscope ] && [ "$job" = compute-bound ]; then
		devices=$gpu2
	fi
	CUDA_VISIBLE_DEVICES=$devices timeout -k 10 "$secs" "${cmd[@]}" >"$dir/$base.out" 2>"$dir/$base.err"
	rc=$?
	end=$(now)
	echo "$key round $round: exit $rc after $((SECONDS - s))s" | tee -a "$OUT/bench.log"
	record "$job" "$dtype" "$variant" "$round" "$tool" "$rc" "$start" "$end" "$skip" "$w" "$l" "$m" "$r" \
		"$job-$dtype/$base.out" "$job-$dtype/$base.err" "${cmd[*]}"
	if [ $rc -ne 0 ]; then
		failures[$key]=$((${failures[$key]:-0} + 1))
		why[$key]="failed in two rounds (last: exit $rc in round $round)"
		if [ $rc -eq 2 ]; then
			# A usage or configuration error does not go away by repeating it.
			failures[$key]=2
			why[$key]="exit 2 (usage or configuration) in round $round"
		fi
		if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			failures[$key]=2
			why[$key]="timed out after ${secs}s in round $round"
			# The unprofiled variant is the fastest of its tool: when it
			# runs out of time, so would the others.
			if [ "${variant#*-}" = off ]; then
				local v
				for v in "${VARIANTS[@]}"; do
					if [ "${v%%-*}" = "$tool" ] && [ "$v" != "$variant" ]; then
						failures[$job/$dtype/$v]=2
						why[$job/$dtype/$v]="$variant timed out after ${secs}s in round $round"
					fi
				done
				note "$key timed out after ${secs}s: the other $tool variants of $job ($dtype) are skipped"
			fi
		fi
		tail -n 3 "$dir/$base.err" | sed "s|^|    |" | tee -a "$OUT/bench.log"
	fi
	if [ "$tool" = trainscope ]; then
		local rep
		# (trainscope-cupti: the wrapping profile-run's report, which
		# counts the kernels CUPTI recorded)
		rep=$(find "$runs" "$runs-wrapper" -name report.txt 2>/dev/null | head -n 1)
		local keep=$OUT/reports/$job-$dtype-$variant.txt
		[ -n "$rep" ] && [ ! -e "$keep" ] && cp "$rep" "$keep"
		rm -rf "$runs" "$runs-wrapper"
	fi
}

# default_run NAME DEVICES: profile-run with no flags at all, in a scratch
# directory (its outputs go to ./trainscope-out there).
default_run() {
	local name=$1 devices=$2
	local dir=$work/$name
	mkdir -p "$dir" "$raw/$name"
	local start end rc
	start=$(now)
	(cd "$dir" && export CUDA_VISIBLE_DEVICES=$devices && step "$name: profile-run, no flags, CUDA_VISIBLE_DEVICES=$devices" 120 "$OUT/$name.log" "$bin/profile-run")
	rc=$?
	end=$(now)
	# The step lines and the first lines, for the summary.
	cp "$OUT/$name.log" "$raw/$name/no-flags.out"
	: >"$raw/$name/no-flags.err"
	record "$name" float32 no-flags 1 trainscope "$rc" "$start" "$end" "$WARMUP" 128 16 8 16 \
		"$name/no-flags.out" "$name/no-flags.err" "$bin/profile-run"
	grep -v "^===" "$OUT/$name.log" | head -n 3 | sed "s|^|    |" | tee -a "$OUT/bench.log"
}

gemm() {
	local log=$raw/gemm.log
	: >"$log"
	step "GEMM rate: $GEMM_BENCH" 150 "$log" "$bin/cuda.test" -test.run '^$' -test.bench "^${GEMM_BENCH}\$" -test.benchtime "$GEMM_BENCHTIME" -test.timeout 140s
	if ! grep -q '^Benchmark' "$log"; then
		note "no $GEMM_BENCH lines from .bin/cuda.test; the GEMM rate is BenchmarkGemm's square shapes instead"
		step "GEMM rate: BenchmarkGemm (fallback)" 120 "$log" "$bin/cuda.test" -test.run '^$' -test.bench '^BenchmarkGemm$' -test.benchtime 20x -test.timeout 110s
	fi
}

rounds() {
	local r i n=${#VARIANTS[@]} round_s=0 s
	rounds_run=0
	for ((r = 1; r <= ROUNDS; r++)); do
		if [ $r -gt 1 ] && [ $((SECONDS - t0 + round_s)) -gt "$BUDGET_S" ]; then
			note "stopped after $((r - 1)) rounds: another (about ${round_s}s) would end past BUDGET_S=${BUDGET_S}s"
			break
		fi
		s=$SECONDS
		for job in $JOBS; do
			for dtype in $DTYPES; do
				# Rotating order: round r starts at variant r-1, so every
				# variant takes every place once in len(VARIANTS) rounds.
				for ((i = 0; i < n; i++)); do
					run_variant "$job" "$dtype" "${VARIANTS[$(((i + r - 1) % n))]}" "$r"
				done
			done
		done
		round_s=$((SECONDS - s))
		rounds_run=$r
		summarize
	done
}

# extras: the compute-bound job once per dtype, as far as the budget goes.
extras() {
	local per dtype v
	per=$(awk -F'\t' 'NR > 1 && $1 == "compute-bound" && $6 != -1 { n++; t += $8 - $7 } END { if (n) printf "%d", t / n + 1; else print 30 }' "$raw/runs.tsv")
	for dtype in tf32 bf16; do
		if [ $((SECONDS - t0 + 4 * per)) -gt "$BUDGET_S" ]; then
			note "no $dtype run: 4 processes of about ${per}s would end past BUDGET_S=${BUDGET_S}s"
			continue
		fi
		for v in trainscope-off trainscope-depth1 torch-off torch-profiler; do
			if [ "$has_dtype" = 0 ] && [ "${v%%-*}" = trainscope ]; then
				continue
			fi
			run_variant compute-bound "$dtype" "$v" 1
		done
	done
	[ "$has_dtype" = 1 ] || note "profile-run has no -dtype flag: its tf32 and bf16 runs were skipped"
}

run_all() {
	setup_run
	if [ "$ngpu" -ge 2 ]; then
		default_run default-2gpu "$gpu2"
	else
		note "$ngpu GPU(s): profile-run with no flags was not run on two"
	fi
	default_run default-1gpu "$gpu1"
	gemm
	rounds
	[ "$EXTRAS" = 1 ] && extras
	summarize
	echo "done after $((SECONDS - t0))s: $OUT/bench.md, $OUT/bench.json" | tee -a "$OUT/bench.log"
}

case ${1:-} in
build) build ;;
run) run_all ;;
*)
	echo "usage: $0 build|run   (run needs OUT=<results directory>)" >&2
	exit 2
	;;
esac
