#!/usr/bin/env bash
# Session 36, eleventh device call: timelines (bench/timeline.py) of the tile kernel's trigger
# in every program against the grid's last 4096, issue and temperature mixes: why run 171's
# gain of the tile kernel alone vanished in the sampler. (Run with run 171's patch applied;
# main now has the mechanism, `triton_backend.tile_trigger_last`, whose knob sets the count
# at every tile size, so the script runs the same experiment without a patch.)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
for last in 0 4096; do
  for mix in issue temperature; do
    echo "== SONICSPEC_TILE_TRIGGER_LAST=$last mix $mix" >> "$OUT/timeline.log"
    SONICSPEC_TILE_TRIGGER_LAST=$last timeout 100 python3 bench/timeline.py --batch 64 256 \
      --vocab 32000 128256 --mix $mix --iters 20 >> "$OUT/timeline.log" 2>&1
  done
done
cat "$OUT/timeline.log"
