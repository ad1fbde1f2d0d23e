#!/usr/bin/env bash
# Run 180: the tile kernel's register cap at tiles of 1024 (56 now) on today's kernels: run 179
# had 64 faster at every V = 32000 size. Same call, issue mix, two repeats, V = 32000 and
# 128256 (both tiles of 1024).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_MIX=issue CH_REPS="1 2" CH_B="1 16 64 256" CH_V="32000 128256" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_TILE_MAXNREG=64 default+SONICSPEC_TILE_MAXNREG=72 default+SONICSPEC_TILE_MAXNREG=80" \
  timeout 400 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
cat "$OUT/chunk.log"
