#!/usr/bin/env bash
# Session 39, call 2 (branch exp/patch-skip): requests with nothing to patch skip the patch
# program's work after zeroing their bits (SONICSPEC_PATCH_SKIP, default 1 on the branch)
# against 0 (main's kernels): same-call A/B, issue mix, two repeats; the timelines of verify
# B = 256 at V = 32000 and 262144 both ways; then the GPU tests on the branch's default.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PATCH_SKIP=0" CH_B="1 64 256" CH_V="32000 128256 262144" \
  CH_REPS="1 2" OUT=$OUT timeout 330 bash bench/experiments/chunk_ab.sh
for s in 1 0; do
  echo "== PATCH_SKIP=$s" >> "$OUT/timeline.log"
  SONICSPEC_PATCH_SKIP=$s timeout 60 python3 bench/timeline.py --batch 256 --vocab 32000 262144 \
    --iters 20 2>&1 | grep -v -i warn >> "$OUT/timeline.log"
done
cat "$OUT/timeline.log"
OUT=/tmp/gputests LIMIT=150 timeout 160 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 | tee "$OUT/tests-summary.log"
