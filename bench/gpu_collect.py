"""Merge the per-vocabulary files of `bench/gpu_tests_parallel.sh` into one record each.

The script writes `tests-<V>.log` and `equality-<V>.json` per vocabulary of the grid and
`tests-rest.log` for the other tests. This writes, into the same folder, `tests.log` (each log
under a `== tests-<V>.log` header: the order alone does not say which vocabulary a block is)
and `equality.json` ({V: that vocabulary's report}), and prints the equal / total draw count
and every difference. `gpu_tests_parallel.sh` runs it on the device; on an archive unpacked
here:

    python bench/gpu_collect.py DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _vocab(path: Path) -> str:
    return re.fullmatch(r"[a-z]+-(\w+)\.\w+", path.name).group(1)


def collect(folder: Path) -> tuple[int, int]:
    def order(path: Path) -> float:  # by vocabulary, `rest` last
        v = _vocab(path)
        return int(v) if v.isdigit() else float("inf")

    logs = sorted(folder.glob("tests-*.log"), key=order)
    (folder / "tests.log").write_text(
        "".join(f"== {p.name}\n{p.read_text()}" for p in logs))
    reports = {_vocab(p): json.loads(p.read_text()) for p in sorted(folder.glob("equality-*.json"))}
    (folder / "equality.json").write_text(json.dumps(reports, indent=1))
    equal = total = 0
    for v, report in reports.items():
        for a, b in report["counts"].values():
            equal, total = equal + a, total + b
        for diff in report["differences"]:
            print(v, diff)
    return equal, total


if __name__ == "__main__":
    eq, tot = collect(Path(sys.argv[1]))
    print(f"{eq} / {tot} seeded draws equal the torch backend")
