#!/usr/bin/env bash
# GPU evidence for wrapped runs (docs/wrap.md): profile-run -- torchrun …
# examples/torch/allreduce_pp.py, checked against the script's own timing.
#
#   scripts/gpu-wrap.sh build   # on a machine with Go and a C compiler:
#                               # profile-run and libtrainscope-nccl.so into .bin/
#   scripts/gpu-wrap.sh run     # on the GPU machine: results under $OUT
#   scripts/gpu-wrap.sh signals # only the signal checks (signals.txt)
#   scripts/gpu-wrap.sh check   # only the wrapped run and its check
#
# run uses two GPUs when there are two or more (two-rank communicators, a
# pp pair), else one (single-rank communicators). It writes under $OUT:
#   env.log      GPUs, NCCL and PyTorch versions
#   wrapped.log  one wrapped run with NCCL_DEBUG=INFO (what NCCL says about
#                the plugin), its JSON lines and profile-run's summary
#   check.txt    counts, sizes and per-call device times against the JSON
#                lines (scripts/wrapcheck.py), PASS/FAIL per line
#   overhead.txt wall time of the script's loops, wrapped and not, fresh
#                processes interleaved, and the median ratio
#   signals.txt  SIGTERM to profile-run, SIGKILL to the worker: exit
#                statuses and the outputs left
#   ddp.txt      a wrapped DistributedDataParallel loop with NVTX steps
#                (examples/torch/ddp_steps.py): steps, step times and the
#                all-reduces of each step against the script's own counts,
#                and the cycle of its all-reduces; the loop without NVTX,
#                its step from that cycle (wrapcheck.py --cycle); the loop
#                without NVTX at 1,500 layers of width 64, a bucket per
#                layer: about 1,500 all-reduces a step, a cycle that needs
#                more than 4,096 operations kept; then the
#                same loop recorded by torch.profiler and imported, checked
#                alike
#   fsdp.txt     a wrapped fully sharded (FSDP2) loop with NVTX steps
#                (examples/torch/fsdp_steps.py, fsdp mode only): steps,
#                step times, and each step's all-gathers and
#                reduce-scatters, size by size, against the script's own
#   kernels.txt  a wrapped one-GPU loop (examples/torch/kernel_steps.py):
#                its kernels per step and their device time, traced by
#                CUPTI, against the script's count and CUDA events, and
#                each kernel's microbatch against the NVTX range it was
#                launched in; the wall time with kernels traced, traced
#                and labelled, and not (kernels mode only)
#   steps.txt    a wrapped run whose every call is an NVTX "step N" range
#                (--nvtx-steps): its report's steps per rank against the
#                script's count
#   pipeline.txt a wrapped pp=2 × dp=2 job of four processes
#                (examples/torch/pipeline_steps.py, Megatron-LM's group
#                descriptions; pipeline mode only): the stages the report
#                gives against the script's, each stage's busy time against
#                the script's CUDA events, every collective matched within
#                its own communicator, the kernels labelled with the
#                forward or backward NVTX range of each microbatch they
#                were launched in; pipeline-named.txt the same with
#                each communicator named by its group's description;
#                PIPELINE_VARIANTS torchpp-kineto and gpipe-kineto import
#                torch.profiler traces of PyTorch's pipelining runtime
#                instead (wrapcheck.py --imported-pipeline)
# Every step is bounded by `timeout`. NCCL_NVLS_ENABLE=0 is exported.
# With fewer GPUs than ranks (one GPU; fewer than four for the pipeline
# job) the ranks share them, under MPS where the machine has it (MPS=0 to
# run without), which the script starts and stops.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

build() {
	set -e
	mkdir -p "$bin"
	make -C "$root/plugins/nccl" libtrainscope-nccl.so
	cp "$root/plugins/nccl/libtrainscope-nccl.so" "$bin/"
	(cd "$root" && CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/profile-run" ./cmd/profile-run)
	ls -l "$bin/profile-run" "$bin/libtrainscope-nccl.so"
}

run() {
	: "${OUT:?set OUT to the results directory}"
	mkdir -p "$OUT"
	export NCCL_NVLS_ENABLE=0
	# Two ranks: on two GPUs when there are, else sharing the one
	# (allreduce_pp.py --share-gpu: NCCL's network transport between
	# them). Single-rank communicators show nothing: NCCL 2.28 runs their
	# collectives as local copies without telling the plugin.
	local ngpu np=2 share=()
	# The GPUs the jobs see: those of CUDA_VISIBLE_DEVICES where it is set
	# (PyTorch counts no others), else nvidia-smi's "GPU n:" lines (not
	# its MIG lines).
	if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
		ngpu=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
	else
		ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	fi
	[ "$ngpu" -lt 2 ] && share=(--share-gpu)
	# The pipeline job has four ranks.
	[ "${1:-all}" = pipeline ] && [ "$ngpu" -lt 4 ] && share=(--share-gpu)
	# Two processes on one GPU time-slice it unless MPS runs their
	# kernels side by side; without it a rank's kernel waits while the
	# other's runs, and no timing of a grouped send/recv pair can agree
	# with the script's. MPS=0 turns it off.
	local mps=""
	if [ ${#share[@]} -gt 0 ] && [ "${MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
		export CUDA_MPS_PIPE_DIRECTORY="$OUT/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$OUT/mps/log"
		mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
		if nvidia-cuda-mps-control -d; then
			mps=on
			trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
		fi
	fi
	local ex=$root/examples/torch/allreduce_pp.py
	local pr=$bin/profile-run
	local tr=(python3 -m torch.distributed.run --standalone --nproc_per_node "$np")
	{
		date -u
		nvidia-smi -L
		python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
		if [ "${1:-all}" = pipeline ]; then
			echo "ranks: 4 (pp 2 × dp 2) on $ngpu GPU(s) ${share[*]}${mps:+ (MPS)}"
		else
			echo "ranks: $np on $ngpu GPU(s) ${share[*]}${mps:+ (MPS)}"
		fi
	} >"$OUT/env.log" 2>&1

	[ "${1:-all}" = signals ] && { signals; return; }
	[ "${1:-all}" = steps ] && { steps; return; }
	[ "${1:-all}" = ddp ] && { ddp; return; }
	[ "${1:-all}" = fsdp ] && { fsdp; return; }
	[ "${1:-all}" = pipeline ] && { pipeline; return; }
	[ "${1:-all}" = kernels ] && { kernels; return; }
	[ "${1:-all}" = stress ] && { stress; return; }
	[ "${1:-all}" = overhead ] && { overhead; return; }
	[ "${1:-all}" = imported ] && { imported; return; }

	# 1. One wrapped run, NCCL talking: counts, sizes and times. With a
	#    GPU a rank, NVLink moves 16 MiB in tens of µs, too short for the
	#    gaps between calls to vanish from the script's loop time: 256 MiB
	#    too (wrapcheck.py checks times of calls of 200 µs or more).
	local sizes=1,16
	[ ${#share[@]} -eq 0 ] && sizes=1,16,256
	echo "== wrapped run ($np ranks)"
	NCCL_DEBUG=INFO timeout -k 10 300 "$pr" -out "$OUT/runs" -metrics-addr off -progress log -progress-every 5s -quiet -- \
		"${tr[@]}" "$ex" "${share[@]}" --iters 20 --warmup 3 --sizes-mib "$sizes" >"$OUT/wrapped.log" 2>&1
	echo "exit $?" >>"$OUT/wrapped.log"
	python3 "$root/scripts/wrapcheck.py" "$OUT/wrapped.log" "$OUT"/runs/*/trace.json >"$OUT/check.txt" 2>&1
	sed -n '/=== collectives across ranks/,/^$/p' "$OUT"/runs/*/report.txt >>"$OUT/check.txt"
	tail -n 35 "$OUT/check.txt"
	rm -f "$OUT"/runs/*/calls.rank*.gz
	[ "${1:-all}" = check ] && { straggler; imported; return; }

	overhead

	straggler
	imported
	signals
}

straggler() {
	# 4. A straggler of known lateness: rank 1 sleeps 20 ms on its GPU
	#    before each timed all-reduce; the report must name it, with the
	#    hold-up the script measured.
	echo "== straggler"
	timeout -k 10 300 "$pr" -out "$OUT/straggler" -metrics-addr off -quiet -- \
		"${tr[@]}" "$ex" "${share[@]}" --iters 20 --warmup 3 --sizes-mib 1 --slow-rank 1 --slow-ms 20 >"$OUT/straggler.log" 2>&1
	echo "exit $?" >>"$OUT/straggler.log"
	python3 "$root/scripts/wrapcheck.py" --straggler "$OUT/straggler.log" "$OUT"/straggler/*/report.txt | tee "$OUT/straggler.txt"
	rm -f "$OUT"/straggler/*/calls.rank*.gz
}

imported() {
	# 5. The same job unwrapped, recorded by torch.profiler in each rank's
	#    process, then imported: the collectives matched across the two
	#    traces (numbered where PyTorch gives no "Seq"), clocks aligned, and
	#    the late rank named with the script's own lateness.
	echo "== torch.profiler traces, imported"
	rm -rf "$OUT/torch-traces"
	timeout -k 10 300 "${tr[@]}" "$ex" "${share[@]}" --iters 20 --warmup 3 --sizes-mib 1 --slow-rank 1 --slow-ms 20 \
		--torch-trace "$OUT/torch-traces" >"$OUT/imported.log" 2>&1
	echo "exit $?" >>"$OUT/imported.log"
	timeout -k 10 300 "$pr" import -out "$OUT/imported" -metrics-addr off -quiet "$OUT"/torch-traces/rank*.json >>"$OUT/imported.log" 2>&1
	echo "import exit $?" >>"$OUT/imported.log"
	grep -E 'Chrome/Kineto|warning|WARN|exit' "$OUT/imported.log" | head -12
	python3 "$root/scripts/wrapcheck.py" --straggler "$OUT/imported.log" "$OUT"/imported/*/report.txt | tee "$OUT/imported.txt"
	rm -rf "$OUT/torch-traces" "$OUT"/imported/*/calls.rank*.gz "$OUT"/imported/*/trace.json
}

signals() {
	# 3. Signals, each mid-run with both ranks' collectives flowing:
	#    a. SIGTERM to profile-run: passed to the job's process group (a
	#       bash launcher and its two python workers); bash dies of it: 143.
	#    b. SIGTERM to the launcher itself: 143; profile-run ends the
	#       workers it orphans.
	#    c. SIGKILL to torchrun: 137; its workers, in sessions of their
	#       own, are ended by profile-run.
	# Each leaves the operations seen up to then in its outputs.
	echo "== signals"
	local long=("${share[@]}" --iters 1000000 --warmup 0 --sizes-mib 1)
	# Rank 1 on GPU 1 where there is one (allreduce_pp.py takes LOCAL_RANK
	# modulo the GPUs it sees, so with one GPU both share it).
	local launch="RANK=0 LOCAL_RANK=0 python3 $ex ${long[*]} & RANK=1 LOCAL_RANK=1 python3 $ex ${long[*]} & wait"
	: >"$OUT/signals.txt"
	export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2
	MASTER_PORT=29561 "$pr" -out "$OUT/sig-term" -metrics-addr off -quiet -- bash -c "$launch" >>"$OUT/signals.txt" 2>&1 &
	local p=$!
	sleep 20
	kill -TERM "$p"
	reap "$p" 143 "a. SIGTERM to profile-run (bash launcher, two workers)"
	gpu_ready
	MASTER_PORT=29562 "$pr" -out "$OUT/sig-term-child" -metrics-addr off -quiet -- bash -c "$launch" >>"$OUT/signals.txt" 2>&1 &
	p=$!
	sleep 20
	pkill -TERM -f '^bash -c RANK=0'
	reap "$p" 143 "b. SIGTERM to the bash launcher"
	gpu_ready
	unset MASTER_ADDR WORLD_SIZE
	"$pr" -out "$OUT/sig-kill" -metrics-addr off -quiet -- "${tr[@]}" "$ex" "${long[@]}" >>"$OUT/signals.txt" 2>&1 &
	p=$!
	sleep 25
	pkill -KILL -f '^python3 -m torch.distributed.run'
	reap "$p" 137 "c. SIGKILL to torchrun"
	sleep 2
	local left
	left=$(pgrep -fc allreduce_pp.py)
	echo "processes of the jobs left: $left" >>"$OUT/signals.txt"
	[ "$left" = 0 ] && echo "PASS no worker left 2 s after the runs" >>"$OUT/signals.txt" ||
		echo "FAIL $left workers left 2 s after the runs" >>"$OUT/signals.txt"
	pkill -KILL -f allreduce_pp.py
	for d in "$OUT"/sig-*/*; do
		echo "--- $d: $(ls "$d" | tr '\n' ' ')" >>"$OUT/signals.txt"
		head -n 3 "$d/report.txt" >>"$OUT/signals.txt" 2>&1
		grep -E "AllReduce|AllGather" "$d/report.txt" | head -n 4 >>"$OUT/signals.txt" 2>&1
	done
	# What was seen up to the signal is exported: each run's report holds
	# the all-reduces of its job.
	for d in sig-term sig-term-child sig-kill; do
		if grep -qs AllReduce "$OUT/$d"/*/report.txt; then
			echo "PASS $d: the report holds the all-reduces seen before the signal" >>"$OUT/signals.txt"
		else
			echo "FAIL $d: no report with all-reduces under $OUT/$d" >>"$OUT/signals.txt"
		fi
	done
	for f in "$OUT"/sig-*/*/trace.json; do
		echo "--- $f" >>"$OUT/signals.txt"
		python3 "$root/scripts/wrapcheck.py" /dev/null "$f" 2>&1 | grep -E '^  trace rank [0-9]+: ' >>"$OUT/signals.txt"
	done
	rm -f "$OUT"/sig-*/*/calls.rank*.gz "$OUT"/sig-*/*/trace.json
	grep -E '^(PASS|FAIL)|exit [0-9]|^---|left|nccl:|wrapped command|trace rank' "$OUT/signals.txt"
}

# gpu_ready waits, 60 s at most, until a new process can use the GPU,
# and writes how long that took to signals.txt. Processes killed in the
# middle of NCCL kernels have exited when profile-run does, but under MPS
# the server takes seconds more to tear their contexts down, and a client
# that starts meanwhile fails with "CUDA-capable device(s) is/are busy or
# unavailable".
gpu_ready() {
	local t0=$SECONDS
	until python3 -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()' >/dev/null 2>&1; do
		if [ $((SECONDS - t0)) -ge 60 ]; then
			echo "the GPU still refused a new process 60 s after the last job" >>"$OUT/signals.txt"
			return
		fi
		sleep 1
	done
	echo "the GPU took a new process $((SECONDS - t0)) s after the last job" >>"$OUT/signals.txt"
}

# reap PID WANT WHAT: waits for profile-run (PID) to end, 120 s at most
# (then kills it: it did not end its job), and writes its exit status,
# PASS where it is WANT, to signals.txt.
reap() {
	local p=$1 want=$2 what=$3 t0=$SECONDS rc hung=""
	while kill -0 "$p" 2>/dev/null && [ $((SECONDS - t0)) -lt 120 ]; do
		sleep 0.2
	done
	if kill -0 "$p" 2>/dev/null; then
		hung=1
		echo "$what: profile-run still running after 120 s, killed" >>"$OUT/signals.txt"
		kill -KILL "$p"
	fi
	wait "$p"
	rc=$?
	echo "$what: exit $rc after $((SECONDS - t0)) s" >>"$OUT/signals.txt"
	if [ -z "$hung" ] && [ "$rc" = "$want" ]; then
		echo "PASS $what: exit $rc" >>"$OUT/signals.txt"
	else
		echo "FAIL $what: exit $rc, want $want" >>"$OUT/signals.txt"
	fi
}

ddp() {
	echo "== DDP with NVTX steps"
	timeout -k 10 300 "$pr" -out "$OUT/ddp" -metrics-addr off -progress off -quiet -trace-steps all -- \
		"${tr[@]}" "$root/examples/torch/ddp_steps.py" "${share[@]}" --steps 20 >"$OUT/ddp.log" 2>&1
	echo "exit $?" >>"$OUT/ddp.log"
	cp "$OUT"/ddp/*/report.txt "$OUT/ddp-report.txt"
	python3 "$root/scripts/wrapcheck.py" --ddp "$OUT/ddp.log" "$OUT/ddp-report.txt" "$OUT"/ddp/*/trace.json | tee "$OUT/ddp.txt"
	# The cycle of DDP's all-reduces, found whether or not the loop marks
	# its steps: against the hook's count and the script's step times.
	python3 "$root/scripts/wrapcheck.py" --cycle "$OUT/ddp.log" "$OUT"/ddp/*/summary.json "$OUT/ddp-report.txt" | tee -a "$OUT/ddp.txt"
	echo "== DDP without NVTX: the step from the cycle of its all-reduces"
	timeout -k 10 300 "$pr" -out "$OUT/ddp-plain" -metrics-addr off -progress off -quiet -- \
		"${tr[@]}" "$root/examples/torch/ddp_steps.py" "${share[@]}" --steps 30 --no-nvtx >"$OUT/ddp-plain.log" 2>&1
	echo "exit $?" >>"$OUT/ddp-plain.log"
	grep -E '^  (cycle|nvtx):' "$OUT/ddp-plain.log"
	python3 "$root/scripts/wrapcheck.py" --cycle "$OUT/ddp-plain.log" "$OUT"/ddp-plain/*/summary.json | tee -a "$OUT/ddp.txt"
	rm -f "$OUT"/ddp-plain/*/calls.rank*.gz "$OUT"/ddp-plain/*/trace.json
	echo "== DDP without NVTX, 1,500 all-reduces a step: the cycle of a long step"
	timeout -k 10 300 "$pr" -out "$OUT/ddp-long" -metrics-addr off -progress off -quiet -trace off -- \
		"${tr[@]}" "$root/examples/torch/ddp_steps.py" "${share[@]}" --steps 14 --no-nvtx \
		--layers 1500 --width 64 --batch 64 --bucket-mb 0.001 >"$OUT/ddp-long.log" 2>&1
	echo "exit $?" >>"$OUT/ddp-long.log"
	grep -E '^  (cycle|nvtx):' "$OUT/ddp-long.log"
	python3 "$root/scripts/wrapcheck.py" --cycle "$OUT/ddp-long.log" "$OUT"/ddp-long/*/summary.json | tee -a "$OUT/ddp.txt"
	rm -f "$OUT"/ddp-long/*/calls.rank*.gz
	# The same loop recorded by torch.profiler in each rank and imported:
	# DDP's all-reduces come from the autograd thread, and each must carry
	# the step of the main thread's ProfilerStep it ran in.
	echo "== DDP recorded by torch.profiler, imported"
	rm -rf "$OUT/ddp-kineto-traces"
	timeout -k 10 300 "${tr[@]}" "$root/examples/torch/ddp_steps.py" "${share[@]}" --steps 20 \
		--torch-trace "$OUT/ddp-kineto-traces" --profile-memory >"$OUT/ddp-kineto.log" 2>&1
	echo "exit $?" >>"$OUT/ddp-kineto.log"
	timeout -k 10 300 "$pr" import -out "$OUT/ddp-kineto" -metrics-addr off -quiet "$OUT/ddp-kineto-traces" >>"$OUT/ddp-kineto.log" 2>&1
	echo "import exit $?" >>"$OUT/ddp-kineto.log"
	cp "$OUT"/ddp-kineto/*/report.txt "$OUT/ddp-kineto-report.txt"
	python3 "$root/scripts/wrapcheck.py" --ddp "$OUT/ddp-kineto.log" "$OUT/ddp-kineto-report.txt" "$OUT"/ddp-kineto/*/trace.json | tee -a "$OUT/ddp.txt"
	rm -rf "$OUT/ddp-kineto-traces" "$OUT"/ddp-kineto/*/calls.rank*.gz
}

fsdp() {
	echo "== FSDP2 with NVTX steps, kernels traced"
	timeout -k 10 300 "$pr" -out "$OUT/fsdp" -metrics-addr off -progress off -quiet -trace-steps all -- \
		"${tr[@]}" "$root/examples/torch/fsdp_steps.py" "${share[@]}" --steps 20 >"$OUT/fsdp.log" 2>&1
	echo "exit $?" >>"$OUT/fsdp.log"
	cp "$OUT"/fsdp/*/report.txt "$OUT/fsdp-report.txt"
	python3 "$root/scripts/wrapcheck.py" --fsdp "$OUT/fsdp.log" "$OUT/fsdp-report.txt" "$OUT"/fsdp/*/trace.json | tee "$OUT/fsdp.txt"
	python3 "$root/scripts/wrapcheck.py" --cycle-steps "$OUT"/fsdp/*/summary.json | tee -a "$OUT/fsdp.txt"
}

pipeline() {
	# Twice: as PyTorch runs it (no communicator names reach NCCL up to
	# at least 2.11: staged by the sends' communicator), and with each
	# group's communicator named by its description (--name-comms, where
	# this PyTorch can: staged by the pipeline's name).
	# PIPELINE_VARIANTS adds: pairs (pp 4, sends outside a batch and
	# lazy communicators: PyTorch's two-rank communicators), pairs2 (the
	# same at pp 2 × dp 2), alltoall (an all-to-all over each stage's
	# replicas after every forward, as an expert-parallel layer's).
	# torchpp and torchpp4 run PyTorch's own pipelining runtime
	# (examples/torch/pipelining_steps.py): its interleaved 1F1B with 2
	# chunks a rank, at pp 2 × dp 2 and at pp 4.
	# torchpp-kineto and gpipe-kineto run pipelining_steps.py unwrapped,
	# recorded by torch.profiler in each rank's process (--torch-trace),
	# and import the traces: interleaved 1F1B at pp 2 × dp 2 labelled by
	# the runtime's own "PP:…" ranges alone (--no-phase-ranges), and GPipe
	# at pp 4 by its "Forward i" / "Backward i" ranges, with the Python
	# stack recorded (--torch-stack: its functions enclose the steps).
	local name flags pp script vpp
	for name in ${PIPELINE_VARIANTS:-pipeline pipeline-named}; do
		flags=() pp=2 vpp=1 script=pipeline_steps.py
		case $name in
		torchpp-kineto | gpipe-kineto)
			flags=(--vpp 2 --no-phase-ranges) vpp=2
			[ $name = gpipe-kineto ] && flags=(--vpp 1 --schedule gpipe --no-phase-ranges --torch-stack) pp=4 vpp=1
			echo "== $name: pipelining_steps.py pp $pp × vpp $vpp × dp $((4 / pp)), torch.profiler in each rank, imported ${flags[*]}"
			rm -rf "$OUT/$name-traces"
			timeout -k 10 300 python3 -m torch.distributed.run --standalone --nproc_per_node 4 \
				"$root/examples/torch/pipelining_steps.py" "${share[@]}" "${flags[@]}" --pp $pp --microbatches 8 \
				--torch-trace "$OUT/$name-traces" >"$OUT/$name.log" 2>&1
			echo "exit $?" >>"$OUT/$name.log"
			timeout -k 10 300 "$pr" import -out "$OUT/$name" -metrics-addr off -quiet -trace-steps all "$OUT/$name-traces" >>"$OUT/$name.log" 2>&1
			echo "import exit $?" >>"$OUT/$name.log"
			cp "$OUT"/$name/*/report.txt "$OUT/$name-report.txt"
			python3 "$root/scripts/wrapcheck.py" --imported-pipeline "$OUT/$name.log" "$OUT/$name-report.txt" \
				"$(ls "$OUT"/$name/*/trace.json | head -1)" "$OUT/$name-traces" | tee "$OUT/$name.txt"
			timeout -k 10 120 "$pr" report "$(dirname "$(ls "$OUT"/$name/*/trace.json | head -1)")" --html 2>&1 | tee -a "$OUT/$name.txt"
			rm -rf "$OUT/$name-traces" "$OUT"/$name/*/calls.rank*.gz
			continue
			;;
		esac
		case $name in
		pipeline-named) flags=(--name-comms) ;;
		pairs) flags=(--unbatched --lazy-init) pp=4 ;;
		pairs2) flags=(--unbatched --lazy-init) ;;
		alltoall) flags=(--all-to-all) ;;
		torchpp) script=pipelining_steps.py vpp=2 flags=(--vpp 2) ;;
		torchpp4) script=pipelining_steps.py vpp=2 flags=(--vpp 2) pp=4 ;;
		esac
		echo "== $name: $script pp $pp × vpp $vpp × dp $((4 / pp)), NVTX steps, kernels traced ${flags[*]}"
		timeout -k 10 300 "$pr" -out "$OUT/$name" -metrics-addr off -progress off -quiet -trace-steps all \
			-pipeline-schedule "microbatches=8,vpp=$vpp" -- \
			python3 -m torch.distributed.run --standalone --nproc_per_node 4 \
			"$root/examples/torch/$script" "${share[@]}" "${flags[@]}" --pp $pp --microbatches 8 >"$OUT/$name.log" 2>&1
		echo "exit $?" >>"$OUT/$name.log"
		cp "$OUT"/$name/*/report.txt "$OUT/$name-report.txt"
		python3 "$root/scripts/wrapcheck.py" --pipeline "$OUT/$name.log" "$OUT/$name-report.txt" "$(ls "$OUT"/$name/*/trace.json | head -1)" | tee "$OUT/$name.txt"
		python3 "$root/scripts/wrapcheck.py" --cycle-steps "$(ls "$OUT"/$name/*/summary.json | head -1)" | tee -a "$OUT/$name.txt"
		# The HTML page from the run's trace: its kernels read back.
		timeout -k 10 120 "$pr" report "$(dirname "$(ls "$OUT"/$name/*/trace.json | head -1)")" --html 2>&1 | tee -a "$OUT/$name.txt"
		rm -f "$OUT"/$name/*/calls.rank*.gz
	done
}

overhead() {
	# 2. Overhead: the script's wall time, fresh processes interleaved.
	echo "== overhead"
	local pairs=${PAIRS:-6} args=("${share[@]}" --iters 50 --warmup 3 --sizes-mib 1,16)
	: >"$OUT/overhead.txt"
	local v
	for i in $(seq "$pairs"); do
		# Odd rounds unwrapped first, even rounds wrapped first: neither
		# always gets the machine as the other left it.
		for v in $([ $((i % 2)) = 1 ] && echo off on || echo on off); do
			if [ "$v" = off ]; then
				timeout -k 10 120 "${tr[@]}" "$ex" "${args[@]}" 2>/dev/null | grep '"rank": 0,' | sed "s/^/off $i /" >>"$OUT/overhead.txt"
			else
				timeout -k 10 120 "$pr" -out "$OUT/overhead-runs" -metrics-addr off -quiet -report off -trace off -- \
					"${tr[@]}" "$ex" "${args[@]}" 2>/dev/null | grep '"rank": 0,' | sed "s/^/on $i /" >>"$OUT/overhead.txt"
			fi
		done
		# NVTX_OFF=1: also wrapped with the job's NVTX left to no tool (a
		# path NVTX cannot load), which isolates what the plugin's NVTX
		# hooks cost (NCCL calls NVTX around every operation).
		[ "${NVTX_OFF:-0}" = 1 ] && NVTX_INJECTION64_PATH=/nonexistent/nvtx-off.so timeout -k 10 120 "$pr" -out "$OUT/overhead-runs" \
			-metrics-addr off -quiet -report off -trace off -- \
			"${tr[@]}" "$ex" "${args[@]}" 2>/dev/null | grep '"rank": 0,' | sed "s/^/nonvtx $i /" >>"$OUT/overhead.txt"
	done
	python3 - "$OUT/overhead.txt" <<'EOF' | tee -a "$OUT/overhead.txt"
import json, statistics, sys
walls = {"off": {}, "on": {}, "nonvtx": {}}
for line in open(sys.argv[1]):
    parts = line.split(" ", 2)
    if len(parts) == 3 and parts[0] in walls:
        walls[parts[0]][int(parts[1])] = json.loads(parts[2])["wall_s"]
pairs = sorted(set(walls["off"]) & set(walls["on"]))
ratios = [walls["on"][i] / walls["off"][i] for i in pairs]
if ratios:
    print("pairs %d; off median %.4f s, wrapped median %.4f s; ratio per pair %s; median ratio %.4f (target <= 1.02)"
          % (len(pairs), statistics.median(walls["off"][i] for i in pairs), statistics.median(walls["on"][i] for i in pairs),
             " ".join("%.4f" % r for r in ratios), statistics.median(ratios)))
else:
    print("no complete pairs")
both = sorted(set(walls["nonvtx"]) & set(walls["on"]) & set(walls["off"]))
if both:
    print("rounds %d with NVTX to no tool: median %.4f s, ratio to off %.4f; wrapped with NVTX hooks to without, per round %s, median %.4f"
          % (len(both), statistics.median(walls["nonvtx"][i] for i in both),
             statistics.median(walls["nonvtx"][i] / walls["off"][i] for i in both),
             " ".join("%.4f" % (walls["on"][i] / walls["nonvtx"][i]) for i in both),
             statistics.median(walls["on"][i] / walls["nonvtx"][i] for i in both)))
EOF
}

# A wrapped run whose calls are NVTX step ranges: the report must account
# as many steps per rank as the script marked, each with its NCCL call.
steps() {
	echo "== NVTX steps"
	# -kernels=false: this check is of a job whose compute is not timed.
	timeout -k 10 300 "$pr" -out "$OUT/steps" -metrics-addr off -progress off -trace-steps all -kernels=false -- \
		"${tr[@]}" "$ex" "${share[@]}" --nvtx-steps --iters 5 --warmup 1 --sizes-mib 1 >"$OUT/steps.log" 2>&1
	echo "exit $?" >>"$OUT/steps.log"
	python3 "$root/scripts/wrapcheck.py" --steps "$OUT/steps.log" "$OUT"/steps/*/report.txt | tee "$OUT/steps.txt"
	cp "$OUT"/steps/*/report.txt "$OUT/steps-report.txt"
	cp "$OUT"/steps/*/trace.json "$OUT/steps-trace.json"
}

kernels() {
	# Kernels traced through CUPTI (-kernels): a one-GPU loop whose GPU
	# time per step the script takes with CUDA events (KCHECK=0 skips
	# it; its pairs in 3 NVTX ranges "forward microbatch M", whose
	# labels it checks too); then its median step time unwrapped, wrapped
	# with kernels traced and without, and with kernels traced inside 8
	# such ranges a step (labels: CUPTI's API records on), fresh processes
	# interleaved (PAIRS rounds), on a compute-bound shape and a
	# launch-bound one (KSHAPES="launch" for one of them).
	echo "== kernels (CUPTI)"
	local ks=$root/examples/torch/kernel_steps.py
	if [ "${KCHECK:-1}" = 1 ]; then
		timeout -k 10 300 "$pr" -out "$OUT/kernels" -metrics-addr off -progress off -trace-steps all -- \
			python3 "$ks" --steps 20 --phase-ranges 3 >"$OUT/kernels.log" 2>&1
		echo "exit $?" >>"$OUT/kernels.log"
		cp "$OUT"/kernels/*/report.txt "$OUT/kernels-report.txt"
		python3 "$root/scripts/wrapcheck.py" --kernels "$OUT/kernels.log" "$OUT/kernels-report.txt" "$OUT"/kernels/*/trace.json | tee "$OUT/kernels.txt"
	fi
	local shape name i v
	local shapes=("compute --steps 30 --gemms 16 --size 2048 --idle-ms 0" "launch --steps 30 --gemms 400 --size 128 --idle-ms 0")
	for shape in "${shapes[@]}"; do
		name=${shape%% *}
		[ -n "${KSHAPES:-}" ] && [[ " $KSHAPES " != *" $name "* ]] && continue
		for i in $(seq "${PAIRS:-6}"); do
			for v in off kernels nokernels labels; do
				case $v in
				off) timeout -k 10 120 python3 "$ks" ${shape#* } ;;
				labels) timeout -k 10 120 "$pr" -out "$OUT/kernels-runs" -metrics-addr off -progress off -quiet -- python3 "$ks" ${shape#* } --phase-ranges 8 ;;
				kernels) timeout -k 10 120 "$pr" -out "$OUT/kernels-runs" -metrics-addr off -progress off -quiet -- python3 "$ks" ${shape#* } ;;
				nokernels) timeout -k 10 120 "$pr" -out "$OUT/kernels-runs" -metrics-addr off -progress off -quiet -kernels=false -- python3 "$ks" ${shape#* } ;;
				esac 2>/dev/null | grep -o '{"tool": "kernel_steps".*' | python3 -c 'import json,statistics,sys; r=json.loads(sys.stdin.read()); print(sys.argv[1], sys.argv[2], sys.argv[3], 1e3 * statistics.median(r["host_step_s"][1:]), statistics.median(r["gpu_step_ms"][1:]))' "$name" "$v" "$i" >>"$OUT/kernels-overhead.tsv"
			done
		done
	done
	python3 - "$OUT/kernels-overhead.tsv" <<'PY' | tee -a "$OUT/kernels.txt"
import collections, statistics, sys
runs, gpu = collections.defaultdict(dict), collections.defaultdict(list)
for line in open(sys.argv[1]):
    shape, v, i, step_ms, gpu_ms = line.split()
    runs[(shape, int(i))][v] = float(step_ms)
    gpu[(shape, v)].append(float(gpu_ms))
for (shape, v), ms in sorted(gpu.items()):
    print("gpu time of a step (events), %s %s: median %.3f ms over %d processes" % (shape, v, statistics.median(ms), len(ms)))
for shape in sorted({s for s, _ in runs}):
    for v in ("kernels", "nokernels", "labels"):
        ratios = [r[v] / r["off"] for (s, _), r in runs.items() if s == shape and v in r and "off" in r]
        if ratios:
            print("overhead %s %s: median step time %.4f × unwrapped's over %d rounds (%s)" % (shape, v, statistics.median(ratios), len(ratios), " ".join("%.3f" % x for x in ratios)))
PY
}

stress() {
	# Many processes launching small kernels flat out, wrapped by one
	# profile-run: how many of their kernels it took in (what it could
	# not is dropped in the processes and counted), what it cost
	# profile-run itself (its cost line), and what the job paid (each
	# process's median step, wrapped against unwrapped, fresh runs
	# interleaved, PAIRS rounds). STRESS_PROCS processes (default 8) of
	# kernel_steps.py, each its own RANK, on the launch-bound shape.
	local ks=$root/examples/torch/kernel_steps.py
	local n=${STRESS_PROCS:-8} steps=${STRESS_STEPS:-150}
	# Each process's JSON line (6 KB) to a file of its own: lines of
	# several writers to one pipe could interleave.
	job() { echo "for r in \$(seq 0 $((n - 1))); do RANK=\$r python3 $ks --steps $steps --gemms 400 --size 128 --idle-ms 0 >$1.rank\$r.json 2>&1 & done; wait"; }
	echo "== stress: $n processes of 800 small kernels a step, $steps steps each"
	local i
	for i in $(seq "${PAIRS:-2}"); do
		timeout -k 10 300 bash -c "$(job "$OUT/stress-off-$i")" >"$OUT/stress-off-$i.log" 2>&1
		TRAINSCOPE_NCCL_DEBUG=1 timeout -k 10 300 "$pr" -out "$OUT/stress" -metrics-addr off -progress off -quiet -- bash -c "$(job "$OUT/stress-on-$i")" >"$OUT/stress-on-$i.log" 2>&1
		echo "exit $?" >>"$OUT/stress-on-$i.log"
	done
	rm -rf "$OUT/stress"
	python3 - "$OUT" "${PAIRS:-2}" <<'PY' | tee "$OUT/stress.txt"
import json, re, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
import glob
def runs(path):
    text = open(path).read()
    rs = []
    for f in sorted(glob.glob(path[:-len(".log")] + ".rank*.json")):
        lines = open(f).read().splitlines()
        r = [json.loads(l[l.index("{"):]) for l in lines if '"tool": "kernel_steps"' in l]
        # The plugin's TRAINSCOPE_NCCL_DEBUG line: where this process's records went.
        dbg = [l for l in lines if l.startswith("trainscope-nccl: pid")]
        if r:
            r[0]["plugin"] = " / ".join(dbg) if dbg else "no debug line"
        rs += r
    return text, rs
for i in range(1, pairs + 1):
    _, off = runs("%s/stress-off-%d.log" % (out, i))
    text, on = runs("%s/stress-on-%d.log" % (out, i))
    launched = sum(r["steps"] * r["kernels_per_step"] for r in on)
    wall = max((r["wall_s"] for r in on), default=0)
    m = re.search(r"kernels: (\d+) kernels and (\d+) copies", text)
    traced = int(m.group(1)) if m else 0
    d = re.search(r"; (\d+) dropped in the plugin \((\d+) ring full, (\d+) refused, (\d+) unsent, (\d+) kernel records by CUPTI\)", text)
    cost = re.search(r"cost: .*", text)
    step_off = statistics.median(statistics.median(r["host_step_s"][1:]) for r in off) if off else 0
    step_on = statistics.median(statistics.median(r["host_step_s"][1:]) for r in on) if on else 0
    print("round %d: %d processes unwrapped, %d wrapped; %d kernels launched over %.1f s (%.0f a second), %d traced (%.2f%%); dropped in the plugin: %s"
          % (i, len(off), len(on), launched, wall, launched / wall if wall else 0, traced, 100.0 * traced / launched if launched else 0,
             d.group(0)[2:] if d else "none"))
    print("round %d: median step %.3f ms unwrapped, %.3f ms wrapped (%.3f×); %s" % (i, 1e3 * step_off, 1e3 * step_on, step_on / step_off if step_off else 0, cost.group(0) if cost else "no cost line"))
    ok = len(on) == len(off) and launched > 0 and traced + (int(d.group(1)) if d else 0) >= launched
    own = [0, 0, 0]  # ring full, unsent, CUPTI's: the sums of the processes' own last counts
    for r in on:
        print("  launched %d kernels; %s" % (r["steps"] * r["kernels_per_step"], r["plugin"]))
        m2 = re.search(r"dropped by cupti (\d+); records sent \d+, unsent (\d+), ring drops (\d+)", r["plugin"])
        if m2:
            own = [own[0] + int(m2.group(3)), own[1] + int(m2.group(2)), own[2] + int(m2.group(1))]
    got = [int(d.group(2)), int(d.group(4)), int(d.group(5))] if d else [0, 0, 0]
    print("%s stress round %d: profile-run has every process's last counts (ring full, unsent, CUPTI's: %s; the processes say %s)"
          % ("PASS" if got == own else "FAIL", i, got, own))
    print("%s stress round %d: every kernel launched was traced or counted as dropped" % ("PASS" if ok else "FAIL", i))
PY
}

case "${1:-}" in
build) build ;;
run) run all ;;
signals) run signals ;;
steps) run steps ;;
ddp) run ddp ;;
fsdp) run fsdp ;;
pipeline) run pipeline ;;
kernels) run kernels ;;
stress) run stress ;;
overhead) run overhead ;;
check) run check ;;
imported) run imported ;;
*)
	echo "usage: $0 build|run|check|signals|imported|steps|overhead|ddp|fsdp|pipeline|kernels|stress" >&2
	exit 2
	;;
esac
