#!/usr/bin/env bash
# The differential fuzz (tests/fuzz_sampler.py: the Triton backend against the torch backend)
# on the GPU machine, in parallel: one process per configuration below, each from its own
# seed range, MINUTES minutes each (a case costs ~18 s there, most of it compilation, so
# one process gives only ~13 cases in 4 minutes: run 209). The logs are joined into
# $OUT/fuzz-gpu.log (the device tool brings back few files). SET=small (default): batches of
# 1-8 requests over the script's GPU vocabularies (no chunk settings: on the GPU a chunk
# holds 16 requests at least, so run 216's CHUNKS=3,1 / 2,2 / 1,3 ran as one chunk);
# SET=large: up to 64 requests over vocabularies above 131072 (the default two halves,
# their pre kernels' own streams from 128 rows a chunk) and forced chunks at smaller ones.
# EXTRA: arguments added to every process (e.g. --ulp-groups).
#   OUT=$OUT MINUTES=6 [SET=large] [EXTRA=--ulp-groups] bash bench/gpu_fuzz.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
WORK=$(mktemp -d /tmp/gpufuzz.XXXX)
START=${START:-20000}
# seed offset | environment | extra arguments
if [ "${SET:-small}" = large ]; then
  BIG="--rows 64 --vocabs 131073 151936 200003 262144"
  CONFIGS=(
    "0||$BIG"
    "1000||$BIG"
    "2000||$BIG"
    "3000||$BIG --cmax 32"
    "4000|SONICSPEC_CHUNK_PRE_STREAMS=1|$BIG"
    "5000|SONICSPEC_CHUNK_PRE_STREAMS=0|$BIG"
    "6000|SONICSPEC_CHUNKS=16|$BIG"
    "7000|SONICSPEC_CHUNKS=32,16|$BIG"
    "8000|SONICSPEC_PDL=0|$BIG"
    "9000|SONICSPEC_CHUNKS=16|--rows 64 --vocabs 32000 50257 128256"
    "10000|SONICSPEC_CHUNKS=48,16|--rows 64 --vocabs 1000 32000 128256 --cmax 16"
    "11000||--rows 64 --vocabs 111 32000 50257 128256"
  )
else CONFIGS=(
  "0||"
  "1000||"
  "2000||--cmax 16"
  "3000||--cmax 8"
  "4000||"
  "5000||--cmax 32"
  "6000|SONICSPEC_TILE_SCAN=0|"
  "7000|SONICSPEC_TILE_SCAN=2|--cmax 8"
  "8000|SONICSPEC_PDL=0|"
  "9000|SONICSPEC_THR_ONE_STEP=0|"
  "10000|SONICSPEC_FINISH_EARLY=0|"
  "11000|SONICSPEC_TILE_SCAN=1|--cmax 4"
)
fi
nvidia-smi --query-gpu=name --format=csv,noheader > "$WORK/gpu.txt"
i=0
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r off envs extra <<< "$cfg"
  seed=$((START + off))
  log=$(printf '%s/fuzz-%02d.log' "$WORK" "$i")  # (two digits: joined in the configs' order)
  echo "# seeds from $seed, env: ${envs:-default}, args: ${extra:-none} ${EXTRA:-}" > "$log"
  env $envs timeout $(( ${MINUTES:-6} * 60 + 120 )) python3 tests/fuzz_sampler.py \
    --device cuda --minutes "${MINUTES:-6}" --start "$seed" $extra ${EXTRA:-} >> "$log" 2>&1 &
  i=$((i + 1))
done
wait
{
  echo "# $(cat "$WORK/gpu.txt"), set ${SET:-small}, $i processes, ${MINUTES:-6} minutes each"
  for f in "$WORK"/fuzz-*.log; do cat "$f"; echo; done
  total=$(grep -c '^case ' "$WORK"/fuzz-*.log | awk -F: '{s += $2} END {print s}')
  bad=$(grep -c 'DIFFERS' "$WORK"/fuzz-*.log | awk -F: '{s += $2} END {print s}')
  echo "# all processes: $total cases, $bad differ"
} > "$OUT/fuzz-gpu.log"
tail -1 "$OUT/fuzz-gpu.log"
grep -h 'cases,' "$WORK"/fuzz-*.log
