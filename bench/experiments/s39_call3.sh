#!/usr/bin/env bash
# Session 39, call 3: Nsight Compute's warp-stall sampling per SASS instruction (the source
# page) of the pre kernel (penalties mix and issue mix) and the tile kernel (issue mix) at
# verify B = 256, V = 32000: which instructions the warps wait at.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
"$NCU" --version | tail -1 | tee "$OUT/src.log"
one() {  # label, kernel, skip, python args
  local label=$1 kern=$2 skip=$3; shift 3
  echo "===== $label" | tee -a "$OUT/src.log"
  rm -f /tmp/r.ncu-rep
  timeout 150 "$NCU" --clock-control none --cache-control all --import-source no \
    --section SourceCounters --section WarpStateStats --section LaunchStats \
    -k regex:"$kern" --launch-skip "$skip" --launch-count 1 -o /tmp/r \
    python3 bench/ncu_run.py "$@" > /tmp/ncu_run.log 2>&1 || tail -5 /tmp/ncu_run.log
  "$NCU" -i /tmp/r.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>/tmp/src.err \
    || { cat /tmp/src.err | head -5; "$NCU" -i /tmp/r.ncu-rep --page source --csv > /tmp/src.csv; }
  python3 bench/experiments/ncu_source_top.py /tmp/src.csv >> "$OUT/src.log" 2>&1
  "$NCU" -i /tmp/r.ncu-rep --page details --csv 2>/dev/null | grep -E "Duration|Registers|Warp Cycles Per Issued|Stall" | head -30 >> "$OUT/src.log"
}
one "pre, penalties, verify B=256 V=32000" _pre_kernel 2 --batch 256 --vocab 32000 --mix penalties --op verify
one "pre, issue, verify B=256 V=32000" _pre_kernel 2 --batch 256 --vocab 32000 --mix issue --op verify
one "tile, issue, verify B=256 V=32000" _tile_kernel 2 --batch 256 --vocab 32000 --mix issue --op verify
one "tile, issue, verify B=256 V=128256" _tile_kernel 2 --batch 256 --vocab 128256 --mix issue --op verify
head -c 60000 "$OUT/src.log" | tail -c 12000
