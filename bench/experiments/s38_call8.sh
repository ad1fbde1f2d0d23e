#!/usr/bin/env bash
# (Its knob is not on main: `git apply bench/experiments/s38-probes.diff` first.)
# Session 38, call 8: what the call would take if the pre kernel cost nothing
# (SONICSPEC_SKIP_PRE_PROBE=1: the captured call reuses the warm-up calls' thresholds and
# patch on the same inputs, so the graph holds no pre kernel), same call; and its timeline.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_SKIP_PRE_PROBE=1" CH_B="1 16 64 256" CH_V="32000" \
  CH_REPS="1 2" OUT=$OUT timeout 200 bash bench/experiments/chunk_ab.sh
CH_SPECS="default default+SONICSPEC_SKIP_PRE_PROBE=1" CH_B="64 256" CH_V="128256 262144" \
  CH_REPS="1" OUT=$OUT timeout 150 bash bench/experiments/chunk_ab.sh
SONICSPEC_SKIP_PRE_PROBE=1 timeout 60 python3 bench/timeline.py --batch 64 256 --vocab 32000 \
  --mix issue --iters 20 2>&1 | grep -v -i warn | tee -a "$OUT/timeline.log"
