#!/usr/bin/env bash
# One call (run 152): the stream priorities the device gives, the chunked calls' equality
# check, a same-call A/B of the chunk lanes' priorities (`triton_backend.CHUNK_LANE_PRIORITY`)
# at V = 262144, then the full benchmark with the faster setting at verify B = 256 (the code's
# default is then set to it).   OUT=... bash bench/experiments/chunk_final.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
python3 -c "import torch; print('stream priorities for -8, -1, 0:',
  [torch.cuda.Stream(priority=p).priority for p in (-8, -1, 0)])" 2>&1 | tee "$OUT/final.log"
timeout 150 python3 bench/experiments/chunk_check.py --batch 64 256 --vocab 262144 \
  --specs default 2>&1 | grep chunk | tee -a "$OUT/final.log"
CH_REPS="1 2" CH_B="64 256" CH_V="262144" OUT=$OUT \
  CH_SPECS="default+SONICSPEC_CHUNK_LANE_PRIORITY=0 default" timeout 170 \
  bash bench/experiments/chunk_ab.sh > /dev/null 2>&1
cat "$OUT/chunk.log" >> "$OUT/final.log"
pick=$(python3 - "$OUT/chunk.log" <<'PY'
import re, sys
spec, times = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"== rep \d+ chunks (\S+)", line)
    if m:
        spec = m.group(1)
    m = re.match(r"B=\s*256 .* verify\s+([\d.]+)", line)
    if m and spec:
        times.setdefault(spec, []).append(float(m.group(1)))
mean = {s: sum(v) / len(v) for s, v in times.items() if v}
on, off = mean.get("default", 1e9), mean.get("default+SONICSPEC_CHUNK_LANE_PRIORITY=0", 1e9)
print(1 if on <= off else 0)
PY
)
echo "lane priority for the benchmark: $pick" | tee -a "$OUT/final.log"
SONICSPEC_CHUNK_LANE_PRIORITY=$pick OUT=$OUT/b timeout 260 bash bench/gpu_all.sh bench \
  > "$OUT/bench-run.log" 2>&1
tail -16 "$OUT/bench-run.log" >> "$OUT/final.log"
rm -f "$OUT/chunk.log"
