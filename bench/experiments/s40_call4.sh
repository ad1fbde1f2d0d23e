#!/usr/bin/env bash
# Session 40, call 4 (branch exp/patch-split, second form): the split patch compiled in only
# where pval is [B, V, K + 1] (verify, V <= 65536) and taken from 1024 rows on (a runtime
# argument); against SONICSPEC_PATCH_SPLIT=0 (main's kernels) at V = 32000 (the other V
# compile main's kernels), same call; then the GPU tests (the benchmark with baselines
# was dropped: a failed machine start took 120 s of the budget).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PATCH_SPLIT=0" CH_B="1 16 64 128 192 256" \
  CH_V="32000" CH_REPS="1 2" OUT=$OUT/issue timeout 120 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/issue/chunk.log"
CH_SPECS="default default+SONICSPEC_PATCH_SPLIT=0" CH_B="16 64 256" CH_MIX=penalties \
  CH_V="32000" CH_REPS="1" OUT=$OUT/pen timeout 60 \
  bash bench/experiments/chunk_ab.sh > /dev/null
echo "penalties mix:"; python3 bench/experiments/ab_table.py "$OUT/pen/chunk.log"
OUT=$OUT/tests LIMIT=150 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8
