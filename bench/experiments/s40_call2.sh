#!/usr/bin/env bash
# Session 40, call 2: run 198 had SONICSPEC_PATCH_POS=8 (one patch program a verify request)
# 1.6% faster at verify B = 256, V = 32000 and much slower at B <= 64. Where between does it
# cross, and do smaller history chunks (PATCH_VALUES 512: 64 ids a chunk) or POS 2 / 4 do
# better at large B? Also checks that the carried FlashInfer wheels import and run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
PYTHONPATH=/tmp/site:$PWD CUDA_HOME=/usr/local/cuda timeout 200 python3 - > "$OUT/fi.log" 2>&1 <<'PY' &
import torch, flashinfer.sampling as fs
p = torch.softmax(torch.randn(4, 32000, device="cuda"), -1)
print("flashinfer ok", fs.top_k_top_p_sampling_from_probs(p, 50, 0.9).tolist())
PY
fipid=$!
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PATCH_POS=8 default+SONICSPEC_PATCH_POS=8+SONICSPEC_PATCH_VALUES=512 default+SONICSPEC_PATCH_POS=4 default+SONICSPEC_PATCH_POS=2" \
  CH_B="128 192 256" CH_V="32000 128256 262144" CH_REPS="1 2" OUT=$OUT timeout 400 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/chunk.log"
wait $fipid; tail -3 "$OUT/fi.log"
