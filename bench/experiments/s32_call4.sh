#!/usr/bin/env bash
# Session 32, fourth device call: each chunk's pre kernel on its own stream
# (SONICSPEC_CHUNK_PRE_STREAMS=1): equality of chunked calls, same-call A/B, timeline.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
SONICSPEC_CHUNK_PRE_STREAMS=1 timeout 150 python3 bench/experiments/chunk_check.py --batch 64 256 \
  --vocab 262144 --specs default 2>&1 | tail -6 > "$OUT/check.log"
CH_REPS="1 2 3" CH_B="64 256" CH_V="262144" OUT=$OUT \
  CH_SPECS="default default+SONICSPEC_CHUNK_PRE_STREAMS=1" timeout 240 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
SONICSPEC_CHUNK_PRE_STREAMS=1 timeout 90 python3 bench/timeline.py --batch 64 256 \
  --vocab 262144 2>&1 | grep -v -i warn > "$OUT/timeline.log"
