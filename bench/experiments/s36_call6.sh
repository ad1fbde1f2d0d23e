#!/usr/bin/env bash
# Session 36, sixth device call: which of the tile kernel's steps makes its read at tiles of
# 1024 slower than a plain Triton stats kernel (runs 166-168): `_after_prior` first, the
# greedy rows' argmax branch; the tile kernel itself alongside.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 300 python3 bench/experiments/gluon_tile_probe.py --iters 40 --shares 0 \
  --rows 256 1280 --vocab 32000 128256 262144 \
  --tri-configs "nocand" "stats,temp,flat" "stats,temp,flat,prior" "stats,temp,flat,greedy" \
  "stats,temp,flat,greedy,prior" "stats,greedy" \
  --configs "k2,rp" 2>&1 | tee "$OUT/gluon-probe6.log"
