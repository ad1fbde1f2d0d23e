#!/usr/bin/env bash
# Session 36, fifth device call: the tile kernel's settings loaded after the tile (new default)
# against before it (SONICSPEC_TILE_SETTINGS_FIRST=1): the tile kernel alone (the Gluon
# probe's `tri` column, no patch or grammar), then same-call graph replays of the issue mix.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
for first in 0 1; do
  echo "== SONICSPEC_TILE_SETTINGS_FIRST=$first" >> "$OUT/tile-alone.log"
  SONICSPEC_TILE_SETTINGS_FIRST=$first timeout 100 python3 bench/experiments/gluon_tile_probe.py \
    --iters 40 --rows 1 5 16 80 256 1280 --shares 0.4 0 --configs "k2,rp" >> "$OUT/tile-alone.log" 2>&1
done
CH_REPS="1 2" CH_B="1 16 64 256" CH_V="32000 128256 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_TILE_SETTINGS_FIRST=1" \
  timeout 380 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
cat "$OUT/tile-alone.log"
