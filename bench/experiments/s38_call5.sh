#!/usr/bin/env bash
# (Its knob is not on main: `git apply bench/experiments/s38-probes.diff` first.)
# Session 38, call 5: verify's pre kernel at 124 registers runs at 25% occupancy and is
# latency-bound (ncu, call 4). Its register cap (SONICSPEC_VERIFY_PRE_MAXNREG) and 8 warps at
# V = 32000, then the caps at V = 128256 / 262144; issue mix, same call.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_VERIFY_PRE_MAXNREG=96 default+SONICSPEC_VERIFY_PRE_MAXNREG=80 default+SONICSPEC_VERIFY_PRE_MAXNREG=64 default+SONICSPEC_PRE_WARPS=8" \
  CH_B="16 64 256" CH_V="32000" CH_REPS="1 2" OUT=$OUT timeout 330 bash bench/experiments/chunk_ab.sh
CH_SPECS="default default+SONICSPEC_VERIFY_PRE_MAXNREG=80 default+SONICSPEC_VERIFY_PRE_MAXNREG=64" \
  CH_B="64 256" CH_V="128256 262144" CH_REPS="1" OUT=$OUT timeout 200 bash bench/experiments/chunk_ab.sh
