#!/usr/bin/env bash
# Session 32, first device call: (1) the chunked finish on four warps against eight (same
# call, graph replays, three repeats); (2) PDL-off profiles of SCAN 2 and SCAN 3 with and
# without their rare paths (PROBE 7), one sequence, on a tree with
# experiments/tile-branch-probes.diff and scan3-pair-rows.diff; (3) timelines of the halves' replays.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CH_REPS="1 2 3" CH_SPECS="default default+SONICSPEC_CHUNK_FINISH_WARPS=4" CH_B="64 256" \
  CH_V="262144" OUT=$OUT timeout 300 bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
rm -rf /tmp/s3 && mkdir -p /tmp/s3 && cp -r bench sampler /tmp/s3/ \
  && (cd /tmp/s3 && git apply bench/experiments/tile-branch-probes.diff \
  && git apply bench/experiments/scan3-pair-rows.diff && grep -c _pair_rows sampler/triton_kernels.py) >> "$OUT/scan3prof.log" 2>&1
for cfg in "2 0" "3 0" "2 7" "3 7"; do
  set -- $cfg
  (cd /tmp/s3 && SONICSPEC_TILE_SCAN=$1 SONICSPEC_TILE_PROBE=$2 SONICSPEC_CHUNKS=0 SONICSPEC_PDL=0 \
    timeout 120 python3 bench/sampler.py --device cuda --backend triton --scale 8 --profile \
    --mix issue --batch 64 256 --vocab 262144 2>&1 | grep -E "^(sample|verify)" \
    | sed "s/^/scan $1 probe $2: /" | tee -a "$OUT/scan3prof.log")
done
for fw in 0 4; do
  echo "== timeline chunk finish warps $fw" >> "$OUT/timeline.log"
  SONICSPEC_CHUNK_FINISH_WARPS=$fw timeout 120 python3 bench/timeline.py --batch 64 256 \
    --vocab 262144 >> "$OUT/timeline.log" 2>&1
done
