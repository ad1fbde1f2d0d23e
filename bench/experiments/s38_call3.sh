#!/usr/bin/env bash
# (Its knob is not on main: `git apply bench/experiments/s38-probes.diff` first.)
# Session 38, call 3: the patch's gathers in id order (SONICSPEC_SORT_HIST=1: each request's
# history ids sorted at batch construction), issue and penalties mixes, same call.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
for mix in issue penalties; do
  CH_MIX=$mix CH_SPECS="default default+SONICSPEC_SORT_HIST=1" CH_B="64 256" \
    CH_V="32000 128256 262144" CH_REPS="1 2" OUT=$OUT timeout 280 bash bench/experiments/chunk_ab.sh
done
timeout 60 python3 bench/timeline.py --batch 256 --vocab 32000 --mix penalties --iters 20 2>&1 | grep -v Warn | tee -a $OUT/timeline.log
SONICSPEC_SORT_HIST=1 timeout 60 python3 bench/timeline.py --batch 256 --vocab 32000 --mix penalties --iters 20 2>&1 | grep -v Warn | tee -a $OUT/timeline.log
