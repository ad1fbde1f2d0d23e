#!/usr/bin/env bash
# Run 177: is the tile kernel slower as a PDL dependent of the pre kernel? Run 176 showed it
# 213-224 us (verify B = 256, V = 128256) in every mix with a pre kernel, 161-165 without.
# Timelines with the tile kernel launched without PDL (SONICSPEC_PDL_OFF=_tile_kernel).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
tl() {  # label, env..., -- timeline args
  echo "== $*" >> "$OUT/timeline.log"
  env "$@" >> "$OUT/timeline.log" 2>&1
}
for mix in filters issue; do
  tl "SONICSPEC_PDL_OFF=_tile_kernel" timeout 100 python3 bench/timeline.py --batch 256 --vocab 128256 --mix $mix --iters 20
done
tl "SONICSPEC_PDL_OFF=_tile_kernel" "SONICSPEC_TILE_TRIGGER_LAST=0" timeout 100 python3 bench/timeline.py --batch 256 --vocab 128256 --mix issue --iters 20
for pdl in "" _tile_kernel; do
  tl "SONICSPEC_PDL_OFF=$pdl" timeout 150 python3 bench/timeline.py --batch 64 256 --vocab 32000 262144 --mix issue --iters 20
done
grep -v Warning "$OUT/timeline.log" | grep -v _warn_once
