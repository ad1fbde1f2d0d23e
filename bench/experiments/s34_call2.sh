#!/usr/bin/env bash
# Session 34, second device call: verify's finish register cap (SONICSPEC_VERIFY_FINISH_MAXNREG,
# default 80: three programs of 8 warps an SM) at 64 (four) and 48 (five: a chunk's 640 rows
# at verify B = 256 in one wave), same-call graph replays, two repeats.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_REPS="1 2" CH_B="1 64 256" CH_V="32000 128256 262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_VERIFY_FINISH_MAXNREG=64 default+SONICSPEC_VERIFY_FINISH_MAXNREG=48" \
  timeout 420 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
for c in 80 48; do
  echo "== SONICSPEC_VERIFY_FINISH_MAXNREG=$c" >> "$OUT/timeline.log"
  SONICSPEC_VERIFY_FINISH_MAXNREG=$c timeout 60 python3 bench/timeline.py --batch 256 \
    --vocab 128256 262144 --iters 20 >> "$OUT/timeline.log" 2>&1
done
