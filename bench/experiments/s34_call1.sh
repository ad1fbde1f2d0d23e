#!/usr/bin/env bash
# Session 34, first device call: ROW_DONE (each finish program waits for its own row's tile
# programs, `triton_kernels._await_row`, instead of the whole tile grid). Chunked calls against
# one sequence under it (eager and replays, sync debug mode "error"), a same-call A/B against
# SONICSPEC_ROW_DONE=0 (graph replays, two repeats), then timelines of both. The knob is in
# `experiments/row-done.diff` now (apply it on main first).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
timeout 100 python3 bench/experiments/chunk_check.py --batch 64 256 --vocab 262144 \
  --specs default 64 > "$OUT/chunk-check.log" 2>&1
echo "chunk_check rc=$?" >> "$OUT/chunk-check.log"
CH_REPS="1 2" CH_B="1 16 64 256" CH_V="32000 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_ROW_DONE=0" timeout 330 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
for t in 1 0; do
  echo "== SONICSPEC_ROW_DONE=$t" >> "$OUT/timeline.log"
  SONICSPEC_ROW_DONE=$t timeout 60 python3 bench/timeline.py --batch 1 256 --vocab 32000 262144 \
    --iters 20 >> "$OUT/timeline.log" 2>&1
done
