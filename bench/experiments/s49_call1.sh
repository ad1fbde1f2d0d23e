#!/usr/bin/env bash
# Ran as run 208 in session 49, on an H100 (not kept: bench/NOTES-sampler.md): experiments/cluster_probe.py.
# A row's programs launched as one thread-block cluster that meets at barrier.cluster: the
# least exact sampler (draw / own, NC 8 and 16, one to three meetings) against
# onekernel_probe's `one` (ticket) and `two_pdl`, and an exact top-k / top-p sampler in one
# cluster (filt8, filt16) against the sampler's temperature, filters and issue mixes; B 1 /
# 16 / 64 / 256 at V = 32000 and 128256, then B 1 / 16 at V = 262144 (~3-4 min; no
# FlashInfer needed). The check on small shapes runs first and stops the call on a mismatch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 360 python3 bench/experiments/cluster_probe.py 2>&1 | tee "$OUT/cluster-probe.log"
timeout 150 python3 bench/experiments/cluster_probe.py --batch 1 16 --vocab 262144 2>&1 \
  | tail -3 | tee -a "$OUT/cluster-probe.log"
