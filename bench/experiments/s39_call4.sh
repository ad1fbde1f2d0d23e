#!/usr/bin/env bash
# Session 39, call 4 (branch exp/patch-skip): three small changes, each with its knob, in one
# same-call A/B (issue mix, two repeats): all on (the branch's default); GW_EARLY=0 (the
# tile kernel's grammar words after the wait, as main); PATCH_SKIP=0 + TDIV_PATCH=0 (the patch
# program as main); all three off (main's kernels). Then the GPU tests on the default.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OFF="SONICSPEC_PATCH_SKIP=0+SONICSPEC_TDIV_PATCH=0"
CH_SPECS="default default+SONICSPEC_GW_EARLY=0 default+$OFF default+$OFF+SONICSPEC_GW_EARLY=0" \
  CH_B="1 16 64 256" CH_V="32000 128256 262144" CH_REPS="1 2" OUT=$OUT timeout 420 \
  bash bench/experiments/chunk_ab.sh > /dev/null
python3 - "$OUT/chunk.log" <<'PY'
import collections, re, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
spec = None
for line in open(sys.argv[1]):
    if line.startswith("=="):
        spec = line.split("chunks ", 1)[1].strip().replace("default+", "").replace("default", "all on")
        continue
    m = re.match(r"B=\s*(\d+) V=\s*(\d+) sample\s+([\d.]+) verify\s+([\d.]+)", line)
    if m:
        d[(int(m[1]), int(m[2]))][spec].append((float(m[3]), float(m[4])))
specs = list(next(iter(d.values())).keys())
print("spec order:", specs)
for key, by in sorted(d.items()):
    print(f"B={key[0]:>3} V={key[1]:>6} sample " + " | ".join(
        "/".join(f"{s:.1f}" for s, _ in by[k]) for k in specs) + "   verify " + " | ".join(
        "/".join(f"{v:.1f}" for _, v in by[k]) for k in specs))
PY
OUT=/tmp/gputests LIMIT=150 timeout 160 bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 | tee "$OUT/tests-summary.log"
