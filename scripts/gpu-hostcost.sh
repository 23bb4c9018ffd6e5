#!/usr/bin/env bash
# Where a profiled range's host time goes on a GPU machine
# (docs/benchmarks.md, "where a profiled range's host time goes"), in one
# run of about 4 minutes.
#
#   scripts/gpu-hostcost.sh build           # on a machine with Go: binaries into .bin/
#   OUT=/path scripts/gpu-hostcost.sh run   # on the GPU machine (no Go)
#
# build makes .bin/cuda.test, .bin/benchmarks.test and .bin/profile-run
# (symbol tables stripped, so the three travel together). Where
# .bin/cuda-a.test exists (an earlier build of the same package, to
# compare against: build it yourself), run times the event-timed ranges
# with both, alternately.
#
# run writes $OUT/hostcost.tgz, holding:
#   env.log            GPU, driver, CPU model, the kernel's clock source
#   host.txt           benchmarks.test: HostRange and DeviceRange (the CPU
#                      backend) on this machine's cores
#   hostcost.txt       cuda.test BenchmarkActivityHostCost, every variant,
#                      3 runs of 100,000 launches
#   hostcost-ab.txt    the event-timed variants with cuda-a.test and
#                      cuda.test alternately (where cuda-a.test exists)
#   hostcost-nogc.txt  the trace variants with the garbage collector off
#   hostcost-each.txt  the CUPTI and trace variants each in a process of
#                      its own, in a rotating order, 3 rounds: free of
#                      what one variant leaves the next in one process
#                      (CUPTI started, memory grown)
#   *.pprof            CPU profiles of single runs (range-trace,
#                      range-events, cupti-queued): go tool pprof -top
#                      .bin/cuda.test FILE
#   trace/             scripts/gpu-trace.sh run with BENCH=0: the work
#                      trace's tests and profile-run's smoke runs
#
# PARTS (words, default all) narrows run to some of: host hostcost ab nogc
# each profiles trace, e.g. PARTS=each OUT=... scripts/gpu-hostcost.sh run.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin
PARTS=${PARTS:-host hostcost ab nogc each profiles trace}
part() { [[ " $PARTS " == *" $1 "* ]]; }

case ${1:-} in
build)
	set -e
	mkdir -p "$bin"
	cd "$root"
	CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/cuda.test" ./runtime/cuda/
	CGO_ENABLED=0 go test -c -ldflags '-s -w' -o "$bin/benchmarks.test" ./benchmarks/
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/profile-run" ./cmd/profile-run
	;;
run)
	: "${OUT:?set OUT to a directory for the results}"
	mkdir -p "$OUT"
	export NCCL_NVLS_ENABLE=0
	{
		nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
		grep -m1 'model name' /proc/cpuinfo
		echo "cores: $(nproc)"
		echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
	} >"$OUT/env.log" 2>&1
	cat "$OUT/env.log"
	cd "$bin" || exit 1
	bench='-test.run ^$ -test.benchtime 100000x'
	if part host; then
		timeout 120 ./benchmarks.test -test.run '^$' -test.bench 'HostRange$|DeviceRange' -test.benchtime 1s -test.count 2 >"$OUT/host.txt" 2>&1
		echo "host: exit $?"
	fi
	if part hostcost; then
		# shellcheck disable=SC2086 # $bench is a list of flags
		timeout 150 ./cuda.test $bench -test.bench 'ActivityHostCost/' -test.count 3 >"$OUT/hostcost.txt" 2>&1
		echo "hostcost: exit $?"
	fi
	if part ab && [ -x ./cuda-a.test ]; then
		for i in 1 2 3; do
			for b in cuda-a.test cuda.test; do
				echo "== $b ($i)"
				# shellcheck disable=SC2086
				timeout 40 "./$b" $bench -test.bench 'ActivityHostCost/(timing-event|timing-event-query|range-events|range-events-quiet)$' 2>&1 | grep -E '^Benchmark'
			done
		done >"$OUT/hostcost-ab.txt" 2>&1
		echo "hostcost-ab: done"
	fi
	if part nogc; then
		# shellcheck disable=SC2086
		GOGC=off timeout 60 ./cuda.test $bench -test.bench 'ActivityHostCost/(cupti-queued|range-host|range-trace|range-trace-quiet)$' -test.count 2 >"$OUT/hostcost-nogc.txt" 2>&1
		echo "hostcost-nogc: exit $?"
	fi
	if part each; then
		each=(plain cupti-kernels cupti-queued range-host range-trace)
		for i in 0 1 2; do
			for j in "${!each[@]}"; do
				v=${each[$(((i + j) % ${#each[@]}))]}
				# shellcheck disable=SC2086
				timeout 40 ./cuda.test $bench -test.bench "ActivityHostCost/$v\$" 2>&1 | grep -E '^Benchmark'
			done
		done >"$OUT/hostcost-each.txt" 2>&1
		echo "hostcost-each: done"
		sort "$OUT/hostcost-each.txt" | awk '{print $1, $3, $4}'
	fi
	if part profiles; then
		for v in range-trace range-events cupti-queued; do
			timeout 40 ./cuda.test -test.run '^$' -test.benchtime 300000x -test.bench "ActivityHostCost/$v\$" -test.cpuprofile "$OUT/$v.pprof" >"$OUT/$v.prof.txt" 2>&1
			echo "profile $v: exit $?"
		done
		rm -f ./*.test.prof 2>/dev/null
	fi
	if part trace; then
		BENCH=0 OUT=$OUT/trace "$root/scripts/gpu-trace.sh" run
	fi
	# Few files travel back from the GPU machine: everything in one.
	tgz=$(mktemp --suffix .tgz)
	(cd "$OUT" && tar czf "$tgz" . && rm -rf ./* && mv "$tgz" hostcost.tgz)
	echo "results: $OUT/hostcost.tgz"
	;;
*)
	echo "usage: $0 build | run" >&2
	exit 2
	;;
esac
