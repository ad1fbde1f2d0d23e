#!/usr/bin/env bash
# Session 36, eighth device call: the tile kernel's early-launch trigger only in the grid's last
# 4096 programs (new default) against every program (SONICSPEC_TILE_TRIGGER_LAST=0): the tile
# kernel alone, then same-call graph replays of the issue mix, two repeats.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
for last in 4096 0; do
  echo "== SONICSPEC_TILE_TRIGGER_LAST=$last" >> "$OUT/tile-alone.log"
  SONICSPEC_TILE_TRIGGER_LAST=$last timeout 100 python3 bench/experiments/gluon_tile_probe.py \
    --iters 40 --rows 1 16 80 256 1280 --shares 0.4 0 --configs "k2,rp" >> "$OUT/tile-alone.log" 2>&1
done
CH_REPS="1 2" CH_B="1 16 64 256" CH_V="32000 128256 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_TILE_TRIGGER_LAST=0" \
  timeout 380 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
cat "$OUT/chunk.log"
