#!/usr/bin/env bash
# The GPU evidence that needs one GPU per rank, in one call of about eight
# minutes, for a machine with two GPUs (it runs with one too, where every
# part says that its ranks share the GPU):
#
#   1. profile-run with no flags: pp=2 × vpp=2 on two GPUs with NCCL;
#      then SIGINT to the same job on a device that does not get through
#      its work (-action-delay 1h): exit 130 within about 10 s, outputs
#      written, the hung ranges marked device_unfinished;
#   2. the trainer's losses sharing one GPU (in-process collectives)
#      against the NCCL layout on two, and NCCL's own tests;
#   3. the pipeline analysis (scripts/gpu-analysis.sh): the fidelity
#      tests, and the bubbles of real GEMMs against the ideal;
#   4. a wrapped PyTorch job, one GPU per rank over NVLink
#      (scripts/gpu-wrap.sh check): counts, per-call times, the
#      collectives section, a straggler of known lateness;
#   5. a wrapped DDP job with NVTX steps (scripts/gpu-wrap.sh ddp), one
#      GPU per rank, its kernels traced: steps, all-reduces per step,
#      busy time;
#   6. a wrapped pp=2 × dp=2 job named as Megatron-LM names its groups
#      (scripts/gpu-wrap.sh pipeline): stages, busy per stage, collectives
#      matched within their own communicator;
#   7. a wrapped FSDP2 job (scripts/gpu-wrap.sh fsdp), one GPU per rank:
#      its all-gathers and reduce-scatters per step and size, every
#      kernel in its step's analysis;
#   8. a wrapped job's wall time against the unwrapped job's, fresh
#      processes interleaved (scripts/gpu-wrap.sh overhead);
#   9. SIGTERM and SIGKILL to a wrapped job mid-run (scripts/gpu-wrap.sh
#      signals): exit 143 / 137, what was seen exported.
#
#   scripts/gpu-two.sh build          # here: every binary into .bin/
#   OUT=... scripts/gpu-two.sh run    # there; results in $OUT/logs.tgz
#
# A part starts only within BUDGET_S seconds (default 480) of the start,
# and logs.tgz is rewritten after each part, so a run cut short by the
# 10-minute limit on a command still brings back the finished parts' logs.
#
# carry: .bin/profile-run .bin/libtrainscope-nccl.so .bin/analysis.test
#        .bin/cuda.test .bin/nccl.test
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

build() {
	set -e
	bash "$root/scripts/gpu-wrap.sh" build
	bash "$root/scripts/gpu-analysis.sh" build
	(cd "$root" && CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/nccl.test" ./ccl/nccl)
	du -ch "$bin"/{profile-run,libtrainscope-nccl.so,analysis.test,cuda.test,nccl.test} | tail -1
	# What travels to the GPU machine (the tracked files and the carried
	# binaries) must stay under 64 MiB; stripped, the binaries take about
	# 50 MB.
	local bytes
	bytes=$( (cd "$root" && git ls-files -z | xargs -0 cat && cat "$bin"/{profile-run,libtrainscope-nccl.so,analysis.test,cuda.test,nccl.test}) | wc -c)
	echo "to carry with the tracked files: $((bytes / 1048576)) MiB of 64"
	if [ "$bytes" -gt $((64 * 1048576)) ]; then
		echo "over 64 MiB: the GPU machine would refuse the copy" >&2
		return 1
	fi
}

# pack writes $res/logs.tgz from the scratch directory $work, leaving out
# the run directories (traces, profiles, MPS's pipes): what comes back
# from the device machine is a few files, two folders down at most.
pack() {
	local x=(--exclude=./default --exclude=./analysis/runs --exclude=./wrap/runs --exclude=./wrap/straggler --exclude=./wrap/mps
		--exclude=./wrap-ddp/ddp --exclude=./wrap-ddp/ddp-plain --exclude=./wrap-ddp/ddp-kineto --exclude=./wrap-ddp/mps
		--exclude=./wrap-pipeline/pipeline --exclude=./wrap-pipeline/pipeline-named --exclude=./wrap-pipeline/mps
		--exclude=./wrap-fsdp/fsdp --exclude=./wrap-fsdp/mps
		--exclude=./wrap-overhead/overhead-runs --exclude=./wrap-overhead/mps --exclude=./wrap-signals/mps)
	tar czf "$res/logs.tgz.part" "${x[@]}" -C "$work" . && mv "$res/logs.tgz.part" "$res/logs.tgz"
}

# part TITLE: prints the part's title; false, with a note, once BUDGET_S
# seconds have gone (the part is then not run).
part() {
	echo "== $1"
	if [ $((SECONDS - t0)) -ge "$budget" ]; then
		echo "not run: ${budget}s (BUDGET_S) spent" | tee -a "$OUT/machine.txt"
		return 1
	fi
}

run() {
	: "${OUT:?set OUT to the results directory}"
	mkdir -p "$OUT"
	export NCCL_NVLS_ENABLE=0
	# Every part writes into a scratch directory; logs.tgz under $OUT is
	# rewritten after each part, so a run cut short (by BUDGET_S, or by a
	# 10-minute limit on the command) still brings back what the
	# finished parts wrote. Parts start only within BUDGET_S seconds.
	t0=$SECONDS budget=${BUDGET_S:-480}
	res=$(cd "$OUT" && pwd)
	work=$(mktemp -d)
	OUT=$work
	local ngpu
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	{
		date -u
		nvidia-smi -L
		nvidia-smi topo -m
	} >"$OUT/machine.txt" 2>&1
	echo "GPUs: $ngpu" | tee -a "$OUT/machine.txt"
	(cd "$bin" && timeout -k 5 30 ./profile-run version) >>"$OUT/machine.txt" 2>&1
	grep -E '^(cuda|  device|  NCCL|-backend auto)' "$OUT/machine.txt"

	if part "1. profile-run with no flags"; then
		(cd "$bin" && timeout -k 10 120 ./profile-run -metrics-addr off -out "$OUT/default" >"$OUT/default.log" 2>&1)
		echo "exit $?" >>"$OUT/default.log"
		grep -E '^profile-run: training|^step [0-9]+:|^exit' "$OUT/default.log" | sed -n '1,3p;$p'
		# The devices and libraries it ran on: with a GPU per rank, NCCL among them.
		python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["environment"]; print("environment:", [d.get("name") for d in e.get("devices", [])], [(l["name"], l["version"]) for l in e.get("libraries", [])])' "$OUT"/default/*/summary.json 2>&1 | tee -a "$OUT/default.log"
		local t1=$SECONDS
		(cd "$bin" && timeout -k 40 --preserve-status -s INT 4 ./profile-run -backend cuda -steps 1 -comm-timeout 5s \
			-action-delay 1h -metrics-addr off -out "$OUT/stuck" >"$OUT/stuck.log" 2>&1)
		echo "exit $? after $((SECONDS - t1)) s" >>"$OUT/stuck.log"
		{
			ls "$OUT"/stuck/*/
			grep -h '"device_unfinished"' "$OUT"/stuck/*/summary.json
		} >>"$OUT/stuck.log" 2>&1
		rm -f "$OUT"/stuck/*/trace.json
		grep -E '^profile-run: training|^exit|device_unfinished' "$OUT/stuck.log"
		pack
	fi

	if part "2. losses sharing a GPU against NCCL; NCCL tests"; then
		(cd "$bin" && timeout -k 10 300 ./nccl.test -test.v -test.count=1 -test.timeout=290s \
			-test.run 'TestSharedDeviceTrainer|TestTrainerMatchesCPU|TestCollectives|TestProcessGroupProfiled|TestGroupedOnOneGPU' >"$OUT/nccl.log" 2>&1)
		echo "exit $?" >>"$OUT/nccl.log"
		grep -E '^(--- |ok|FAIL|PASS|exit)|no NCCL layout|relative difference' "$OUT/nccl.log" | head -40
		# Alone in a process of its own: nothing else may touch GPU 0 first.
		(cd "$bin" && timeout -k 10 120 ./nccl.test -test.v -test.count=1 -test.timeout=110s \
			-test.run '^TestNoContextOnGPU0$' >"$OUT/nccl-context.log" 2>&1)
		echo "exit $?" >>"$OUT/nccl-context.log"
		grep -E '^(--- |ok|FAIL|PASS|exit)|made a context|skipped' "$OUT/nccl-context.log" | head -12
		pack
	fi

	if part "3. pipeline analysis"; then
		OUT=$OUT/analysis bash "$root/scripts/gpu-analysis.sh" run 2>&1 |
			grep -E '^(---|ok|FAIL|PASS|===)|^ +--- |exit [0-9]|bubble [0-9]|named|injected|jitter|training on|Bubble %|^ +[0-9] +[0-9]+ |straggler:' | head -70
		pack
	fi

	if part "4. wrapped PyTorch job"; then
		OUT=$OUT/wrap bash "$root/scripts/gpu-wrap.sh" check 2>&1 | tail -40
		pack
	fi
	if part "5. wrapped DDP job with NVTX steps, its kernels traced"; then
		OUT=$OUT/wrap-ddp bash "$root/scripts/gpu-wrap.sh" ddp 2>&1 | tail -12
		grep -A4 "where the steps went" "$OUT"/wrap-ddp/ddp-report.txt
		pack
	fi
	if part "6. wrapped pipeline job (pp 2 × dp 2), Megatron-LM's group names"; then
		OUT=$OUT/wrap-pipeline bash "$root/scripts/gpu-wrap.sh" pipeline 2>&1 | grep -E '^(==|PASS|FAIL|  problem|profile-run: report)'
		pack
	fi
	if part "7. wrapped FSDP2 job with NVTX steps, its kernels traced"; then
		OUT=$OUT/wrap-fsdp bash "$root/scripts/gpu-wrap.sh" fsdp 2>&1 | grep -E '^(==|PASS|FAIL)'
		pack
	fi
	# Issue 11's last two figures over NVLink: a wrapped job's wall time
	# against the unwrapped job's (fresh processes, interleaved), and
	# SIGTERM / SIGKILL mid-run (exit 143 / 137, what was seen exported).
	if part "8. wrapped job's wall time, wrapped and not"; then
		OUT=$OUT/wrap-overhead bash "$root/scripts/gpu-wrap.sh" overhead 2>&1 | tail -12
		pack
	fi
	if part "9. signals to a wrapped job"; then
		OUT=$OUT/wrap-signals bash "$root/scripts/gpu-wrap.sh" signals 2>&1 | grep -E '^(PASS|FAIL)|exit [0-9]|left'
	fi

	echo "done after $((SECONDS - t0)) s" | tee -a "$OUT/machine.txt"
	pack
	rm -rf "$work"
	tar tzf "$res/logs.tgz"
}

case "${1:-run}" in
build) build ;;
run) run ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
