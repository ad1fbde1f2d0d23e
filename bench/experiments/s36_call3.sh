#!/usr/bin/env bash
# Session 36, third device call: the Gluon probe's kernel 3 (the tile kernel's common path,
# ballots only for tiles with two in a row) and the tile kernel without PDL / candidates.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 500 python3 bench/experiments/gluon_tile_probe.py --iters 40 \
  --tri-configs nopdl nocand "nocand,nopdl" \
  --configs "k2,rp" "k3,rp" "k3,r56" 2>&1 | tee "$OUT/gluon-probe3.log"
