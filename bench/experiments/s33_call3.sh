#!/usr/bin/env bash
# Session 33, third device call: SONICSPEC_CHUNK_TAIL=1 (every chunk's finish and combine but
# the last chunk's on a highest-priority stream of their own after the chunk's tile kernel):
# chunked calls against one sequence under it (eager and replays, sync debug mode "error"),
# a same-call A/B against main (graph replays, three repeats), a timeline of both. The knob
# is in `experiments/chunk-tail.diff` now (apply it on main first).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
SONICSPEC_CHUNK_TAIL=1 timeout 100 python3 bench/experiments/chunk_check.py --batch 64 256 \
  --vocab 262144 --specs default 64 > "$OUT/chunk-check.log" 2>&1
CH_REPS="1 2 3" CH_B="64 256" CH_V="262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_CHUNK_TAIL=1" timeout 240 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
for t in 0 1; do
  echo "== SONICSPEC_CHUNK_TAIL=$t" >> "$OUT/timeline.log"
  SONICSPEC_CHUNK_TAIL=$t timeout 90 python3 bench/timeline.py --batch 64 256 --vocab 262144 \
    >> "$OUT/timeline.log" 2>&1
done
