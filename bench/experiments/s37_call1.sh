#!/usr/bin/env bash
# Prepared for the next session (not yet run): which feature hides `tile_trigger_last`'s gain
# in the issue mix (runs 174-175: rows of temperature alone gain 15% at verify B = 256,
# V = 128256, the issue mix nothing). Timelines of each one-feature mix, the last 4096
# programs triggering (default) against every program.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
for mix in filters penalties grammar issue; do
  for last in 4096 0; do
    echo "== SONICSPEC_TILE_TRIGGER_LAST=$last mix $mix" >> "$OUT/timeline.log"
    SONICSPEC_TILE_TRIGGER_LAST=$last timeout 100 python3 bench/timeline.py --batch 256 \
      --vocab 128256 --mix $mix --iters 20 >> "$OUT/timeline.log" 2>&1
  done
done
grep -v Warning "$OUT/timeline.log" | grep -v _warn_once
