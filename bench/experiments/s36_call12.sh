#!/usr/bin/env bash
# Session 36, twelfth device call: `tile_trigger_last` (the tile grid's last 4096 programs
# trigger the finish's launch, tiles of 1024 only): the GPU tests, then same-call graph
# replays against every program triggering (SONICSPEC_TILE_TRIGGER_LAST=0), issue and
# temperature mixes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
OUT=$OUT LIMIT=150 timeout 170 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 > "$OUT/tests-summary.log"
for mix in temperature issue; do
  CH_MIX=$mix CH_REPS="1" CH_B="64 256" CH_V="32000 128256" OUT=$OUT \
    CH_SPECS="default default+SONICSPEC_TILE_TRIGGER_LAST=0" \
    timeout 90 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
  echo "(mix $mix above)" >> "$OUT/chunk.log"
done
cat "$OUT/tests-summary.log" "$OUT/chunk.log"
