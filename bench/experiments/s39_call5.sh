#!/usr/bin/env bash
# Session 39, call 5 (branch exp/patch-skip): verify's patch values at V <= 65536 ([B, V, K + 1])
# by an inline-PTX load in the tile's layout (SONICSPEC_PV_ASM), which removes the conversion of
# every tile through shared memory; with and without the patch program's PATCH_SKIP and
# TDIV_PATCH; against main's kernels and against pval as [N, V] (PVAL_T=0). V = 32000, issue
# mix, three repeats; the penalties mix once; then the GPU tests on the branch's default.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
P0="SONICSPEC_PATCH_SKIP=0+SONICSPEC_TDIV_PATCH=0"
CH_SPECS="default+SONICSPEC_PV_ASM=0+$P0 default+$P0 default default+SONICSPEC_PVAL_T=0+$P0" \
  CH_B="1 16 64 256" CH_V="32000" CH_REPS="1 2 3" OUT=$OUT timeout 300 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/chunk.log" | tee "$OUT/table.log"
mkdir -p /tmp/pen && CH_MIX=penalties CH_SPECS="default+SONICSPEC_PV_ASM=0+$P0 default+$P0" \
  CH_B="16 64 256" CH_V="32000" CH_REPS="1" OUT=/tmp/pen timeout 100 \
  bash bench/experiments/chunk_ab.sh > /dev/null
echo "penalties mix:" | tee -a "$OUT/table.log"
python3 bench/experiments/ab_table.py /tmp/pen/chunk.log | tee -a "$OUT/table.log"
OUT=/tmp/gputests LIMIT=150 timeout 160 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 | tee "$OUT/tests-summary.log"
