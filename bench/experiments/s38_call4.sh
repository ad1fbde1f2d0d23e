#!/usr/bin/env bash
# Session 38, call 4: hardware counters (Nsight Compute) of each kernel of the issue mix's
# verify at B = 256, V = 32000 and 128256, and of the penalties mix's pre kernel, the third
# eager call of each (the first two compile and warm up). ncu serialises the kernels (no PDL
# overlap) and flushes the caches before each kernel, as the benchmark evicts the L2.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" | tee "$OUT/ncu.log"
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
run() {  # label, python args
  local label=$1; shift
  echo "===== $label" >> "$OUT/ncu.log"
  timeout 200 "$NCU" --clock-control none --cache-control all $SECS \
    -k regex:'_pre_kernel|_tile_kernel|_finish_kernel' --launch-skip 6 --launch-count 3 \
    python3 bench/ncu_run.py "$@" >> "$OUT/ncu.log" 2>&1
  echo "rc $?" >> "$OUT/ncu.log"
}
run "issue verify B=256 V=32000" --batch 256 --vocab 32000 --mix issue --op verify
run "penalties verify B=256 V=32000" --batch 256 --vocab 32000 --mix penalties --op verify
run "issue verify B=256 V=128256" --batch 256 --vocab 128256 --mix issue --op verify
grep -E '=====|rc |Kernel|_kernel|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Compute \(SM\)|Issued Ipc|No Eligible|Warp Cycles Per Issued|One or More' "$OUT/ncu.log" | head -150
