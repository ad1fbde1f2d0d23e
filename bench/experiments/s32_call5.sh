#!/usr/bin/env bash
# Session 32, fifth device call (the code with `pre_streams`): the sampler's GPU tests, a
# same-call A/B of the rule against one pre stream (two repeats), the benchmark with baselines
# (run 157 ran the tests first; the A/B now goes first so that gpu_all.sh packs the rest).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$PWD
CH_REPS="1 2" CH_B="64 256" CH_V="262144" OUT=$OUT \
  CH_SPECS="default+SONICSPEC_CHUNK_PRE_STREAMS=0 default" timeout 150 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
LIMIT=200 OUT=$OUT timeout 450 bash bench/gpu_all.sh tests bench > /dev/null 2>&1
