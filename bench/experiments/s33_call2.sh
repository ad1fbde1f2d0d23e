#!/usr/bin/env bash
# Session 33, second and fourth device calls: the final code: chunked calls against one
# sequence (eager and replays, sync debug mode "error"), the sampler's GPU tests, then the
# stages in STAGES (default "bench": the benchmark with baselines; run 161 ran STAGES="").
#   OUT=... [STAGES=...] bash bench/experiments/s33_call2.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
timeout 120 python3 bench/experiments/chunk_check.py --batch 64 256 --vocab 262144 \
  --specs default 64 > "$OUT/chunk-check.log" 2>&1
# shellcheck disable=SC2086  # (STAGES: words)
LIMIT=200 OUT=$OUT timeout 450 bash bench/gpu_all.sh tests ${STAGES-bench} > /dev/null 2>&1
