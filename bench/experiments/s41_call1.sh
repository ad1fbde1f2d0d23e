#!/usr/bin/env bash
# Ran as run 203 in session 46 (not kept: bench/NOTES-sampler.md).
# Prepared in session 40 for the next GPU session (branch exp/patch-kernel; also
# experiments/prepared-patch-kernel.diff, applies on main): where pval is [B, V, K + 1]
# (verify, V <= 65536) the patch runs as a kernel of its own before the thresholds' pre
# kernel, which runs beside it and waits for it only at its end (PRIOR_PATCH), and from
# 1024 rows on the patch kernel splits a request by ids (run 201's gain) instead of rows.
# A/B at V = 32000 (the other V compile main's kernels) against the patch inside the pre
# kernel (SONICSPEC_PATCH_KERNEL=0, main), the patch kernel by rows at every size and split
# at every size (SPLIT_ROWS=0: in a kernel of its own, beside the thresholds, the split's
# small-B cost of run 201 may no longer be on the path); issue mix two repeats, penalties
# mix one; then the GPU tests (~7 min in all).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
S="default default+SONICSPEC_PATCH_KERNEL=0 default+SONICSPEC_PATCH_SPLIT_ROWS=1000000 default+SONICSPEC_PATCH_SPLIT_ROWS=0"
CH_SPECS="$S" CH_B="1 16 64 128 192 256" CH_V="32000" CH_REPS="1 2" OUT=$OUT/issue \
  timeout 230 bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/issue/chunk.log"
CH_SPECS="$S" CH_B="16 64 256" CH_MIX=penalties CH_V="32000" CH_REPS="1" OUT=$OUT/pen \
  timeout 110 bash bench/experiments/chunk_ab.sh > /dev/null
echo "penalties mix:"; python3 bench/experiments/ab_table.py "$OUT/pen/chunk.log"
OUT=$OUT/tests LIMIT=150 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8
