#!/usr/bin/env bash
# Session 36, second device call: the Gluon probe's second kernel (the sampler's layout,
# ballots 4 tokens a thread) against the tile kernel, graph replays, every config checked.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 500 python3 bench/experiments/gluon_tile_probe.py --iters 40 \
  --configs "k2,rp" "k2,r56" "k2" "k2,p8,rp" "k2,p8" 2>&1 | tee "$OUT/gluon-probe2.log"
