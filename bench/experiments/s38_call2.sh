#!/usr/bin/env bash
# (Its knob is not on main: `git apply bench/experiments/s38-probes.diff` first.)
# Session 38, call 2: how much the patch's value gather costs the issue mix's filtered
# rows (SONICSPEC_EXCL_PROBE=1: they exclude their patched ids by the bits alone; wrong
# results, timing only), same call, two repeats.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
CH_SPECS="default default+SONICSPEC_EXCL_PROBE=1" CH_B="64 256" CH_V="32000 128256 262144" \
  CH_REPS="1 2" OUT=$OUT timeout 560 bash bench/experiments/chunk_ab.sh
