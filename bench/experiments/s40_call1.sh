#!/usr/bin/env bash
# Prepared in session 39 for the next GPU session (main, existing knobs only): the patch by
# request instead of by row at large B. Run 194 found each patch program (one row, POS = 1)
# waiting ~18 us on its 512 random gathers; a verify request's K + 1 rows gather the same ids
# in K + 1 programs and store their values into one sector ([B, V, K + 1] at V <= 65536) from
# K + 1 programs. Runs 63-64 (long ago) had POS 8 slower at B <= 64 (its history in chunks, run
# one after another: 128 ids a chunk at the default PATCH_VALUES of 1024) and 2% faster at
# B = 256; POS 4 with PATCH_VALUES=2048 keeps one chunk of 512 (206 registers, no spills; POS 8
# with 4096 needs 255 and spills: not tried).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_PATCH_POS=8 default+SONICSPEC_PATCH_POS=4+SONICSPEC_PATCH_VALUES=2048 default+SONICSPEC_PATCH_POS=2+SONICSPEC_PATCH_VALUES=2048" \
  CH_B="16 64 256" CH_V="32000 128256 262144" CH_REPS="1 2" OUT=$OUT timeout 420 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 bench/experiments/ab_table.py "$OUT/chunk.log"
