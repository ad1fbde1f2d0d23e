#!/usr/bin/env bash
# Session 39, call 6 (main): verify's patch values as [B, V, K + 1] above V = 65536 too
# (SONICSPEC_PVAL_T=1): its strided load makes the compiler convert each tile to a layout with a
# token row's lanes in one thread (half the shuffles), which run 196 found faster in the
# issue mix at V = 32000. Same-call A/B, issue mix, two repeats.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PVAL_T=1" CH_B="16 64 256" CH_V="128256 262144" \
  CH_REPS="1 2" OUT=$OUT timeout 200 bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/chunk.log"
