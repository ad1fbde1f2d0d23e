"""The same-call A/B log of `chunk_ab.sh` as one line a size: each spec's repeats side by side
(sample | verify), specs in the log's order. Measurement."""
import collections
import re
import sys

d = collections.defaultdict(lambda: collections.defaultdict(list))
spec = None
with open(sys.argv[1]) as log:
    lines = log.readlines()
for line in lines:
    if line.startswith("=="):
        spec = line.split("chunks ", 1)[1].strip().replace("default+", "")
        continue
    m = re.match(r"B=\s*(\d+) V=\s*(\d+) sample\s+([\d.]+) verify\s+([\d.]+)", line)
    if m:
        d[(int(m[1]), int(m[2]))][spec].append((float(m[3]), float(m[4])))
specs = list(next(iter(d.values())).keys())
for i, s in enumerate(specs):
    print(f"[{i}] {s}")
for key, by in sorted(d.items()):
    print(f"B={key[0]:>3} V={key[1]:>6} sample " + " | ".join(
        "/".join(f"{s:.1f}" for s, _ in by[k]) for k in specs) + "   verify " + " | ".join(
        "/".join(f"{v:.1f}" for _, v in by[k]) for k in specs))
