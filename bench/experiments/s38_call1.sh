#!/usr/bin/env bash
# Session 38, call 1: where the time goes at V = 32000 (verify 2x FlashInfer missed at B >= 16)
# and at V = 262144 B = 64 (sample floor on the edge): timelines of each one-feature mix.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
for mix in temperature grammar filters penalties issue; do
  echo "== mix $mix" >> "$OUT/timeline.log"
  timeout 150 python3 bench/timeline.py --batch 16 64 256 --vocab 32000 --mix $mix --iters 20 \
    >> "$OUT/timeline.log" 2>&1
done
for mix in temperature filters penalties issue; do
  echo "== mix $mix" >> "$OUT/timeline.log"
  timeout 100 python3 bench/timeline.py --batch 64 --vocab 262144 --mix $mix --iters 20 \
    >> "$OUT/timeline.log" 2>&1
done
grep -v Warning "$OUT/timeline.log" | grep -v _warn_once
