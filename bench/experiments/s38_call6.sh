#!/usr/bin/env bash
# Session 38, call 6: the warp stall reasons (Nsight Compute, cycles a warp spends stalled
# per issued instruction, by reason) of each kernel of the issue mix's verify at B = 256,
# V = 32000 and 128256 (the third eager call's kernels, as in call 4).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
R="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait"
M=smsp__average_warp_latency_per_inst_issued.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum
for r in $R; do M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio; done
for v in 32000 128256; do
  echo "===== issue verify B=256 V=$v" >> "$OUT/ncu.log"
  timeout 250 /usr/local/cuda/bin/ncu --clock-control none --cache-control all --metrics $M \
    -k regex:'_pre_kernel|_tile_kernel|_finish_kernel' --launch-skip 6 --launch-count 3 \
    python3 bench/ncu_run.py --batch 256 --vocab $v --mix issue --op verify >> "$OUT/ncu.log" 2>&1
done
grep -E '=====|_kernel \(|stalled|latency|issue_active|inst_executed|bytes|wavefronts' "$OUT/ncu.log" \
  | sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio//' | awk '{$1=$1};1'
