#!/usr/bin/env bash
# Prepared in session 38 for the next GPU session (branch exp/lazy-cand, also
# experiments/prepared-lazy-cand.diff against main): SONICSPEC_LAZY_CAND (default 1 on the
# branch) against 0 (main's kernels), same call, two repeats; then the GPU tests on the
# branch's default (limit 150 s each).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_LAZY_CAND=0" CH_B="1 64 256" CH_V="32000 128256 262144" \
  CH_REPS="1 2" OUT=$OUT timeout 330 bash bench/experiments/chunk_ab.sh
OUT=/tmp/gputests LIMIT=150 timeout 160 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 | tee "$OUT/tests-summary.log"
