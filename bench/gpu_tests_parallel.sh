#!/usr/bin/env bash
# The Triton sampler's GPU tests as parallel pytest processes on one GPU (Triton compiles on
# the host, so the grid's compilations overlap): one process per vocabulary of the grid and
# one for the other tests. Logs and per-vocab equality reports go to $OUT, and merged
# (bench/gpu_collect.py) into tests.log and equality.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}:$PWD PYTHONUNBUFFERED=1
F=tests/test_sampler_triton_gpu.py
pids=()
for v in 111 32000 49152 128256 151936 262144; do
  SONICSPEC_GPU_REPORT=$OUT/equality-$v.json timeout "${LIMIT:-400}" python3 -m pytest -q -m gpu \
    "$F::test_grid_tokens_equal_torch[$v-dtype0]" "$F::test_grid_tokens_equal_torch[$v-dtype1]" \
    > "$OUT/tests-$v.log" 2>&1 &
  pids+=($!)
done
timeout "${LIMIT:-400}" python3 -m pytest -q -m gpu "$F" -k "not grid" > "$OUT/tests-rest.log" 2>&1 &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
# tests.log and equality.json: one record each (what the notes keep under bench/results/)
python3 bench/gpu_collect.py "$OUT" > "$OUT/equality.txt"
for f in "$OUT"/tests-*.log; do echo "$(basename "$f"): $(tail -1 "$f")"; done
echo "equality: $(tail -1 "$OUT/equality.txt")"
