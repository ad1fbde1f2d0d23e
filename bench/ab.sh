#!/usr/bin/env bash
# Same-call A/B of the working tree against the kernels in ab_main/ (the baseline's copies of
# the changed sampler files, e.g. `git show main:sampler/triton_kernels.py >
# ab_main/triton_kernels.py`; ignored by git: carry it): graph-replay medians (two repeats,
# issue and penalties mixes by default) and PDL-off profiles (first repeat).
#   OUT=... AB_MIXES="issue penalties" AB_B="1 64 256" AB_V="32000 262144" \
#     AB_CFGS="SONICSPEC_X=1,SONICSPEC_Y=2 ..." bash bench/ab.sh   (main + each config)
# AB_REPS="1" for one repeat (default "1 2").
# Each run's JSON (with the rows per path) goes to $OUT/json/REP-MIX-SIDE/.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
rm -rf /tmp/abmain && mkdir -p /tmp/abmain && cp -r bench sampler /tmp/abmain/ \
  && cp ab_main/*.py /tmp/abmain/sampler/
for rep in ${AB_REPS:-1 2}; do
  for mix in ${AB_MIXES:-issue penalties}; do
    for side in main ${AB_CFGS:-default}; do
      root=$PWD; [ $side = main ] && root=/tmp/abmain
      cfg=""; [ $side != main ] && [ $side != default ] && cfg=${side//,/ }
      echo "== rep $rep mix $mix side $side" | tee -a "$OUT/ab.log"
      (cd $root && env $cfg python3 bench/sampler.py --device cuda --backend triton --scale 8 --iters 30 \
        --mix $mix --batch ${AB_B:-1 64 256} --vocab ${AB_V:-32000 262144} \
        --out "$OUT/json/$rep-$mix-${side//[=,]/_}" \
        2>/dev/null | sed -n '2,14p' | tee -a "$OUT/ab.log")
      if [ $rep = 1 ]; then
        (cd $root && env $cfg SONICSPEC_PDL=0 python3 bench/sampler.py --device cuda --backend triton \
          --scale 8 --profile --mix $mix --batch ${AB_B:-1 64 256} --vocab ${AB_V:-32000 262144} \
          2>/dev/null | sed "s/^/$side $mix: /" | tee -a "$OUT/abprof.log")
      fi
    done
  done
done
