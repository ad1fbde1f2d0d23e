#!/usr/bin/env bash
# Session 36, seventh device call: which half of `_after_prior` costs the read (run 169:
# +22% at tiles of 1024 when first): griddepcontrol.wait alone, launch_dependents alone,
# both after the tile's load.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 300 python3 bench/experiments/gluon_tile_probe.py --iters 40 --shares 0 \
  --rows 256 1280 --vocab 32000 128256 262144 \
  --tri-configs "stats" "stats,prior" "stats,pwait" "stats,plaunch" "stats,plate" \
  "stats,pwait,r40" "stats,prior,r40" \
  --configs "k2,rp" 2>&1 | tee "$OUT/gluon-probe7.log"
