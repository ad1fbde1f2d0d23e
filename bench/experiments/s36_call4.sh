#!/usr/bin/env bash
# Session 36, fourth device call: why the tile kernel's read alone at tiles of 1024 is ~17%
# slower than the Gluon probe's (run 166): register caps (residency), and a plain Triton
# stats kernel with the tile kernel's steps added one by one.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 500 python3 bench/experiments/gluon_tile_probe.py --iters 40 --shares 0 \
  --rows 256 1280 --vocab 32000 128256 262144 \
  --tri-configs "nocand" "nocand,r64" "nocand,r80" "nocand,r40" "stats" "stats,r56" \
  "stats,temp" "stats,flat" "stats,temp,flat" \
  --configs "k2,rp" "k2,r48" "k2" 2>&1 | tee "$OUT/gluon-probe4.log"
