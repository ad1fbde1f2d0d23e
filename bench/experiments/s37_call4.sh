#!/usr/bin/env bash
# Run 179: V = 32000 (where verify misses 2x FlashInfer at B >= 16 by 10% at B = 16 / 64):
# the tile kernel's shape knobs again on today's kernels (same call, issue mix, two repeats),
# and timelines of verify B = 16 / 64.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_MIX=issue CH_REPS="1 2" CH_B="1 16 64 256" CH_V="32000" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_TILE_WARPS=4 default+SONICSPEC_BLOCK_V=2048 default+SONICSPEC_TILE_MAXNREG=64 default+SONICSPEC_TILE_MAXNREG=48 default+SONICSPEC_PRE_WARPS=2" \
  timeout 400 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
timeout 60 python3 bench/timeline.py --batch 16 64 --vocab 32000 --mix issue --iters 20 \
  >> "$OUT/timeline.log" 2>&1
cat "$OUT/chunk.log"; grep -v Warning "$OUT/timeline.log" | grep -v _warn_once
