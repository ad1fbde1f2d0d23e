#!/usr/bin/env bash
# Session 36, first device call: the Gluon tile probe (bench/experiments/gluon_tile_probe.py)
# against the sampler's tile kernel, graph replays with the L2 evicted, every config checked.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout 500 python3 bench/experiments/gluon_tile_probe.py --iters 40 \
  --configs "" "v" "p8" "p8,v" "p8,r48" "r56" 2>&1 | tee "$OUT/gluon-probe.log"
