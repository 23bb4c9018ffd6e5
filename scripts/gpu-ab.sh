#!/usr/bin/env bash
# profile-run built from the working tree against builds of earlier
# revisions, on one job, in rounds of fresh processes on a GPU machine: the
# comparison behind docs/benchmarks.md "Measured on 2026-12-07 (night)".
#
#   REVS="aab494a" scripts/gpu-ab.sh build   # here: .bin/ab.tgz (the working tree's
#                                            # profile-run and one per revision)
#   OUT=... scripts/gpu-ab.sh run            # there; carry .bin/ab.tgz scripts/gpu-ab.sh
#
# run unpacks the binaries and, ROUNDS times (default 6), runs every
# variant once in an order rotated by one each round. A variant is a
# binary and a -profile value; VARIANTS (comma-separated) defaults to
# "cur off,cur on" and "REV off,REV on" for each revision built ("cur" is
# the working tree). JOB holds the job's flags (default: profile-run's
# default job); every process also gets -steps $STEPS (default 33) and
# outputs off but the report's recording. Results: $OUT/ab.tgz (every
# process's output, runs.txt, gpu.txt) and $OUT/ab.md: per variant the
# median over processes of each one's median step time (steps 3 on),
# its range, the mean of means, and per binary on/off by medians, paired
# within rounds, and by means.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.bin

case "${1:-}" in
build)
	set -e
	mkdir -p "$bin/ab"
	names=(cur)
	CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/ab/cur" ./cmd/profile-run
	for rev in ${REVS:-}; do
		tmp=$(mktemp -d)
		git -C "$root" worktree add -q "$tmp" "$rev"
		(cd "$tmp" && CGO_ENABLED=0 go build -ldflags '-s -w' -o "$bin/ab/$rev" ./cmd/profile-run)
		git -C "$root" worktree remove --force "$tmp"
		names+=("$rev")
	done
	tar czf "$bin/ab.tgz" -C "$bin/ab" "${names[@]}"
	rm -rf "$bin/ab"
	size=$(($(git -C "$root" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) + $(stat -c %s "$bin/ab.tgz")))
	echo "built ${names[*]} into .bin/ab.tgz; tracked files and the archive: $((size >> 20)) MiB of the 64 MiB the GPU machine takes"
	;;
run)
	: "${OUT:?set OUT to a directory for the results}"
	export NCCL_NVLS_ENABLE=0
	work=$OUT/ab
	mkdir -p "$work/bin"
	tar xzf "$bin/ab.tgz" -C "$work/bin" || exit 1
	mapfile -t builds < <(ls "$work/bin")
	if [ -z "${VARIANTS:-}" ]; then
		VARIANTS=""
		for b in "${builds[@]}"; do VARIANTS+="${VARIANTS:+,}$b off,$b on"; done
	fi
	IFS=, read -ra vars <<<"$VARIANTS"
	n=${#vars[@]}
	flags="-report off -trace off -progress off -metrics-addr off -pprof off -call-log-size 0 -quiet -steps ${STEPS:-33}"
	nvidia-smi -L >"$work/gpu.txt" 2>&1
	for i in $(seq "${ROUNDS:-6}"); do
		for k in $(seq 0 $((n - 1))); do
			read -r b mode <<<"${vars[$(((k + i) % n))]}"
			# shellcheck disable=SC2086 # JOB and flags are word lists
			timeout 120 "$work/bin/$b" -profile "$mode" ${JOB:-} $flags >"$work/$b.$mode.$i.log" 2>&1
			echo "$i $b $mode rc=$?" >>"$work/runs.txt"
		done
		[ "$i" = 2 ] && nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$work/gpu.txt" 2>&1
	done
	python3 - "$work" >"$OUT/ab.md" <<'EOF'
import glob, os, re, statistics as st, sys
d = sys.argv[1]
unit = {'ms': 1, 'µs': 1e-3, 'us': 1e-3, 's': 1e3}
res = {}
for f in glob.glob(os.path.join(d, '*.log')):
    m = re.match(r'(.+)\.(on|off)\.(\d+)\.log$', os.path.basename(f))
    if not m:
        continue
    steps = []
    for line in open(f, errors='replace'):
        s = re.match(r'step (\d+): loss [^,]+, ([0-9.]+)(ms|µs|us|s)$', line.strip())
        if s and int(s.group(1)) >= 3:
            steps.append(float(s.group(2)) * unit[s.group(3)])
    if steps:
        res.setdefault((m.group(1), m.group(2)), {})[int(m.group(3))] = (st.median(steps), st.mean(steps))
print('| variant | processes | median step (ms) | range | mean of means (ms) |')
print('| --- | --- | --- | --- | --- |')
for k in sorted(res):
    meds = [v[0] for v in res[k].values()]
    print(f'| {k[0]} {k[1]} | {len(meds)} | {st.median(meds):.3f} | {min(meds):.3f}–{max(meds):.3f} | {st.mean(v[1] for v in res[k].values()):.3f} |')
print()
for b in sorted({k[0] for k in res}):
    on, off = res.get((b, 'on')), res.get((b, 'off'))
    if not on or not off:
        continue
    paired = [on[r][0] / off[r][0] for r in on if r in off]
    print(f'- {b}: on/off {st.median(v[0] for v in on.values()) / st.median(v[0] for v in off.values()):.4f} by medians, '
          f'{st.median(paired):.4f} paired, {st.mean(v[1] for v in on.values()) / st.mean(v[1] for v in off.values()):.4f} by means')
EOF
	rm -rf "$work/bin"
	tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$work"
	cat "$OUT/ab.md"
	;;
*)
	echo "usage: REVS=\"rev…\" $0 build | OUT=dir $0 run" >&2
	exit 2
	;;
esac
