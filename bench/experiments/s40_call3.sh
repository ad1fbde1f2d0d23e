#!/usr/bin/env bash
# Session 40, call 3 (branch exp/patch-split): the patch split by ids instead of rows
# (`triton_backend.PATCH_SPLIT`, default 1 on the branch) against the patch by rows
# (SONICSPEC_PATCH_SPLIT=0, main's kernels), same call, two repeats: the issue mix at every
# benchmark size, the penalties mix at B = 16 / 256; then the GPU tests on the split.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PATCH_SPLIT=0" CH_B="1 16 64 256" \
  CH_V="32000 128256 262144" CH_REPS="1 2" OUT=$OUT/issue timeout 200 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/issue/chunk.log"
CH_SPECS="default default+SONICSPEC_PATCH_SPLIT=0" CH_B="16 256" CH_MIX=penalties \
  CH_V="32000 262144" CH_REPS="1 2" OUT=$OUT/pen timeout 100 \
  bash bench/experiments/chunk_ab.sh > /dev/null
echo "penalties mix:"; python3 bench/experiments/ab_table.py "$OUT/pen/chunk.log"
OUT=$OUT/tests LIMIT=170 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8
python3 - <<'PY'
import json, glob, os
s = t = 0
for f in glob.glob(os.environ.get("OUT", "/tmp/out") + "/tests/equality-*.json"):
    d = json.load(open(f))
    s += sum(v[0] for v in d["counts"].values()); t += sum(v[1] for v in d["counts"].values())
    for x in d["differences"]:
        print(" diff", x.get("where"), x.get("accept_gap_rel", x.get("gap_rel")))
print("equal", s, "of", t)
PY
