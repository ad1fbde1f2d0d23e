#!/usr/bin/env bash
# Session 33, first device call: same-call A/B of SCAN 4 (a rare tile's rows with two or more
# tokens above the threshold left to the finish, `_defer_store` / `_deferred`) against main's
# SCAN 1 / 2, and SCAN 4 with the sample finish capped at 128 registers (graph replays, two
# repeats).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_REPS="1 2" CH_SPECS="default default+SONICSPEC_TILE_SCAN=4 default+SONICSPEC_TILE_SCAN=4+SONICSPEC_FINISH_MAXNREG=128" \
  CH_B="1 64 256" CH_V="32000 128256 262144" OUT=$OUT timeout 520 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
