#!/usr/bin/env bash
# Session 32, second device call: the sampler's GPU tests on HEAD, then same-call A/Bs:
# verify's finish capped at 64 registers (four programs of 8 warps an SM) against 80, and
# sample B = 64 in chunks of 48 + 16 against halves (graph replays, two repeats).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
LIMIT=230 OUT=$OUT bash bench/gpu_all.sh tests > /dev/null 2>&1
CH_REPS="1 2" CH_SPECS="default default+SONICSPEC_VERIFY_FINISH_MAXNREG=64" CH_B="1 64 256" \
  CH_V="32000 262144" OUT=$OUT timeout 240 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
echo "== split" >> "$OUT/chunk.log"
CH_REPS="1 2" CH_SPECS="default 48" CH_B="64" CH_V="262144" OUT=$OUT timeout 90 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
