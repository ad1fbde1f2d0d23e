#!/usr/bin/env bash
# Prepared in session 49 for the next GPU session (not yet run): experiments/cluster_probe.py,
# the least exact sampler with a row's programs launched as one thread-block cluster and
# meeting at barrier.cluster, against onekernel_probe's `one` (ticket) and `two_pdl`, and the
# sampler's temperature and issue mixes, B 1 / 16 / 64 / 256 at V = 32000 and 128256; then
# B 1 / 16 at V = 262144 (~2-3 min in all; no FlashInfer needed).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 300 python3 bench/experiments/cluster_probe.py 2>&1 | tee "$OUT/cluster-probe.log"
timeout 120 python3 bench/experiments/cluster_probe.py --batch 1 16 --vocab 262144 2>&1 \
  | tail -3 | tee -a "$OUT/cluster-probe.log"
