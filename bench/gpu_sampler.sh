#!/usr/bin/env bash
# One device call's worth of sampler work on the GPU machine (results under $OUT):
#   bash bench/gpu_sampler.sh [smoke] [bench] [flat] [profile] [sweep] [probe] [mixes] [tests]
# (sweep: the benchmark workload under the env knobs in $SWEEP, default SONICSPEC_PDL /
# C / TILE_MAXNREG / TILE_WARPS / BLOCK_V, one config per word, settings joined by commas;
# sizes $SWEEP_B and $SWEEP_V, default B 1 64 256 and V 32000 262144; extra arguments of
# bench/sampler.py in $SWEEP_ARGS, e.g. --mix temperature)
# Needs the FlashInfer wheels in .whl/ (carried) for the baselines.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}:$PWD CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
for stage in "$@"; do
  case $stage in
    smoke) python3 bench/sampler_smoke.py 2>&1 | tee "$OUT/smoke.log" ;;
    bench) python3 bench/sampler.py --device cuda --backend triton --baselines --scale 8 \
             --batch 1 16 64 256 --vocab 32000 128256 262144 --out "$OUT" 2>"$OUT/bench8.err" \
             | tee "$OUT/bench8.log" ;;
    flat) python3 bench/sampler.py --device cuda --backend triton --scale 3 \
             --batch 1 16 64 256 --vocab 32000 128256 262144 --out "$OUT" 2>"$OUT/bench3.err" \
             | tee "$OUT/bench3.log" ;;
    profile) python3 bench/sampler.py --device cuda --backend triton --scale 8 --profile \
               --batch 1 64 256 --vocab 32000 262144 2>&1 | tee "$OUT/profile.log" ;;
    sweep) for cfg in "" ${SWEEP:-SONICSPEC_PDL=0 SONICSPEC_C=16 SONICSPEC_TILE_MAXNREG=0 \
                      SONICSPEC_TILE_WARPS=8 SONICSPEC_BLOCK_V=4096}; do
             echo "config: ${cfg:-default}" | tee -a "$OUT/sweep.log"
             env ${cfg//,/ } python3 bench/sampler.py --device cuda --backend triton --scale 8 \
               --iters 30 --batch ${SWEEP_B:-1 64 256} --vocab ${SWEEP_V:-32000 262144} \
               ${SWEEP_ARGS:-} --out /tmp/sweep 2>/dev/null | sed -n '2,14p' \
               | tee -a "$OUT/sweep.log"
           done ;;
    probe) python3 bench/sampler_probe.py "${PROBE_PARTS:-tile}" 2>&1 | tee "$OUT/probe.log" ;;
    mixes) for mix in issue temperature filters penalties grammar; do  # each feature's cost
             SONICSPEC_PDL=0 python3 bench/sampler.py --device cuda --backend triton --scale 8 \
               --profile --mix $mix --batch 1 64 256 --vocab 32000 262144 2>/dev/null \
               | sed "s/^/$mix: /" | tee -a "$OUT/mixes.log"
           done ;;
    tests) python3 -m pytest -q -m gpu tests/test_sampler_triton_gpu.py -x 2>&1 \
             | tee "$OUT/tests.log" ;;
  esac
done
