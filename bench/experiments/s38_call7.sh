#!/usr/bin/env bash
# Session 38, call 7: the same counters as call 6 for one-feature mixes at verify B = 256,
# V = 128256 (what each feature adds to the tile kernel's instructions) and for the issue
# mix at V = 262144 (verify B = 256, sample B = 64: two chunks, six kernels a call).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
R="barrier long_scoreboard math_pipe_throttle not_selected short_scoreboard wait"
M=smsp__average_warp_latency_per_inst_issued.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
for r in $R; do M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio; done
run() {  # label, skip, count, python args
  local label=$1 skip=$2 count=$3; shift 3
  echo "===== $label" >> "$OUT/ncu.log"
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --cache-control all --metrics $M \
    -k regex:'_pre_kernel|_tile_kernel|_finish_kernel' --launch-skip $skip --launch-count $count \
    python3 bench/ncu_run.py "$@" >> "$OUT/ncu.log" 2>&1
}
run "temperature verify B=256 V=128256" 4 2 --batch 256 --vocab 128256 --mix temperature --op verify
run "grammar verify B=256 V=128256" 4 2 --batch 256 --vocab 128256 --mix grammar --op verify
run "filters verify B=256 V=128256" 6 3 --batch 256 --vocab 128256 --mix filters --op verify
run "penalties verify B=256 V=128256" 6 3 --batch 256 --vocab 128256 --mix penalties --op verify
run "temperature verify B=256 V=32000" 4 2 --batch 256 --vocab 32000 --mix temperature --op verify
run "issue verify B=256 V=262144" 12 6 --batch 256 --vocab 262144 --mix issue --op verify
run "issue sample B=64 V=262144" 12 6 --batch 64 --vocab 262144 --mix issue --op sample
grep -E '=====|_kernel \(|stalled|latency|issue_active|inst_executed|bytes|duration|pct' "$OUT/ncu.log" \
  | sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio//' | awk '{$1=$1};1'
