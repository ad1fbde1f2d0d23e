#!/usr/bin/env bash
# Session 33, fourth device call: the final code (`_Chunk.rest` split into `tile` and `tail`):
# chunked calls against one sequence (eager and replays, sync debug mode "error") and the
# sampler's GPU tests.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
timeout 100 python3 bench/experiments/chunk_check.py --batch 64 256 --vocab 262144 \
  --specs default 64 > "$OUT/chunk-check.log" 2>&1
LIMIT=200 OUT=$OUT timeout 260 bash bench/gpu_all.sh tests > /dev/null 2>&1
