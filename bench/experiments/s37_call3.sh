#!/usr/bin/env bash
# Run 178: the patch kernel skips requests without a penalty or bias (their bits stay zero),
# against SONICSPEC_PATCH_ALL=1 (every request patched, as before); and the tile kernel's
# bits read without waiting for the row flags (SONICSPEC_TILE_BITS_ALWAYS=1). Same-call
# graph replays, issue mix (two repeats) and penalties mix; timelines of the issue mix.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_MIX=issue CH_REPS="1 2" CH_B="1 64 256" CH_V="32000 128256 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_PATCH_ALL=1 default+SONICSPEC_TILE_BITS_ALWAYS=1" \
  timeout 330 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
echo "(mix issue above)" >> "$OUT/chunk.log"
CH_MIX=penalties CH_REPS="1" CH_B="64 256" CH_V="128256 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_TILE_BITS_ALWAYS=1" \
  timeout 80 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
echo "(mix penalties above)" >> "$OUT/chunk.log"
for spec in "" SONICSPEC_PATCH_ALL=1 SONICSPEC_TILE_BITS_ALWAYS=1; do
  echo "== $spec" >> "$OUT/timeline.log"
  env $spec timeout 60 python3 bench/timeline.py --batch 256 --vocab 128256 --mix issue \
    --iters 20 >> "$OUT/timeline.log" 2>&1
done
cat "$OUT/chunk.log"; grep -v Warning "$OUT/timeline.log" | grep -v _warn_once
