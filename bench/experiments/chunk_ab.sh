#!/usr/bin/env bash
# Same-call A/B of request chunks (`triton_backend.CHUNKS`): graph-replay medians of the
# issue mix for each SONICSPEC_CHUNKS spec ("0": one launch sequence; "default": the backend's
# rule; "128+SONICSPEC_X=1+...": with other knobs), CH_REPS repeats.
#   OUT=... CH_SPECS="0 default 64" CH_B="64 256" CH_V="128256 262144" bash bench/experiments/chunk_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
for rep in ${CH_REPS:-1 2}; do
  for spec in ${CH_SPECS:-0 default}; do
    echo "== rep $rep chunks $spec" | tee -a "$OUT/chunk.log"
    extra=""; [[ $spec == *+* ]] && extra=${spec#*+}  # "128+SONICSPEC_X=1": other knobs
    chunks=${spec%%+*}; [ "$chunks" = default ] && chunks=""  # (default: the backend's rule)
    env ${chunks:+SONICSPEC_CHUNKS=$chunks} ${extra//+/ } python3 bench/sampler.py --device cuda --backend triton --scale 8 \
      --iters 30 --mix ${CH_MIX:-issue} --batch ${CH_B:-64 256} --vocab ${CH_V:-128256 262144} \
      --out "/tmp/chunkjson" > /dev/null 2>&1
    python3 -c "import json, glob
for r in json.load(open(glob.glob('/tmp/chunkjson/*.json')[0]))['rows']:
    print(f\"B={r['B']:>4} V={r['V']:>7} sample {r['sample_us']:7.1f} verify {r['verify_us']:7.1f}\")" \
      | tee -a "$OUT/chunk.log"
    rm -rf /tmp/chunkjson
  done
done
