#!/usr/bin/env bash
# (Its knob is not on main: `git apply bench/experiments/thr-early.diff` first.)
# Session 38, call 9: `_thr_part` loading its first sample step with the settings
# (SONICSPEC_THR_EARLY, default 1) against the old order (0), same call, one repeat; then
# the sampler's GPU tests on the new code (limit 150 s each).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_THR_EARLY=0" CH_B="1 16 64" CH_V="32000" CH_REPS="1" \
  OUT=$OUT timeout 70 bash bench/experiments/chunk_ab.sh
CH_SPECS="default default+SONICSPEC_THR_EARLY=0" CH_B="1 64" CH_V="128256 262144" CH_REPS="1" \
  OUT=$OUT timeout 90 bash bench/experiments/chunk_ab.sh
OUT=/tmp/gputests LIMIT=150 timeout 160 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 | tee "$OUT/tests-summary.log"
cat /tmp/gputests/tests-rest.log | tail -5 > "$OUT/tests-rest-tail.log"; grep -h "equal\|ratio\|draws" /tmp/gputests/equality-*.json 2>/dev/null | head -5
