#!/usr/bin/env bash
# The pipeline analysis on the GPU machine (docs/analysis.md): the built-in
# trainer at pp=2 × vpp=2 on CUDA — its two ranks share the one GPU when
# only one is present — and the report's pipeline section.
#
#   CGO_ENABLED=0 go build -o .bin/profile-run ./cmd/profile-run   # here
#   OUT=... scripts/gpu-analysis.sh                                 # there
set -u
: "${OUT:?set OUT to the results directory}"
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/../.bin"
for args in "-width 4096 -layers 8 -microbatches 8 -microbatch-size 256 -dtype tf32" \
	"-width 1024 -layers 8 -microbatches 8 -microbatch-size 64"; do
	echo "=== profile-run -backend cuda -pp 2 -vpp 2 $args -steps 12"
	# shellcheck disable=SC2086 # the arguments are words
	timeout 120 ./profile-run -backend cuda -pp 2 -vpp 2 $args -steps 12 -metrics-addr off -progress off \
		-no-step-lines -trace off -out "$OUT/runs" 2>&1 | sed -n '/training on/p;/pipeline analysis/,/^records:/p'
done
