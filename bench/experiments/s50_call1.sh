#!/usr/bin/env bash
# Session 50, device call 1: run 210's record (its A/B needs `experiments/resolve-copies.diff`
# applied). The warp-copies probe, then the finish's resolve in copies
# (SONICSPEC_RESOLVE_COPIES=1) against main's 1-D resolve in the same call, V = 32000 and
# 128256, two alternating repeats each; then the GPU fuzz with the copies on (triton against
# torch). A later A/B of a knob should call bench/ab.sh (AB_CFGS="SONICSPEC_...=1", JSON per
# run under $OUT/json) instead of this loop and its JSON print.
#   OUT=$OUT bash bench/experiments/s50_call1.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/ab.log"
python3 bench/experiments/warp_copy_probe.py --rows 1 16 80 256 1280 2>&1 | tee "$OUT/probe.log"
for rep in 1 2; do
  for c in 0 1; do
    echo "== rep $rep RESOLVE_COPIES=$c" | tee -a "$OUT/ab.log"
    SONICSPEC_RESOLVE_COPIES=$c python3 bench/sampler.py --device cuda --backend triton --scale 8 \
      --iters 30 --batch ${AB_B:-1 16 64 256} --vocab ${AB_V:-32000 128256} --out /tmp/abjson \
      > /tmp/ab.txt 2>&1; tail -3 /tmp/ab.txt
    python3 -c "import json,glob,os; f=max(glob.glob('/tmp/abjson/*.json'),key=os.path.getmtime); [print(r['B'],r['V'],'sample %.2f verify %.2f'%(r['sample_us'],r['verify_us'])) for r in json.load(open(f))['rows']]" | tee -a "$OUT/ab.log"
  done
done
SONICSPEC_RESOLVE_COPIES=1 timeout ${FUZZ_S:-150} python3 tests/fuzz_sampler.py --device cuda \
  --minutes 2 2>&1 | tail -20 | tee "$OUT/fuzz.log"
