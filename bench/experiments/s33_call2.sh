#!/usr/bin/env bash
# Session 33, second device call: the final code (the sampler as of bd49f62, the review mend
# of `_launch_on_streams`, which no GPU had run): chunked calls against one sequence
# (eager and replays, sync debug mode "error"), the sampler's GPU tests, the benchmark with
# baselines.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
timeout 120 python3 bench/experiments/chunk_check.py --batch 64 256 --vocab 262144 \
  --specs default 64 > "$OUT/chunk-check.log" 2>&1
LIMIT=200 OUT=$OUT timeout 450 bash bench/gpu_all.sh tests bench > /dev/null 2>&1
