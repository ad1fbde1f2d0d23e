#!/usr/bin/env bash
# One device call for the sampler: the GPU tests (parallel, LIMIT seconds each) when "tests"
# is named, then the stages of gpu_sampler.sh. The device tool brings back at most 8 files
# from $OUT, so everything is written to a work folder and packed into one archive; the
# benchmark table and the test summary also come back as plain files.
#   OUT=... bash bench/gpu_all.sh [tests] [smoke] [bench] [flat] [profile] [sweep] [probe] [mixes]
set -uo pipefail
DEST=${OUT:-/tmp/out}; mkdir -p "$DEST"
WORK=$(mktemp -d /tmp/gpuwork.XXXX)
# copy back whatever exists when the command ends, also when the device's time limit
# stops it (SIGTERM): run 22 lost a whole sweep's log that way
pack() {
  for f in bench8.log sweep.log profile.log smoke.log probe.log mixes.log; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$DEST/"
  done
  tar czf "$DEST/gpu-results.tar.gz" -C "$WORK" .
}
trap 'pack; exit 124' TERM INT
stages=()
for s in "$@"; do
  if [ "$s" = tests ]; then
    OUT=$WORK LIMIT=${LIMIT:-200} bash bench/gpu_tests_parallel.sh 2>&1 | tail -8 \
      | tee "$DEST/tests-summary.log"
  else
    stages+=("$s")
  fi
done
if [ ${#stages[@]} -gt 0 ]; then OUT=$WORK bash bench/gpu_sampler.sh "${stages[@]}"; fi
pack
