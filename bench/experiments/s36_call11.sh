#!/usr/bin/env bash
# Session 36, eleventh device call: timelines (bench/timeline.py) of the tile kernel's trigger
# in every program against the grid's last 4096 (experiments/tile-trigger-last.diff, applied
# here), issue and temperature mixes: why run 171's gain of the tile kernel alone vanished
# in the sampler.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
git apply bench/experiments/tile-trigger-last.diff 2>/dev/null \
  || patch -p1 < bench/experiments/tile-trigger-last.diff
grep -c TILE_TRIGGER_LAST sampler/triton_kernels.py
for last in 0 4096; do
  for mix in issue temperature; do
    echo "== SONICSPEC_TILE_TRIGGER_LAST=$last mix $mix" >> "$OUT/timeline.log"
    SONICSPEC_TILE_TRIGGER_LAST=$last timeout 100 python3 bench/timeline.py --batch 64 256 \
      --vocab 32000 128256 --mix $mix --iters 20 >> "$OUT/timeline.log" 2>&1
  done
done
cat "$OUT/timeline.log"
